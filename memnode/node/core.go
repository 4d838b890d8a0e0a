package node

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/ndma/ndma/internal/poolclient"
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/memnode/server"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/netio/loop"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/transport/reasm"
	"github.com/ndma/ndma/wire"
)

// Config configures a Core or Node. Zero values select defaults.
type Config struct {
	// Store is the memory the node serves; it must not be nil.
	Store *memnode.Store
	// Transport configures the reliable transport engine.
	Transport transport.Config
	// Pool, if set, makes the node a memory node of a pool: it serves
	// the pool requests and grants of the switch it names.
	Pool *server.PoolServe
	// OpTimeout bounds each control request the node sends and each
	// read of a rebuild. Zero means 10s.
	OpTimeout time.Duration
}

// Errors of the node's own requests.
var (
	ErrTimeout  = errors.New("memory node: request timed out")
	ErrCanceled = errors.New("memory node: request canceled")
	ErrClosed   = errors.New("memory node: closed")
	// ErrBadAnswer: an answer whose length or fragments do not fit the
	// request (a read's stripe, a control answer beyond maxAnswer).
	ErrBadAnswer = errors.New("memory node: answer does not fit its request")
)

// maxAnswer bounds a control answer, in bytes.
const maxAnswer = 1 << 20

// maxCalls bounds the control requests in flight.
const maxCalls = 1024

// Stats counts what a Core did.
type Stats struct {
	Transport transport.Stats
	// Server holds the memory server's counters: requests served and
	// refused, and the pool's (Server.Pool; its Dropped also counts
	// the pool datagrams dropped because the send queue was full).
	Server server.Stats
	// Client holds the counters of the pool reads of rebuilds.
	Client poolclient.Stats
	// UnmatchedResponses counts answers that match no request of the
	// node (late or forged); Unexpected the datagrams delivered that
	// are no request (multicasts, two-sided messages, events: a memory
	// node takes none).
	UnmatchedResponses, Unexpected uint64
}

// Call is one control request to a switch: the encoded request goes in
// Msg; once done, Resp holds the answer's payload, Operand its Operand1,
// and Err why it failed (a wire.Status refusal, ErrTimeout, a
// *transport.PeerError, ErrCanceled, ErrClosed).
type Call struct {
	Peer    netip.AddrPort
	Msg     []byte
	Resp    []byte
	Operand uint64
	Err     error
	// Acked: the switch acknowledged the whole request.
	Acked bool
	// Timeout bounds the call from Post to its answer; zero means
	// Config.OpTimeout.
	Timeout time.Duration
	// Done, if set, is called once the call completed, inside the
	// Core's call that completed it.
	Done func(*Call)

	id       uint64 // the transport message id
	deadline time.Time
	asm      reasm.Buffer
	finished bool
}

// poolAccess is a rebuild read in flight.
type poolAccess = poolclient.Access[*read]

// read is one pool read of a rebuild.
type read struct {
	key, addr uint64 // the region's key, the pool address
	buf       []byte
	deadline  time.Time
	err       error
	done      func(error)
}

// Core is the sans-I/O memory node; see the package documentation. Not
// safe for concurrent use.
type Core struct {
	cfg   Config
	eng   *transport.Engine
	srv   *server.Server
	cl    *poolclient.Client[*read]
	out   poolclient.Outbox
	seg   int              // payload bytes per pool request
	calls map[uint64]*Call // control requests in flight, by message id
	// due is the earliest deadline of a call or read (it may be early:
	// expire looks only once it passed).
	due   time.Time
	stats Stats
	// dropped counts the pool datagrams the outbox had no room for.
	dropped uint64
}

// NewCore returns a memory node's core.
func NewCore(cfg Config) (*Core, error) {
	if cfg.OpTimeout == 0 {
		cfg.OpTimeout = 10 * time.Second
	}
	if cfg.OpTimeout < 0 {
		return nil, fmt.Errorf("memory node: OpTimeout must not be negative")
	}
	eng, err := transport.New(cfg.Transport)
	if err != nil {
		return nil, err
	}
	c := &Core{cfg: cfg, eng: eng, calls: make(map[uint64]*Call)}
	mtu := cfg.Transport.MTU
	if mtu == 0 {
		mtu = transport.DefaultMTU
	}
	// Room for the reply-to trailer the switch adds; 8-byte aligned, as
	// the host library's pool client.
	c.seg = (mtu - wire.HeaderLen - wire.ReplyToLen) &^ 7
	if c.seg < 8 {
		return nil, fmt.Errorf("memory node: MTU %d leaves no room for pool requests", mtu)
	}
	c.cl = poolclient.New[*read]((*reader)(c))
	dead := cfg.Transport.DeadTimeout
	if dead <= 0 {
		dead = transport.DefaultDeadTimeout
	}
	c.srv, err = server.New(server.Config{Store: cfg.Store, Pool: cfg.Pool, Segment: c.seg, DeadTimeout: dead}, (*host)(c))
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Server is the node's memory server (its grant report: PoolReports,
// PoolReported; identities: SetIdentities).
func (c *Core) Server() *server.Server { return c.srv }

// Stats returns the counters.
func (c *Core) Stats() Stats {
	s := c.stats
	s.Transport = c.eng.Stats()
	s.Server = c.srv.Stats()
	s.Server.Pool.Dropped += c.dropped
	s.Client = c.cl.Stats
	return s
}

// Receive handles one received datagram.
func (c *Core) Receive(now time.Time, dg netio.Datagram) {
	c.srv.Observe(now)
	if len(dg.Buf) >= wire.HeaderLen && wire.Mode(dg.Buf[2]) == wire.ModePool && c.receivePool(now, dg.Addr, dg.Buf) {
		return
	}
	d, ok := c.eng.Receive(now, dg, transport.Admission{Admit: c.admit})
	if !ok {
		return
	}
	h := &d.Header
	switch {
	case h.Mode != wire.ModeUnicast || h.Op == wire.OpEvent || h.Op == wire.OpSend:
		c.stats.Unexpected++
	case h.Flags&wire.FlagResp != 0:
		c.onAnswer(&d)
	default:
		c.srv.Serve(now, &d)
	}
}

// admit lets the memory server hold back the first packet of a
// multi-packet request while it has no room for it.
func (c *Core) admit(d *transport.Delivery) bool {
	h := &d.Header
	if h.Flags&wire.FlagResp != 0 || h.Mode != wire.ModeUnicast || h.Op == wire.OpEvent || h.Op == wire.OpSend {
		return true
	}
	return c.srv.Admit(d)
}

// Poll returns the datagrams to send and the next time Poll must be
// called (zero: none). The datagrams are valid until the next call.
func (c *Core) Poll(now time.Time, out []netio.Datagram) ([]netio.Datagram, time.Time) {
	c.srv.Observe(now)
	out, comps, next := c.eng.Poll(now, out)
	for i := range comps {
		cp := &comps[i]
		call := c.calls[cp.MsgID]
		if call == nil || call.Peer != cp.Peer.Addr {
			continue // a response sent (its requester times out if it failed)
		}
		if cp.Err == nil {
			call.Acked = true
			continue
		}
		c.failCall(call, cp.Err)
	}
	if !c.due.IsZero() && !now.Before(c.due) {
		c.expire(now)
	}
	next = loop.Earliest(next, c.due)
	next = loop.Earliest(next, c.cl.Poll(now))
	return c.out.Flush(out), next
}

// expire fails the calls and reads whose deadline passed, in a fixed
// order (determinism on simnet), and sets due to the earliest deadline
// left (the calls and reads their callbacks post set it too).
func (c *Core) expire(now time.Time) {
	c.due = time.Time{}
	for _, id := range slices.Sorted(maps.Keys(c.calls)) {
		call := c.calls[id]
		if call == nil {
			continue // ended by an earlier one's callback
		}
		if !now.Before(call.deadline) {
			c.failCall(call, ErrTimeout)
			continue
		}
		c.due = loop.Earliest(c.due, call.deadline)
	}
	for _, a := range c.cl.Accesses() {
		r := a.Op
		if !now.Before(r.deadline) {
			r.err = ErrTimeout
			c.finishRead(r)
			continue
		}
		c.due = loop.Earliest(c.due, r.deadline)
	}
}

// Post sends call at time now. It fails (and call is not posted) when
// maxCalls are in flight or the transport cannot queue it.
func (c *Core) Post(now time.Time, call *Call) error {
	if len(c.calls) >= maxCalls {
		return transport.ErrQueueFull
	}
	h := wire.Header{Op: wire.OpControl}
	id, err := c.eng.Send(transport.PeerID{Addr: call.Peer}, &h, call.Msg, 0)
	if err != nil {
		return err
	}
	t := c.cfg.OpTimeout
	if call.Timeout > 0 {
		t = call.Timeout
	}
	call.id, call.deadline = id, now.Add(t)
	c.due = loop.Earliest(c.due, call.deadline)
	call.Resp, call.Err, call.Acked, call.finished, call.asm = nil, nil, false, false, reasm.Buffer{}
	c.calls[id] = call
	return nil
}

// Cancel abandons call: it completes with ErrCanceled unless it did
// already.
func (c *Core) Cancel(call *Call) {
	if c.calls[call.id] == call {
		c.failCall(call, ErrCanceled)
	}
}

// FailAll completes every call in flight with err.
func (c *Core) FailAll(err error) {
	for _, id := range slices.Sorted(maps.Keys(c.calls)) {
		if call := c.calls[id]; call != nil {
			c.failCall(call, err)
		}
	}
}

// FlushAcks makes every ACK the transport holds back due at the next
// Poll (transport.Engine.FlushAcks).
func (c *Core) FlushAcks() { c.eng.FlushAcks() }

// Owed reports whether the transport owes a peer an ACK.
func (c *Core) Owed() bool { return c.eng.Owed() }

// onAnswer takes a fragment of a control answer.
func (c *Core) onAnswer(d *transport.Delivery) {
	h := &d.Header
	call := c.calls[h.MsgID]
	if call == nil || call.Peer != d.Peer.Addr || h.Op != wire.OpControl {
		c.stats.UnmatchedResponses++
		return
	}
	if h.Status == wire.StatusOK {
		if !call.asm.Started() {
			if h.MsgLen > maxAnswer {
				c.failCall(call, wire.StatusTooLarge)
				return
			}
			call.asm.StartInto(h.MsgLen, make([]byte, h.MsgLen))
		}
		done, ok := call.asm.Place(h.MsgLen, h.Offset, d.Payload)
		if !ok || (!done && call.asm.Broken(d.MsgDone)) {
			c.failCall(call, ErrBadAnswer)
			return
		}
		if !done {
			return
		}
		call.Resp = call.asm.Bytes()
	} else if !d.MsgDone {
		return
	} else {
		call.Err = h.Status
	}
	call.Operand = h.Operand1
	c.eng.Delivered(d.Peer, call.id)
	c.endCall(call)
}

func (c *Core) failCall(call *Call, err error) {
	call.Err = err
	c.eng.Abandon(transport.PeerID{Addr: call.Peer}, call.id)
	c.endCall(call)
}

func (c *Core) endCall(call *Call) {
	delete(c.calls, call.id)
	call.finished = true
	if call.Done != nil {
		call.Done(call)
	}
}

// receivePool handles a datagram whose mode byte says ModePool. It
// reports false if the datagram does not parse (the transport counts it
// malformed).
func (c *Core) receivePool(now time.Time, from netip.AddrPort, pkt []byte) bool {
	var h wire.Header
	payload, _, err := wire.ParseAfter(pkt, &h, c.cfg.Transport.Verified)
	if err != nil {
		return false
	}
	if h.Flags&wire.FlagResp == 0 {
		c.srv.ServePool(now, from, &h, payload)
		return true
	}
	a, i := c.cl.Match(h.MsgID)
	if a == nil || h.Op != wire.OpRead {
		c.cl.Stats.LateResponses++
		return true
	}
	r, s := a.Op, &a.Segs[i]
	dup, more := c.cl.Answer(a, i, from, h.Copies)
	if !dup {
		switch {
		case h.Status != wire.StatusOK:
			r.err = h.Status
		case len(payload) != int(s.N):
			r.err = ErrBadAnswer
		default:
			copy(r.buf[s.Off:], payload)
		}
	}
	if more > 0 && r.err == nil {
		return true // wait for the other replica
	}
	c.cl.Complete(now, a, i)
	if r.err != nil || a.Left() == 0 {
		c.finishRead(r)
	}
	c.cl.Pump(now, a)
	return true
}

// finishRead ends a rebuild's read and tells the server.
func (c *Core) finishRead(r *read) {
	if c.cl.Release(r) {
		r.done(r.err)
	}
}

// readPool starts a pool read of a rebuild.
func (c *Core) readPool(now time.Time, sw netip.AddrPort, region uint32, key, addr uint64, lane uint16, buf []byte, done func(error)) error {
	if len(buf) == 0 {
		return fmt.Errorf("memory node: empty pool read")
	}
	r := &read{key: key, addr: addr, buf: buf, deadline: now.Add(c.cfg.OpTimeout), done: done}
	c.due = loop.Earliest(c.due, r.deadline)
	a := &poolclient.Access[*read]{Op: r, Key: poolclient.LaneKey{Switch: sw, Region: region, Lane: lane}}
	for off := 0; off < len(buf); off += c.seg {
		a.Segs = append(a.Segs, poolclient.Seg{Off: uint32(off), N: uint32(min(c.seg, len(buf)-off))})
	}
	c.cl.Start(now, a)
	return nil
}
