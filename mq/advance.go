package mq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ndma/ndma/pool"
)

// DefaultSealTimeout is how long a partition's committed offset must
// stand still, with reservations after it, before a hole there is
// sealed, when Timing.SealTimeout is zero.
const DefaultSealTimeout = 2 * time.Second

// Timing is the timing every producer and consumer of a topic must
// agree on.
type Timing struct {
	// SealTimeout is how long the committed offset of a partition must
	// stand still at a reservation nobody completes before it is sealed
	// as a hole. A producer stops writing its batch, and a sealer its
	// skip marker, half of it after they began (Deadline): a write in
	// flight longer than that is taken for lost. Zero means
	// DefaultSealTimeout.
	SealTimeout time.Duration
}

func (t Timing) sealTimeout() time.Duration {
	if t.SealTimeout <= 0 {
		return DefaultSealTimeout
	}
	return t.SealTimeout
}

// helpAfter is how long a partition's committed offset must stand
// still before a producer waiting behind it helps move it (advance,
// which reads the batch there whole): until then that batch's own
// producer publishes it, and waiters read the committed word alone. A
// tenth of the write deadline: it delays the batches after a producer
// that died between its write and its publish, and keeps producers
// that wait for one another, many of them on one partition, from
// reading each other's batches.
func (t Timing) helpAfter() time.Duration { return t.Deadline() / 10 }

// standing tracks, in one waiter's loop, since when a partition's
// committed offset has stood at its value.
type standing struct {
	c     uint64
	since time.Time
}

// still records that the committed offset is c and returns how long it
// has stood there.
func (s *standing) still(c uint64) time.Duration {
	if s.since.IsZero() || c != s.c {
		s.c, s.since = c, time.Now()
	}
	return time.Since(s.since)
}

// Deadline is how long after its reservation (or a sealer's claim) a
// batch (or skip marker) may still be written.
func (t Timing) Deadline() time.Duration { return t.sealTimeout() / 2 }

// watch is what a handle saw of one partition while its committed
// offset stood still: since when, the tail then, and the seal claim.
type watch struct {
	committed, tail uint64
	since           time.Time
	claim           uint64
	claimSince      time.Time
}

// watcher keeps a handle's watches, one per partition.
type watcher struct {
	mu sync.Mutex // held for the bookkeeping only, never across I/O
	w  []watch
}

func newWatcher(parts int) *watcher { return &watcher{w: make([]watch, parts)} }

// stuck records that partition p's committed offset is c with tail
// reserved up to tail, and returns the watch: since when c has stood.
func (w *watcher) stuck(p int, c, tail uint64) watch {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.w[p].committed != c || w.w[p].since.IsZero() {
		w.w[p] = watch{committed: c, tail: tail, since: time.Now()}
	}
	return w.w[p]
}

// claimSeen records the seal claim seen on partition p and returns
// since when it has been there.
func (w *watcher) claimSeen(p int, claim uint64) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.w[p].claim != claim || w.w[p].claimSince.IsZero() {
		w.w[p].claim, w.w[p].claimSince = claim, time.Now()
	}
	return w.w[p].claimSince
}

// handle is what producers and consumers share: the topic, the timing,
// the watches of partitions standing still, and counts.
type handle struct {
	t                 *Topic
	tm                Timing
	w                 *watcher
	published, sealed atomic.Uint64
	// times is, per partition, the time index word last seen or
	// written (see indexTime).
	times []atomic.Uint64
}

func newHandle(t *Topic, tm Timing) handle {
	return handle{t: t, tm: tm, w: newWatcher(t.l.Partitions), times: make([]atomic.Uint64, t.l.Partitions)}
}

// advance moves partition p's committed offset forward by one step if
// it can: over the batch or skip marker at the committed offset when
// it is whole (helping its writer publish), or over a hole it seals
// once the offset has stood still for the seal timeout. It returns the
// partition's state as read before the step and whether it moved.
func (h *handle) advance(ctx context.Context, p int) (PartitionState, bool, error) {
	st, err := h.t.State(ctx, p)
	if err != nil || st.Committed >= st.Tail {
		return st, false, err
	}
	c := st.Committed
	m, whole, err := h.t.inspect(ctx, p, c)
	if err != nil {
		return st, false, err
	}
	if whole {
		if !m.skip() {
			// Its producer may have died before it indexed it.
			if err := h.indexTime(ctx, p, c, m.timestamp); err != nil {
				return st, false, err
			}
		}
		moved, err := h.publish(ctx, p, c, c+m.span, m.skip())
		if moved {
			h.published.Add(1)
		}
		return st, moved, err
	}
	w := h.w.stuck(p, c, st.Tail)
	if time.Since(w.since) < h.tm.sealTimeout() {
		return st, false, nil
	}
	sealed, err := h.seal(ctx, p, c, w.tail)
	if sealed {
		h.sealed.Add(1)
	}
	return st, sealed, err
}

// publish moves partition p's committed offset from c to end (over a
// batch or, when skip, a hole's marker) and counts the hole.
func (h *handle) publish(ctx context.Context, p int, c, end uint64, skip bool) (bool, error) {
	_, ok, err := h.t.cas(ctx, p, wordCommitted, c, end)
	if err != nil || !ok {
		return false, err
	}
	if skip {
		if _, err := h.t.ctl.FetchAdd(ctx, h.t.l.partAddr(p)+wordHoles, 1); err != nil {
			return true, fmt.Errorf("mq: counting a hole of partition %d: %w", p, err)
		}
	}
	return true, nil
}

// inspect reads the batch at offset off of partition p: its header,
// and whether the header and (for a batch) the body check.
func (t *Topic) inspect(ctx context.Context, p int, off uint64) (batchMeta, bool, error) {
	var hb [batchHeaderLen]byte
	if err := t.readLog(ctx, p, hb[:], off); err != nil {
		return batchMeta{}, false, err
	}
	m, err := parseBatchHeader(hb[:], off, t.l.MaxBatch)
	if err != nil {
		return batchMeta{}, false, nil
	}
	if m.skip() {
		return m, true, nil
	}
	body := make([]byte, m.bodyLen)
	if err := t.readLog(ctx, p, body, off+batchHeaderLen); err != nil {
		return m, false, err
	}
	_, err = parseBody(m, body)
	return m, err == nil, nil
}

// seal seals the hole at the committed offset c of partition p, whose
// tail was tail when the offset was first seen standing still: it
// claims the seal (or takes over a claim held a seal timeout), writes a
// skip marker over the hole and moves the committed offset past it.
// The hole ends at the first whole batch header after c, or at tail
// when there is none; a batch at c whose header checks but whose body
// does not is a hole of its span.
func (h *handle) seal(ctx context.Context, p int, c, tail uint64) (bool, error) {
	t := h.t
	w, err := t.word(ctx, p, wordClaim)
	if err != nil {
		return false, err
	}
	nu := c<<8 | 1
	if w>>8 == c {
		if time.Since(h.w.claimSeen(p, w)) < h.tm.sealTimeout() {
			return false, nil // another sealer is at it
		}
		if w&0xff == 0xff {
			return false, fmt.Errorf("mq: partition %d: 255 sealers of the hole at %d gave up", p, c)
		}
		nu = w + 1
	}
	began := time.Now()
	if _, ok, err := t.cas(ctx, p, wordClaim, w, nu); err != nil || !ok {
		return false, err
	}
	dctx, cancel := context.WithDeadline(ctx, began.Add(h.tm.Deadline()))
	defer cancel()
	if now, err := t.word(dctx, p, wordCommitted); err != nil || now != c {
		return false, err
	}
	end, err := t.holeEnd(dctx, p, c, tail)
	if err != nil {
		return false, err
	}
	if err := t.writeLog(dctx, p, skipMarker(c, end-c), c); err != nil && !errors.Is(err, pool.ErrDegraded) {
		return false, err
	}
	return h.publish(dctx, p, c, end, true)
}

// holeEnd finds where the hole at c of partition p ends: see seal.
func (t *Topic) holeEnd(ctx context.Context, p int, c, tail uint64) (uint64, error) {
	var hb [batchHeaderLen]byte
	if err := t.readLog(ctx, p, hb[:], c); err != nil {
		return 0, err
	}
	if m, err := parseBatchHeader(hb[:], c, t.l.MaxBatch); err == nil && !m.skip() && c+m.span <= tail {
		return c + m.span, nil
	}
	const chunk = 64 << 10
	buf := make([]byte, chunk)
	for at := c + Align; at < tail; at += chunk {
		n := min(chunk, tail-at)
		if err := t.readLog(ctx, p, buf[:n], at); err != nil {
			return 0, err
		}
		for i := uint64(0); i+batchHeaderLen <= n; i += Align {
			if _, err := parseBatchHeader(buf[i:i+batchHeaderLen], at+i, t.l.MaxBatch); err == nil {
				return at + i, nil
			}
		}
	}
	return tail, nil
}
