package kv

import (
	"context"
	"fmt"
	"sync"
)

// MaxBatchInFlight is how many of a batch's keys GetMulti and SetMulti
// have in flight at once.
const MaxBatchInFlight = 32

// GetMulti reads the values of keys (one-sidedly, as GetItem does), with
// up to MaxBatchInFlight keys in flight at once, so a batch of cached
// keys costs about one round trip per MaxBatchInFlight keys. items[i]
// and errs[i] are key i's result (errs[i] is ErrNotFound for a key with
// no value).
func (c *Client) GetMulti(ctx context.Context, keys [][]byte) (items []Item, errs []error) {
	items, errs = make([]Item, len(keys)), make([]error, len(keys))
	each(len(keys), func(i int) { items[i], errs[i] = c.GetItem(ctx, keys[i]) })
	return items, errs
}

// SetMulti stores vals[i] under keys[i] with the expiry and flags of o,
// with up to MaxBatchInFlight writes in flight at once. vers[i] and
// errs[i] are key i's result; the writes are independent (each is
// applied, or fails, on its own) and a key given twice has one of its
// values stored, unspecified which.
func (c *Client) SetMulti(ctx context.Context, keys, vals [][]byte, o SetOptions) (vers []uint64, errs []error, err error) {
	if len(keys) != len(vals) {
		return nil, nil, fmt.Errorf("%w: %d keys and %d values", ErrBadRequest, len(keys), len(vals))
	}
	if err := o.check(); err != nil {
		return nil, nil, err
	}
	vers, errs = make([]uint64, len(keys)), make([]error, len(keys))
	each(len(keys), func(i int) { vers[i], errs[i] = c.SetWith(ctx, keys[i], vals[i], o) })
	return vers, errs, nil
}

// each runs f(0..n-1) with at most MaxBatchInFlight calls at once.
func each(n int, f func(i int)) {
	sem := make(chan struct{}, MaxBatchInFlight)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(i)
		})
	}
	wg.Wait()
}
