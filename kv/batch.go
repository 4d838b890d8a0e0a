package kv

import (
	"context"
	"fmt"
	"sync"
)

// MaxBatchInFlight is how many of a batch's keys GetMulti, and how many
// of its requests SetMulti, have in flight at once.
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

// SetMulti stores vals[i] under keys[i] with the expiry and flags of o.
// The keys of one shard travel to its owner together, in requests of up
// to 256 keys and 60 KiB, which the owner applies one after the other;
// up to MaxBatchInFlight requests are in flight at once. vers[i] and
// errs[i] are key i's result: each key is stored, or fails, on its own
// (a request that gets no answer fails all its keys with
// ErrUnknownOutcome), and a key given twice has one of its values
// stored, unspecified which.
func (c *Client) SetMulti(ctx context.Context, keys, vals [][]byte, o SetOptions) (vers []uint64, errs []error, err error) {
	if len(keys) != len(vals) {
		return nil, nil, fmt.Errorf("%w: %d keys and %d values", ErrBadRequest, len(keys), len(vals))
	}
	if err := o.check(); err != nil {
		return nil, nil, err
	}
	vers, errs = make([]uint64, len(keys)), make([]error, len(keys))
	batches := c.batches(keys, vals, errs)
	each(len(batches), func(b int) { c.setBatch(ctx, batches[b], keys, vals, o, vers, errs) })
	return vers, errs, nil
}

// batch is the keys (their indices) of one SetMulti request.
type batch struct {
	shard int
	idx   []int
}

// batches groups the valid keys by shard into requests within the
// bounds; an invalid key gets its error in errs and is left out.
func (c *Client) batches(keys, vals [][]byte, errs []error) []batch {
	var out []batch
	open := map[int]int{} // shard: its batch being filled, in out
	size := map[int]int{}
	for i, k := range keys {
		if len(k) == 0 || len(k) > MaxKey {
			errs[i] = fmt.Errorf("%w: key of %d bytes (1 to %d)", ErrTooLarge, len(k), MaxKey)
			continue
		}
		if max := c.l.MaxValue(len(k)); len(vals[i]) > max {
			errs[i] = fmt.Errorf("%w: value of %d bytes (at most %d with this key)", ErrTooLarge, len(vals[i]), max)
			continue
		}
		s := c.l.place(k).shard
		n := batchEntryFixed + len(k) + len(vals[i])
		b, ok := open[s]
		if !ok || len(out[b].idx) == maxBatchEntries || size[s]+n > maxBatchBytes {
			out = append(out, batch{shard: s})
			b, size[s] = len(out)-1, 0
			open[s] = b
		}
		out[b].idx = append(out[b].idx, i)
		size[s] += n
	}
	return out
}

// setBatch sends one batch and records its keys' results.
func (c *Client) setBatch(ctx context.Context, b batch, keys, vals [][]byte, o SetOptions, vers []uint64, errs []error) {
	var entries []byte
	for _, i := range b.idx {
		entries = appendBatchEntry(entries, keys[i], vals[i])
	}
	r := &request{op: opSetBatch, key: keys[b.idx[0]], val: entries, ttl: int64(o.TTL), flags: o.Flags}
	body, _, err := c.writeShard(ctx, b.shard, r)
	if err == nil && len(body) != 9*len(b.idx) {
		err = fmt.Errorf("%w: a batch of %d keys answered with %d bytes", ErrBadRequest, len(b.idx), len(body))
	}
	for j, i := range b.idx {
		if err != nil {
			errs[i] = err
			continue
		}
		st, ver, _, _ := parseReply(body[9*j : 9*j+9])
		vers[i], errs[i] = ver, statusErr(st)
	}
}

// applyBatch applies an opSetBatch request of shard on its locked
// shard: every entry must be of that shard (else nothing is applied),
// then each is a Set. The body holds each entry's status and version.
func (o *Owner) applyBatch(sh *shard, shard int, r *request) (byte, []byte) {
	keys, vals, err := parseBatch(r.val)
	if err != nil {
		return stBad, nil
	}
	for _, k := range keys {
		if len(k) == 0 || len(k) > MaxKey || o.l.place(k).shard != shard {
			return stBad, nil
		}
	}
	body := make([]byte, 0, 9*len(keys))
	for i, k := range keys {
		e := request{op: opSet, key: k, val: vals[i], ttl: r.ttl, flags: r.flags}
		st, ver, _ := o.apply(sh, o.l.place(k), &e)
		o.count(st)
		body = appendReply(body, st, ver, nil)
	}
	o.mu.Lock()
	o.stats.Batches++
	o.mu.Unlock()
	return stOK, body
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
