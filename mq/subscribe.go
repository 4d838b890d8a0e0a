package mq

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/wire/ctrl"
)

// Subscription is a consumer that takes the batches producers push,
// and reads from the log what it missed: a pushed batch past its
// position in a partition (an offset that jumps: batches lost, pushed
// before it joined, or dropped) makes it read the log from its position
// to the batch first, and a partition with nothing pushed for
// Push.Idle is read from the log up to its committed offset. So it
// returns each partition's records in order, none twice and none
// skipped, as Consumer.Fetch does. Not safe for concurrent use, nor
// together with its Consumer's Fetch.
type Subscription struct {
	c       *Consumer
	cfg     Push
	svc     *endpoint.Service
	in      chan []byte // pushed batches received, bounded
	held    []byte      // a pushed batch waiting for the log before it
	seen    []time.Time // per partition: when it was last pushed or read
	next    int         // the partition to look at first when idle
	ctx     context.Context
	cancel  context.CancelFunc
	mu      sync.Mutex // guards svc, groups and joining
	groups  map[*endpoint.Group]struct{}
	joining int // invitations being joined
	wg      sync.WaitGroup
	// Counts.
	pushed, repaired, overflow, stale, rejected, joined, registered atomic.Uint64
}

// SubscriptionStats count a subscription's work.
type SubscriptionStats struct {
	// Pushed counts records taken from pushed batches; Repaired those
	// read from the log instead (missed, or pushed before they were
	// needed).
	Pushed, Repaired uint64
	// Overflow counts pushed batches dropped because the subscription's
	// queue was full; Stale those that arrived behind its position
	// (read from the log already); Rejected push messages that did not
	// check (a tag not made with the topic's key, a bad batch header).
	Overflow, Stale, Rejected uint64
	// Groups counts the push groups joined; Registered the times the
	// subscription registered again with the switch (which restarted,
	// or counted it dead).
	Groups, Registered uint64
}

// subscriptionQueue bounds the pushed batches a subscription holds;
// maxPushGroups the producers' groups it is a member of at once.
const (
	subscriptionQueue = 256
	maxPushGroups     = 64
)

// Subscribe makes c a subscriber of its topic's pushes, from its
// positions on: it registers in the topic's push service at push's
// switch, so that producers invite it into their push groups. Close
// ends it.
func (c *Consumer) Subscribe(ctx context.Context, push Push) (*Subscription, error) {
	if err := push.check(); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.Background())
	s := &Subscription{c: c, cfg: push, in: make(chan []byte, subscriptionQueue), seen: make([]time.Time, c.t.l.Partitions),
		ctx: sctx, cancel: cancel, groups: make(map[*endpoint.Group]struct{})}
	now := time.Now()
	for i := range s.seen {
		s.seen[i] = now
	}
	if err := s.register(ctx); err != nil {
		cancel()
		return nil, err
	}
	s.wg.Go(s.supervise)
	return s, nil
}

// register makes the subscription a member of the topic's push service.
func (s *Subscription) register(ctx context.Context) error {
	svc, err := s.cfg.Endpoint.RegisterService(ctx, s.cfg.Switch, endpoint.ServiceConfig{Name: pushService(s.c.t), Size: MaxSubscribers,
		Policy: ctrl.PolicyKeyAffinity, Ranges: pushRanges()}, -1, s.invited, s.cfg.Fabric)
	if err != nil {
		return fmt.Errorf("mq: subscribing to %q: %w", s.c.t.ref.Name, err)
	}
	s.mu.Lock()
	s.svc = svc
	s.mu.Unlock()
	return nil
}

// supervise registers the subscription again when the switch stopped
// confirming its membership (it restarted, or counted it dead while its
// link was down) for four heartbeat intervals.
func (s *Subscription) supervise() {
	iv := 4 * s.cfg.Fabric.HeartbeatInterval()
	t := time.NewTimer(iv)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		svc := s.svc
		s.mu.Unlock()
		if wait := iv - time.Since(svc.Confirmed()); wait > 0 {
			t.Reset(wait + iv/4) // not on a heartbeat's instant
			continue
		}
		svc.Close()
		ctx, cancel := context.WithTimeout(s.ctx, iv/2)
		if s.register(ctx) == nil {
			s.registered.Add(1)
		}
		cancel()
		t.Reset(iv)
	}
}

// Consumer is the subscription's consumer: its positions, and what
// commits them.
func (s *Subscription) Consumer() *Consumer { return s.c }

// Stats returns the subscription's counts.
func (s *Subscription) Stats() SubscriptionStats {
	return SubscriptionStats{Pushed: s.pushed.Load(), Repaired: s.repaired.Load(), Overflow: s.overflow.Load(),
		Stale: s.stale.Load(), Rejected: s.rejected.Load(), Groups: s.joined.Load(), Registered: s.registered.Load()}
}

// Close leaves the push service and every push group.
func (s *Subscription) Close() {
	s.mu.Lock()
	s.cancel() // invited starts no member from now on
	s.mu.Unlock()
	s.wg.Wait()
	s.svc.Close()
}

// invited is the push service's handler: a producer's invitation into
// its push group, joined in the background.
func (s *Subscription) invited(_ uint64, _ endpoint.Caller, req []byte) ([]byte, error) {
	job, size, rank, err := parseInvite(s.c.t, req)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil || len(s.groups)+s.joining >= maxPushGroups {
		return nil, fmt.Errorf("mq: the subscription is closed or in %d push groups", len(s.groups)+s.joining)
	}
	s.joining++
	s.wg.Go(func() { s.member(job, size, rank) })
	return nil, nil
}

// member joins a push group and receives its pushes until the group
// ends (its producer left or died) or the subscription closes.
func (s *Subscription) member(job string, size, rank int) {
	jctx, cancel := context.WithTimeout(s.ctx, pushJoinWait)
	g, err := s.cfg.Endpoint.JoinJob(jctx, s.cfg.Switch, job, size, rank, s.cfg.Fabric)
	cancel()
	s.mu.Lock()
	s.joining--
	if err == nil {
		s.groups[g] = struct{}{}
	}
	s.mu.Unlock()
	if err != nil {
		return
	}
	s.joined.Add(1)
	defer func() {
		s.mu.Lock()
		delete(s.groups, g)
		s.mu.Unlock()
		lctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = g.Leave(lctx)
		cancel()
	}()
	buf := make([]byte, pushPrefix+min(int(s.c.t.l.MaxBatch), MaxPushBatch)+pushTagLen)
	for {
		n, err := g.RecvAtMost(s.ctx, 0, buf)
		if err != nil {
			return
		}
		select {
		case s.in <- append([]byte(nil), buf[:n]...):
		default:
			s.overflow.Add(1)
		}
	}
}

// Next returns records of one partition in order, pushed or read from
// the log, and moves that partition's position past them. It waits up
// to wait for some, and returns none if none came.
func (s *Subscription) Next(ctx context.Context, wait time.Duration) ([]Record, error) {
	deadline := time.Now().Add(wait)
	for {
		m := s.held
		s.held = nil
		if m == nil {
			select {
			case m = <-s.in:
			default:
			}
		}
		if m != nil {
			recs, err := s.take(ctx, m)
			if err != nil || len(recs) > 0 {
				return recs, err
			}
			continue
		}
		recs, err := s.idle(ctx)
		if err != nil || len(recs) > 0 {
			return recs, err
		}
		now := time.Now()
		if !now.Before(deadline) {
			return nil, nil
		}
		t := time.NewTimer(min(deadline.Sub(now), s.cfg.idle()))
		select {
		case m = <-s.in:
			s.held = m
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
		t.Stop()
	}
}

// take returns the records of pushed batch m, or of the log before it
// when it lies past the partition's position (m is then held for the
// next call), or none when it lies behind.
func (s *Subscription) take(ctx context.Context, m []byte) ([]Record, error) {
	p, meta, body, err := s.parsePush(m)
	if err != nil {
		s.rejected.Add(1)
		return nil, nil
	}
	c := s.c
	s.seen[p] = time.Now()
	if meta.offset < c.pos[p] {
		s.stale.Add(1)
		return nil, nil
	}
	if meta.offset > c.pos[p] {
		// A gap: every batch before a pushed one is committed. Each read
		// moves the position (over batches, skip markers, or to the
		// log's start after retention) until it reaches the batch.
		s.held = m
		recs, err := c.read(ctx, p, meta.offset)
		s.repaired.Add(uint64(len(recs)))
		return recs, err
	}
	recs, err := parseBody(meta, body)
	if err != nil {
		c.corrupt.Add(1)
		s.held = m
		return s.readOver(ctx, p, meta.offset+meta.span)
	}
	for i := range recs {
		recs[i].Partition = p
	}
	c.pos[p], c.lost[p] = meta.offset+meta.span, false
	c.batches.Add(1)
	c.records.Add(uint64(len(recs)))
	s.pushed.Add(uint64(len(recs)))
	return recs, nil
}

// readOver reads partition p's log up to end instead of a pushed batch
// that did not check.
func (s *Subscription) readOver(ctx context.Context, p int, end uint64) ([]Record, error) {
	s.held = nil
	recs, err := s.c.read(ctx, p, end)
	s.repaired.Add(uint64(len(recs)))
	return recs, err
}

// parsePush checks a pushed batch.
func (s *Subscription) parsePush(m []byte) (int, batchMeta, []byte, error) {
	m, err := pushUntag(s.c.t, m)
	if err != nil {
		return 0, batchMeta{}, nil, err
	}
	if len(m) < pushPrefix+batchHeaderLen || binary.LittleEndian.Uint16(m) != pushMagic {
		return 0, batchMeta{}, nil, fmt.Errorf("%w: %d bytes", errBadPush, len(m))
	}
	p := int(binary.LittleEndian.Uint32(m[4:]))
	if err := s.c.t.checkPartition(p); err != nil {
		return 0, batchMeta{}, nil, err
	}
	b := m[pushPrefix:]
	meta, err := parseBatchHeader(b[:batchHeaderLen], binary.LittleEndian.Uint64(b[8:]), s.c.t.l.MaxBatch)
	if err != nil || meta.skip() || len(b) != batchHeaderLen+int(meta.bodyLen) {
		return 0, batchMeta{}, nil, errors.Join(errBadPush, err)
	}
	return p, meta, b[batchHeaderLen:], nil
}

// idle reads from the log the first partition (in turn) that had
// nothing pushed for the idle time and has records past its position.
func (s *Subscription) idle(ctx context.Context) ([]Record, error) {
	n := len(s.seen)
	for i := range n {
		p := (s.next + i) % n
		if time.Since(s.seen[p]) < s.cfg.idle() {
			continue
		}
		s.seen[p] = time.Now()
		recs, err := s.c.Fetch(ctx, p, 0)
		s.repaired.Add(uint64(len(recs)))
		if err != nil || len(recs) > 0 {
			s.next = p + 1
			return recs, err
		}
	}
	return nil, nil
}
