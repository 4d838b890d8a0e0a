package mq

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/ndma/ndma/pool"
)

// Acks is what a producer waits for before it acknowledges a batch.
type Acks int

const (
	// AcksAll (the zero value): the batch is published (the committed
	// offset is past it, so every reader from then on reads it) and
	// written to every copy the data region keeps.
	AcksAll Acks = iota
	// AcksOne: the batch is published and written to at least one copy
	// (with two copies and a memory node down, to the live one).
	AcksOne
)

// Errors of producing.
var (
	// ErrUnknownOutcome is wrapped by the error of a produce that may
	// or may not have been stored: the context ended before the
	// producer learned whether its batch was published. Produce the
	// same records again with the same Producer: it finds out first,
	// and does not store them twice.
	ErrUnknownOutcome = errors.New("mq: outcome unknown")
	// ErrNotAllCopies is wrapped by the error of an AcksAll produce
	// whose batch was published but reached only one of the data
	// region's two copies: stored, but not acknowledged as asked.
	ErrNotAllCopies = errors.New("mq: stored on one copy only")
)

// ProducerConfig configures a producer.
type ProducerConfig struct {
	// ID names the producer in every batch it writes, with a sequence
	// number per partition; zero means a random one.
	ID uint64
	// Acks is what a produce waits for.
	Acks Acks
	// Push, when set, multicasts every batch stored to the topic's
	// subscribers (see Subscription); Close stops it.
	Push *Push
	Timing
}

// Producer appends batches of records to a topic's partitions. Safe for
// concurrent use; produces to one partition are serialized.
type Producer struct {
	handle
	cfg   ProducerConfig
	parts []*prodPart
	push  *pusher // nil without Config.Push
	// pushErr is what is wrong with Config.Push: every produce fails
	// with it.
	pushErr error
	// Counts.
	batches, retries, dedup atomic.Uint64
}

// prodPart is a producer's state for one partition.
type prodPart struct {
	lock chan struct{} // a channel: held across network waits
	seq  uint64        // the last sequence number used
	// pending is the last produce whose outcome is unknown: its batch
	// and where it was reserved.
	pending *attempt
}

type attempt struct {
	seq  uint64
	off  uint64
	meta batchMeta
	rt   recordTimes // its records' own times
	body []byte      // the encoded batch
}

// NewProducer returns a producer of topic t.
func NewProducer(t *Topic, cfg ProducerConfig) *Producer {
	for cfg.ID == 0 {
		cfg.ID = rand.Uint64()
	}
	p := &Producer{handle: newHandle(t, cfg.Timing), cfg: cfg}
	for range t.l.Partitions {
		p.parts = append(p.parts, &prodPart{lock: make(chan struct{}, 1)})
	}
	if cfg.Push != nil {
		if p.pushErr = cfg.Push.check(); p.pushErr == nil {
			p.push = newPusher(t, *cfg.Push, cfg.ID)
		}
	}
	return p
}

// Close stops the producer's pushes (Config.Push), after pushing the
// batches it stored and had not pushed yet (unless its group broke or is
// not formed), and leaves its push group; without Push it does nothing.
// Produce must not be called after it.
func (p *Producer) Close() {
	if p.push != nil {
		p.push.close()
	}
}

// ID is the producer's id.
func (p *Producer) ID() uint64 { return p.cfg.ID }

// Ack is where an acknowledged batch lies.
type Ack struct {
	Partition int
	// Offset is the batch's offset; its records are at Offset with
	// Index 0, 1, ...
	Offset   uint64
	Sequence uint64
	// Degraded: the batch reached one of the data region's two copies.
	Degraded bool
	// Duplicate: a produce of the same records whose outcome was unknown
	// had stored them; this is its acknowledgement, nothing new was
	// written.
	Duplicate bool
}

// Produce appends recs to partition part as one batch and returns where
// it lies once it is acknowledged (Acks). A batch is either stored
// whole or not at all, and never stored twice by one Producer.
func (p *Producer) Produce(ctx context.Context, part int, recs []Record) (Ack, error) {
	if err := p.t.checkPartition(part); err != nil {
		return Ack{}, err
	}
	if p.pushErr != nil {
		return Ack{}, p.pushErr
	}
	if len(recs) == 0 {
		return Ack{}, fmt.Errorf("%w: a batch of no records", ErrBadRequest)
	}
	if n := BatchBytes(recs); uint64(n) > p.t.l.MaxBatch {
		return Ack{}, fmt.Errorf("%w: %d bytes (at most %d with the header)", ErrTooLarge, n, p.t.l.MaxBatch)
	}
	pp := p.parts[part]
	select {
	case pp.lock <- struct{}{}:
	case <-ctx.Done():
		return Ack{}, ctx.Err()
	}
	defer func() { <-pp.lock }()
	enc, meta := encodeBatch(batchMeta{producer: p.cfg.ID}, recs)
	a := pp.pending
	if a != nil && sameRecords(a.body, enc, a.meta, meta) {
		// The same records again after an unknown outcome: settle the
		// earlier reservation first.
		stored, err := p.settle(ctx, part, a)
		if err != nil {
			return Ack{}, fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
		}
		pp.pending = nil
		if stored {
			p.dedup.Add(1)
			return Ack{Partition: part, Offset: a.off, Sequence: a.seq, Duplicate: true}, nil
		}
	} else {
		pp.seq++
		a = &attempt{seq: pp.seq, meta: meta, rt: timesOf(recs), body: enc}
	}
	pp.pending = nil
	ack, err := p.produce(ctx, part, a)
	if errors.Is(err, ErrUnknownOutcome) {
		pp.pending = a
	}
	return ack, err
}

// produce stores a's batch, reserving space again each time a
// reservation ends not stored.
func (p *Producer) produce(ctx context.Context, part int, a *attempt) (Ack, error) {
	for try := 0; ; try++ {
		if try > 0 {
			p.retries.Add(1)
		}
		began := time.Now()
		off, err := p.t.ctl.FetchAdd(ctx, p.t.l.partAddr(part)+wordTail, uint64(len(a.body)))
		if err != nil {
			// The reservation may have been made: it is a hole, sealed
			// in time. Nothing was written.
			if serr := sleep(ctx, time.Millisecond); serr != nil {
				return Ack{}, fmt.Errorf("mq: reserving in partition %d: %w", part, errors.Join(serr, err))
			}
			continue
		}
		if off+uint64(len(a.body)) > maxOffset {
			return Ack{}, fmt.Errorf("%w: partition %d is at offset %d, the largest", ErrBadRequest, part, off)
		}
		a.off = off
		werr := p.write(ctx, part, a, began)
		degraded := errors.Is(werr, pool.ErrDegraded) // written, to one copy
		if (werr == nil || degraded) && p.publishOwn(ctx, part, a) == nil {
			return p.ack(part, a, degraded)
		}
		stored, err := p.settle(ctx, part, a)
		switch {
		case err != nil:
			return Ack{}, fmt.Errorf("%w: partition %d offset %d: %w", ErrUnknownOutcome, part, off, errors.Join(werr, err))
		case stored:
			return p.ack(part, a, degraded)
		}
		if ctx.Err() != nil {
			return Ack{}, fmt.Errorf("mq: partition %d: not stored: %w", part, errors.Join(werr, ctx.Err()))
		}
	}
}

func (p *Producer) ack(part int, a *attempt, degraded bool) (Ack, error) {
	p.batches.Add(1)
	if p.push != nil {
		p.push.offer(part, a.body[:batchHeaderLen+int(a.meta.bodyLen)])
	}
	ack := Ack{Partition: part, Offset: a.off, Sequence: a.seq, Degraded: degraded}
	if degraded && p.cfg.Acks == AcksAll {
		return ack, fmt.Errorf("mq: partition %d offset %d: %w", part, a.off, ErrNotAllCopies)
	}
	return ack, nil
}

// write makes room for a's batch (dropping the oldest segment when the
// ring is full) and writes it, all before the write deadline counted
// from began, when the reservation was asked for.
func (p *Producer) write(ctx context.Context, part int, a *attempt, began time.Time) error {
	dctx, cancel := context.WithDeadline(ctx, began.Add(p.tm.Deadline()))
	defer cancel()
	if err := p.room(dctx, part, a.off+uint64(len(a.body))); err != nil {
		return err
	}
	m := a.meta
	m.offset, m.seq = a.off, a.seq
	m = stampBatch(a.body, m, a.rt, time.Now().UnixNano())
	putBatchHeader(a.body, m)
	// The time index is raised before the batch is published, alongside
	// its write (when the handle does not know it is high enough).
	index := p.startIndexTime(dctx, part, a.off, m.timestamp)
	err := p.t.writeLog(dctx, part, a.body, a.off)
	if ie := index(); ie != nil && (err == nil || errors.Is(err, pool.ErrDegraded)) {
		err = ie
	}
	return err
}

// publishOwn moves the committed offset over a's batch, which this
// producer wrote whole, once every earlier batch is published or
// sealed: it helps publish those, and seals holes among them.
func (p *Producer) publishOwn(ctx context.Context, part int, a *attempt) error {
	end := a.off + uint64(len(a.body))
	var sd standing
	for wait := 10 * time.Microsecond; ; wait = min(2*wait, 5*time.Millisecond) {
		c, err := p.t.word(ctx, part, wordCommitted)
		if err != nil {
			return err
		}
		switch {
		case c == a.off:
			if _, ok, err := p.t.cas(ctx, part, wordCommitted, c, end); ok || err != nil {
				return err
			}
			continue
		case c > a.off:
			return errSettle
		}
		// The batches before a's are their producers' to publish: this
		// one helps (reading the batch at the committed offset) only
		// once the offset has stood still a while.
		if sd.still(c) >= p.tm.helpAfter() {
			if _, moved, err := p.advance(ctx, part); err != nil || moved {
				continue
			}
		}
		if err := sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// errSettle: the committed offset passed a batch its producer did not
// publish itself: whether it was stored is read from the log.
var errSettle = errors.New("mq: settle")

// settle finds out whether a's reservation ended stored: it waits
// (helping, and sealing holes) until the committed offset is past it,
// then reads what lies at its offset: its batch, or a skip marker.
func (p *Producer) settle(ctx context.Context, part int, a *attempt) (bool, error) {
	for wait := 10 * time.Microsecond; ; wait = min(2*wait, 5*time.Millisecond) {
		st, moved, err := p.advance(ctx, part)
		if err == nil && st.Committed > a.off {
			m, whole, err := p.t.inspect(ctx, part, a.off)
			var start uint64
			if err == nil {
				start, err = p.t.word(ctx, part, wordStart)
			}
			if err == nil && start > a.off {
				// Dropped by retention: what was read may be newer data.
				return false, fmt.Errorf("partition %d offset %d: dropped (the log starts at %d) before it was settled", part, a.off, start)
			}
			if err == nil {
				return whole && !m.skip() && m.producer == p.cfg.ID && m.seq == a.seq, nil
			}
		}
		if moved {
			continue
		}
		if err := sleep(ctx, wait); err != nil {
			return false, err
		}
	}
}

// room waits until the ring of partition part has room for offsets up
// to end, dropping its oldest segments (moving the start) once the
// committed offset is past them: it helps publish and seals holes
// meanwhile.
func (h *handle) room(ctx context.Context, part int, end uint64) error {
	ring, seg := h.t.l.ring(), h.t.l.SegmentBytes
	var sd standing
	for wait := 10 * time.Microsecond; ; wait = min(2*wait, 5*time.Millisecond) {
		s, err := h.t.word(ctx, part, wordStart)
		if err != nil {
			return err
		}
		if end <= s+ring {
			return nil
		}
		drop := (end - ring + seg - 1) / seg * seg
		st, err := h.t.State(ctx, part)
		moved := false
		if err == nil && st.Committed < drop && sd.still(st.Committed) >= h.tm.helpAfter() {
			st, moved, err = h.advance(ctx, part)
		}
		if err != nil {
			return err
		}
		if st.Committed >= drop {
			if _, _, err := h.t.cas(ctx, part, wordStart, s, drop); err != nil {
				return err
			}
			continue
		}
		if moved {
			continue
		}
		if err := sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// ProducerStats count a producer's work.
type ProducerStats struct {
	// Batches counts batches stored; Retries reservations that ended
	// not stored (sealed as holes) and were made again; Duplicates
	// produces found already stored by an earlier try.
	Batches, Retries, Duplicates uint64
	// Published and Sealed count other producers' batches this one
	// published and holes it sealed.
	Published, Sealed uint64
	// Pushed counts batches multicast to subscribers (Config.Push);
	// PushDropped batches not pushed although there may have been
	// subscribers (a full queue or window, a group that broke, larger
	// than MaxPushBatch): the subscribers read them from the log;
	// PushGroups the push groups formed.
	Pushed, PushDropped, PushGroups uint64
}

// Stats returns the producer's counts.
func (p *Producer) Stats() ProducerStats {
	st := ProducerStats{Batches: p.batches.Load(), Retries: p.retries.Load(), Duplicates: p.dedup.Load(),
		Published: p.published.Load(), Sealed: p.sealed.Load()}
	if p.push != nil {
		st.Pushed, st.PushDropped, st.PushGroups = p.push.pushed.Load(), p.push.dropped.Load(), p.push.formed.Load()
	}
	return st
}
