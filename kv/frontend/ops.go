package frontend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ndma/ndma/kv"
)

// casTries bounds the compare-and-swap rounds of an operation the store
// does not do in one write, when other writes to the key keep winning.
const casTries = 64

// errContended is such an operation's failure.
var errContended = errors.New("the key was rewritten during every try")

// remaining is the time to live left of it (zero: none), or false when
// it expires now.
func remaining(it kv.Item) (time.Duration, bool) {
	if it.Expires.IsZero() {
		return 0, true
	}
	d := time.Until(it.Expires)
	return d, d > 0
}

// decr subtracts d from key's value, an unsigned decimal integer, down
// to 0 (memcached's decr), keeping flags and expiry.
func decr(ctx context.Context, st Store, key []byte, d uint64) (uint64, error) {
	for range casTries {
		it, err := st.GetItem(ctx, key)
		if err != nil {
			return 0, err
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(it.Value)), 10, 64)
		if err != nil {
			return 0, kv.ErrNotInteger
		}
		n -= min(n, d)
		ttl, ok := remaining(it)
		if !ok {
			return 0, kv.ErrNotFound
		}
		_, err = st.CompareAndSwapWith(ctx, key, strconv.AppendUint(nil, n, 10), it.Version, kv.SetOptions{TTL: ttl, Flags: it.Flags})
		if !errors.Is(err, kv.ErrExists) {
			return n, err
		}
	}
	return 0, fmt.Errorf("decr: %w", errContended)
}

// incrBy adds delta to key's value, a decimal integer, starting from 0
// when the key is absent (Redis's INCRBY).
func incrBy(ctx context.Context, st Store, key []byte, delta int64) (int64, error) {
	for range casTries {
		n, err := st.Incr(ctx, key, delta)
		if !errors.Is(err, kv.ErrNotFound) {
			return n, err
		}
		_, err = st.AddWith(ctx, key, strconv.AppendInt(nil, delta, 10), kv.SetOptions{})
		if !errors.Is(err, kv.ErrExists) {
			return delta, err
		}
	}
	return 0, fmt.Errorf("incr: %w", errContended)
}
