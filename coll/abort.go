package coll

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/ndma/ndma/endpoint"
)

// A collective the ranks disagree on (a buffer of another size on one
// rank) is found out by the ranks that exchange a message of the wrong
// length with the odd one; the others would wait for messages that never
// come until their context or liveness bound ends. So a rank whose host
// algorithm fails with ErrArg tells every other rank (an abort message
// on a reserved tag, carrying the call's sequence number and the reason),
// and each rank keeps a receive posted per peer for those messages: a
// call that learns of its abort is cancelled and fails with the reason,
// and a call not yet started fails as it starts. In-network operations
// need none of this: the switch refuses a disagreeing aggregation for
// every member. The receives are posted when the communicator first runs
// a host algorithm (an abort sent before sits in the endpoint as an
// unexpected message until then): a communicator that only ever uses the
// switch holds none, which for N ranks in one process (a simulation)
// would be N×(N−1) receives.

// abortTag is the tag of abort messages: sequence number 0 is never a
// call's (call numbers them from 1).
var abortTag = tag(0, 1)

const (
	// abortMsgMax bounds an abort message: the sequence number and the
	// reason.
	abortMsgMax = 256
	// MaxAborts bounds the aborted calls a communicator remembers (the
	// oldest is forgotten first).
	MaxAborts = 64
)

// abortState is a communicator's record of aborted calls. Guarded by
// Communicator.abortMu.
type abortState struct {
	aborted map[uint64]error                   // call → the reason, from this rank or another
	running map[uint64]context.CancelCauseFunc // calls running a host algorithm
	recvs   []*endpoint.Op                     // the receive posted per peer (nil for this rank)
	ch      chan *endpoint.Op
	closing bool
	posted  bool // the receives were posted (postAborts)
}

// startAborts readies the record of aborted calls.
func (c *Communicator) startAborts() {
	if c.size == 1 {
		return
	}
	a := &c.aborts
	a.aborted = make(map[uint64]error)
	a.running = make(map[uint64]context.CancelCauseFunc)
}

// postAborts posts, the first time it is called, a receive for abort
// messages from every other rank and starts the goroutine that takes
// them.
func (c *Communicator) postAborts() {
	if c.size == 1 {
		return
	}
	a := &c.aborts
	c.abortMu.Lock()
	if a.posted || a.closing {
		c.abortMu.Unlock()
		return
	}
	a.posted = true
	a.recvs = make([]*endpoint.Op, c.size)
	a.ch = make(chan *endpoint.Op, c.size)
	posted := 0
	for r := range c.size {
		if r != c.rank && c.postAbortRecvLocked(r) {
			posted++
		}
	}
	c.abortMu.Unlock()
	if posted == 0 {
		return
	}
	c.abortWG.Go(func() { c.takeAborts(posted) })
}

// postAbortRecvLocked posts the receive for rank r's next abort message.
// Caller holds abortMu.
func (c *Communicator) postAbortRecvLocked(r int) bool {
	op := c.recvOp(r, abortTag, make([]byte, abortMsgMax))
	op.Idle = 0 // it waits as long as the communicator lives
	if c.aborts.closing || c.ep.Start(op, c.aborts.ch) != nil {
		return false
	}
	c.aborts.recvs[r] = op
	return true
}

// takeAborts applies the abort messages that arrive, and posts the next
// receive, until every receive has ended otherwise (the communicator or
// the endpoint closed, the peer gone).
func (c *Communicator) takeAborts(outstanding int) {
	for outstanding > 0 {
		op := <-c.aborts.ch
		outstanding--
		if op.Err != nil {
			continue
		}
		from := int(op.Token)
		c.mu.Lock()
		cur := c.seq
		c.mu.Unlock()
		c.abortMu.Lock()
		// Only calls near this rank's own (a rank runs ahead by at most
		// the calls it has in flight): a peer cannot fill the record with
		// far future calls.
		if p := op.Buf[:op.N]; len(p) >= 8 {
			if seq := binary.BigEndian.Uint64(p); seq+MaxAborts > cur && seq <= cur+MaxAborts {
				c.abortLocked(seq, fmt.Errorf("%w: rank %d: %q", ErrArg, from, p[8:]))
			}
		}
		if c.postAbortRecvLocked(from) {
			outstanding++
		}
		c.abortMu.Unlock()
	}
}

// abortLocked records that call seq failed for the reason err and
// cancels it if it is running. Caller holds abortMu.
func (c *Communicator) abortLocked(seq uint64, err error) {
	a := &c.aborts
	if seq == 0 || a.aborted[seq] != nil {
		return
	}
	if len(a.aborted) >= MaxAborts {
		oldest := seq
		for s := range a.aborted {
			oldest = min(oldest, s)
		}
		if oldest == seq {
			return
		}
		delete(a.aborted, oldest)
	}
	a.aborted[seq] = err
	if cancel := a.running[seq]; cancel != nil {
		cancel(err)
	}
}

// stopAborts cancels the abort receives and waits for their goroutine.
func (c *Communicator) stopAborts() {
	c.abortMu.Lock()
	c.aborts.closing = true
	recvs := c.aborts.recvs
	c.abortMu.Unlock()
	for _, op := range recvs {
		if op != nil {
			c.ep.Cancel(op)
		}
	}
	c.abortWG.Wait()
}

// guard runs call seq's algorithm f: it fails at once if another rank
// has aborted the call, is cancelled if one does while it runs (failing
// with that rank's reason), and when f fails with an argument error (a
// message of the wrong length) tells every other rank. host says f is a
// host algorithm: the abort receives are posted first (postAborts).
func (c *Communicator) guard(ctx context.Context, seq uint64, host bool, f func(context.Context) error) error {
	if c.size == 1 {
		return f(ctx)
	}
	if host {
		c.postAborts()
	}
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	a := &c.aborts
	c.abortMu.Lock()
	if err := a.aborted[seq]; err != nil {
		c.abortMu.Unlock()
		return err
	}
	a.running[seq] = cancel
	c.abortMu.Unlock()
	err := f(cctx)
	c.abortMu.Lock()
	delete(a.running, seq)
	remote := a.aborted[seq]
	c.abortMu.Unlock()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, endpoint.ErrTruncated):
		// A message longer than this rank's buffer: its sender's
		// arguments differ from this rank's.
		err = fmt.Errorf("%w: %v", ErrArg, err)
	case remote != nil && !errors.Is(err, ErrArg):
		// Cancelled by another rank's abort.
		return remote
	}
	if errors.Is(err, ErrArg) && remote == nil {
		c.sendAbort(seq, err)
	}
	return err
}

// guarded is host algorithm f run under guard, as a callPlan's host.
func (c *Communicator) guarded(seq uint64, f func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error { return c.guard(ctx, seq, true, f) }
}

// sendAbort tells every other rank that call seq failed here with err.
// The messages go out in the background.
func (c *Communicator) sendAbort(seq uint64, err error) {
	c.abortMu.Lock()
	c.abortLocked(seq, err)
	c.abortMu.Unlock()
	msg := binary.BigEndian.AppendUint64(make([]byte, 0, abortMsgMax), seq)
	reason := err.Error()
	msg = append(msg, reason[:min(len(reason), abortMsgMax-8)]...)
	for r := range c.size {
		if r != c.rank {
			_ = c.ep.Start(c.sendOp(r, abortTag, msg), nil)
		}
	}
}

// nextCall is the sequence number the next call will get.
func (c *Communicator) nextCall() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq + 1
}

// abortedCall is the reason another rank aborted call seq, or nil.
func (c *Communicator) abortedCall(seq uint64) error {
	c.abortMu.Lock()
	defer c.abortMu.Unlock()
	return c.aborts.aborted[seq]
}
