package frontend

import (
	"bytes"
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/ndma/ndma/kv"
)

// memStore is a Store in this process's memory with the key space's
// semantics (versions, expiry by the clock, flags), for the protocol
// tests.
type memStore struct {
	mu       sync.Mutex
	m        map[string]kv.Item
	ver      uint64
	maxValue int
}

func newMemStore(maxValue int) *memStore {
	return &memStore{m: make(map[string]kv.Item), maxValue: maxValue}
}

func (s *memStore) MaxValue(klen int) int { return s.maxValue - klen }

// live returns key's item unless absent or expired.
func (s *memStore) live(key []byte) (kv.Item, bool) {
	it, ok := s.m[string(key)]
	if ok && !it.Expires.IsZero() && !time.Now().Before(it.Expires) {
		delete(s.m, string(key))
		return kv.Item{}, false
	}
	return it, ok
}

func (s *memStore) GetItem(_ context.Context, key []byte) (kv.Item, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it, ok := s.live(key)
	if !ok {
		return kv.Item{}, kv.ErrNotFound
	}
	it.Value = bytes.Clone(it.Value)
	return it, nil
}

func (s *memStore) GetMulti(ctx context.Context, keys [][]byte) ([]kv.Item, []error) {
	items, errs := make([]kv.Item, len(keys)), make([]error, len(keys))
	for i, k := range keys {
		items[i], errs[i] = s.GetItem(ctx, k)
	}
	return items, errs
}

func (s *memStore) SetMulti(ctx context.Context, keys, vals [][]byte, o kv.SetOptions) ([]uint64, []error, error) {
	vers, errs := make([]uint64, len(keys)), make([]error, len(keys))
	for i, k := range keys {
		vers[i], errs[i] = s.SetWith(ctx, k, vals[i], o)
	}
	return vers, errs, nil
}

func (s *memStore) put(key, val []byte, o kv.SetOptions) (uint64, error) {
	if len(val) > s.MaxValue(len(key)) {
		return 0, kv.ErrTooLarge
	}
	s.ver++
	it := kv.Item{Value: bytes.Clone(val), Version: s.ver, Flags: o.Flags}
	if o.TTL > 0 {
		it.Expires = time.Now().Add(o.TTL)
	}
	s.m[string(key)] = it
	return s.ver, nil
}

// write applies a conditional write: cond sees the item and whether it
// exists and returns the error refusing it, or nil.
func (s *memStore) write(key, val []byte, o kv.SetOptions, cond func(kv.Item, bool) error) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it, ok := s.live(key)
	if err := cond(it, ok); err != nil {
		return it.Version, err
	}
	return s.put(key, val, o)
}

func (s *memStore) SetWith(_ context.Context, key, val []byte, o kv.SetOptions) (uint64, error) {
	return s.write(key, val, o, func(kv.Item, bool) error { return nil })
}

func (s *memStore) AddWith(_ context.Context, key, val []byte, o kv.SetOptions) (uint64, error) {
	return s.write(key, val, o, func(_ kv.Item, ok bool) error {
		if ok {
			return kv.ErrExists
		}
		return nil
	})
}

func present(_ kv.Item, ok bool) error {
	if !ok {
		return kv.ErrNotFound
	}
	return nil
}

func (s *memStore) Replace(_ context.Context, key, val []byte, o kv.SetOptions) (uint64, error) {
	return s.write(key, val, o, present)
}

func (s *memStore) CompareAndSwapWith(_ context.Context, key, val []byte, ver uint64, o kv.SetOptions) (uint64, error) {
	return s.write(key, val, o, func(it kv.Item, ok bool) error {
		if !ok {
			return kv.ErrNotFound
		}
		if it.Version != ver {
			return kv.ErrExists
		}
		return nil
	})
}

// modify rewrites key's present value as f makes it, keeping flags and
// expiry unless f changes them.
func (s *memStore) modify(key []byte, f func(*kv.Item) error) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it, ok := s.live(key)
	if !ok {
		return 0, kv.ErrNotFound
	}
	if err := f(&it); err != nil {
		return 0, err
	}
	if len(it.Value) > s.MaxValue(len(key)) {
		return 0, kv.ErrTooLarge
	}
	s.ver++
	it.Version = s.ver
	s.m[string(key)] = it
	return s.ver, nil
}

func (s *memStore) Append(_ context.Context, key, val []byte) (uint64, error) {
	return s.modify(key, func(it *kv.Item) error { it.Value = append(bytes.Clone(it.Value), val...); return nil })
}

func (s *memStore) Prepend(_ context.Context, key, val []byte) (uint64, error) {
	return s.modify(key, func(it *kv.Item) error { it.Value = append(bytes.Clone(val), it.Value...); return nil })
}

func (s *memStore) Touch(_ context.Context, key []byte, ttl time.Duration) (uint64, error) {
	return s.modify(key, func(it *kv.Item) error {
		it.Expires = time.Time{}
		if ttl > 0 {
			it.Expires = time.Now().Add(ttl)
		}
		return nil
	})
}

func (s *memStore) Incr(_ context.Context, key []byte, delta int64) (int64, error) {
	var sum int64
	_, err := s.modify(key, func(it *kv.Item) error {
		n, err := strconv.ParseInt(string(it.Value), 10, 64)
		sum = n + delta
		if err != nil || (delta > 0 && sum < n) || (delta < 0 && sum > n) {
			return kv.ErrNotInteger
		}
		it.Value = strconv.AppendInt(nil, sum, 10)
		return nil
	})
	return sum, err
}

func (s *memStore) Delete(_ context.Context, key []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.live(key); !ok {
		return kv.ErrNotFound
	}
	delete(s.m, string(key))
	return nil
}
