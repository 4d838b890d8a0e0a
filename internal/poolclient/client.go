package poolclient

import (
	"cmp"
	"net/netip"
	"slices"
	"time"

	"github.com/ndma/ndma/transport/cc"
)

// Limits of the pool client.
const (
	minRTO     = 2 * time.Millisecond
	initRTO    = 50 * time.Millisecond
	maxRTO     = time.Second
	initWindow = 16
	maxWindow  = 1024
	// MaxLanes bounds the lanes a Client keeps: beyond it, idle ones
	// are forgotten (they lose only their RTT history).
	MaxLanes = 1024
)

// LaneKey names a lane: one congestion window and RTT estimator, shared
// by the accesses to one region through one switch with the same Lane
// number (the pool client uses one per memory node).
type LaneKey struct {
	Switch netip.AddrPort
	Region uint32
	Lane   uint16
	// Chain: chains cross many links, so their RTT is not a single
	// access's.
	Chain bool
}

// lane is one congestion window, its RTT estimator and its queue of
// accesses waiting to send.
type lane[T comparable] struct {
	win      cc.Vegas
	inflight int
	queue    []*Access[T]
	rtt      cc.RTT
}

// Seg is one request datagram of an access.
type Seg struct {
	ID     uint64 // request id (0: not sent yet, or set before: see sendSeg)
	Off, N uint32 // the part of the access it carries: byte offset and length

	copies   int               // answers to wait for (Header.Copies of the first)
	from     [2]netip.AddrPort // memory nodes that answered
	sent     time.Time
	deadline time.Time
	rto      time.Duration
	tries    int
	done     bool
}

// Access is one pool access: the caller's op and the segments it is sent
// in.
type Access[T comparable] struct {
	Op   T
	Key  LaneKey
	Segs []Seg
	// Scratch is the caller's, for encoding a segment's payload.
	Scratch []byte

	seq      uint64 // post order: timers and timeouts visit accesses in it (determinism on simnet)
	lane     *lane[T]
	next     int // next segment to send for the first time
	left     int // segments not yet answered
	released bool
}

// Left is the number of segments not yet answered.
func (a *Access[T]) Left() int { return a.left }

// Sender encodes and queues a Client's requests.
type Sender[T comparable] interface {
	// SendSeg queues the request datagram of segment i of a, under id
	// a.Segs[i].ID (sent before if it is a retransmission).
	SendSeg(now time.Time, a *Access[T], i int)
	// Unanswered is told that a request to switch sw is about to be
	// sent for the third time: the switch may have forgotten this
	// client's address (the endpoint proves it again).
	Unanswered(now time.Time, sw netip.AddrPort)
}

// Stats counts a Client's traffic: request datagrams sent
// (retransmissions included), those that were retransmissions, answers
// matched, and answers that matched nothing (late, or a second answer
// from the same node).
type Stats struct {
	Requests, Retransmits, Responses, LateResponses uint64
}

// Client keeps the lanes and the accesses in flight. The zero value is
// not usable: call New. Not safe for concurrent use.
type Client[T comparable] struct {
	send  Sender[T]
	seq   uint64 // last request id
	opSeq uint64
	lanes map[LaneKey]*lane[T]
	reqs  map[uint64]*Access[T] // request id → access
	ops   map[T]*Access[T]
	next  time.Time // earliest segment deadline (may be early)
	// Stats are the counters; the caller counts the answers it
	// finds no access for as LateResponses.
	Stats Stats
}

// New returns a client sending through send.
func New[T comparable](send Sender[T]) *Client[T] {
	return &Client[T]{send: send, lanes: make(map[LaneKey]*lane[T]), reqs: make(map[uint64]*Access[T]), ops: make(map[T]*Access[T])}
}

// Len is the number of accesses in flight.
func (c *Client[T]) Len() int { return len(c.ops) }

// Requests is the number of request ids that await an answer.
func (c *Client[T]) Requests() int { return len(c.reqs) }

// Lanes is the number of lanes kept.
func (c *Client[T]) Lanes() int { return len(c.lanes) }

// Start queues access a on its lane (a.Key) and sends what the lane's
// window allows. a.Segs must hold at least one segment, and a.Op must not
// be in flight already.
func (c *Client[T]) Start(now time.Time, a *Access[T]) {
	c.opSeq++
	a.seq, a.next, a.left, a.released = c.opSeq, 0, len(a.Segs), false
	l := c.lanes[a.Key]
	if l == nil {
		if len(c.lanes) >= MaxLanes {
			// Forget idle lanes (regions long freed, say): the table stays
			// bounded; an idle lane only loses its RTT history.
			for k, l := range c.lanes {
				if l.inflight == 0 && len(l.queue) == 0 {
					delete(c.lanes, k)
				}
			}
		}
		l = &lane[T]{win: cc.Vegas{Cwnd: initWindow, Ssthresh: maxWindow}}
		c.lanes[a.Key] = l
	}
	a.lane = l
	c.ops[a.Op] = a
	l.queue = append(l.queue, a)
	c.pump(now, l)
}

// pump sends new segments of l's queued accesses while its window
// allows.
func (c *Client[T]) pump(now time.Time, l *lane[T]) {
	for len(l.queue) > 0 && float64(l.inflight) < l.win.Cwnd {
		a := l.queue[0]
		if a.released {
			l.queue = l.queue[1:]
			continue
		}
		c.sendSeg(now, a, a.next)
		a.next++
		if a.next == len(a.Segs) {
			l.queue[0] = nil
			l.queue = l.queue[1:]
		}
	}
}

// sendSeg sends segment i of a, or sends it again under the same request
// id (so the memory node recognizes a duplicate). A segment given an ID
// before its first send (Seg.ID) goes under that id: that of an earlier
// access's segment, sent again (a chain's hops that applied it answer
// from their reply caches instead of applying it again).
func (c *Client[T]) sendSeg(now time.Time, a *Access[T], i int) {
	s := &a.Segs[i]
	if s.tries > 0 {
		c.Stats.Retransmits++
		if s.tries >= 2 {
			c.send.Unanswered(now, a.Key.Switch)
		}
	} else {
		a.lane.inflight++
		s.rto = a.lane.rto()
		if _, taken := c.reqs[s.ID]; s.ID == 0 || s.ID > c.seq || taken {
			// (An id this client never gave out, or one in use, is not
			// an earlier segment's: a new one.)
			c.seq++
			s.ID = c.seq
		}
		c.reqs[s.ID] = a
	}
	s.sent = now
	s.tries++
	s.deadline = now.Add(s.rto)
	if c.next.IsZero() || s.deadline.Before(c.next) {
		c.next = s.deadline
	}
	c.send.SendSeg(now, a, i)
	c.Stats.Requests++
}

// rto is the lane's retransmission timeout: RFC 6298's srtt + 4 rttvar,
// but at least twice srtt. The floor matters: a resent request costs a
// whole request (a chain, all its hops), and with steady delays rttvar
// decays to nothing, so one more packet queued anywhere would otherwise
// fire a spurious timeout.
func (l *lane[T]) rto() time.Duration {
	if !l.rtt.Has() {
		return initRTO
	}
	return l.rtt.RTO(0, max(2*l.rtt.SRTT, minRTO), maxRTO)
}

// Match returns the access request id belongs to and the index of its
// segment, or nil if none does (a late answer: the caller counts it).
func (c *Client[T]) Match(id uint64) (*Access[T], int) {
	a := c.reqs[id]
	if a == nil {
		return nil, 0
	}
	for i := range a.Segs {
		if a.Segs[i].ID == id {
			return a, i
		}
	}
	panic("poolclient: request id not in its access")
}

// Answer counts an answer to segment i of a from memory node from,
// whose header reported copies (Header.Copies: the low byte is how many
// copies answer). dup reports a second answer from the same node
// (counted late); more is how many other copies' answers the segment
// still waits for after this one. The caller reads a fresh answer's
// payload, and calls Complete once more is zero (or the access failed).
func (c *Client[T]) Answer(a *Access[T], i int, from netip.AddrPort, copies uint16) (dup bool, more int) {
	s := &a.Segs[i]
	// A resent request may reach fewer replicas (one died since): the
	// fewest copies any answer reports is what to wait for.
	if n := max(1, min(int(copies&0xff), len(s.from))); s.copies == 0 || n < s.copies {
		s.copies = n
	}
	got := 0
	for _, f := range s.from {
		if f.IsValid() {
			dup = dup || f == from
			got++
		}
	}
	if dup {
		c.Stats.LateResponses++
		// The answers held are all the copies there now are, or
		// others are still awaited.
		return true, s.copies - got
	}
	c.Stats.Responses++
	if got+1 < s.copies {
		s.from[got] = from // wait for the other replica
	}
	return false, s.copies - got - 1
}

// Complete ends segment i of a: its request id is forgotten, its lane's
// RTT sampled (if it was sent once) and window grown.
func (c *Client[T]) Complete(now time.Time, a *Access[T], i int) {
	s := &a.Segs[i]
	delete(c.reqs, s.ID)
	s.done = true
	a.left--
	l := a.lane
	l.inflight--
	if s.tries == 1 {
		l.rtt.Sample(now.Sub(s.sent))
	}
	l.win.OnAnswer(&vegas, &l.rtt)
}

// Pump sends what a's lane's window allows now.
func (c *Client[T]) Pump(now time.Time, a *Access[T]) { c.pump(now, a.lane) }

// vegas is the lanes' window: it grows (by one per answer in slow start,
// one per window after) while fewer than 2 of the lane's requests wait in
// queues (cwnd × (1 − minRTT/srtt)), and shrinks by one per window beyond
// 8, leaving slow start. Keeping the queues short keeps the RTT, and so
// the retransmission timer, honest: a window that filled the queues would
// make the RTT outgrow the timer and every request be sent twice.
var vegas = cc.VegasLimits{QueueLow: 2, QueueHigh: 8, Min: 2, Max: maxWindow}

// Release forgets op's access (it finished: answered, failed, timed out
// or canceled) and frees its share of its lane's window. It reports
// whether op was in flight.
func (c *Client[T]) Release(op T) bool {
	a := c.ops[op]
	if a == nil {
		return false
	}
	delete(c.ops, op)
	a.released = true
	for i := range a.Segs {
		s := &a.Segs[i]
		if s.tries > 0 && !s.done {
			delete(c.reqs, s.ID)
			a.lane.inflight--
		}
	}
	return true
}

// Poll resends the segments whose timer ran out and returns the next
// timer (zero: none).
func (c *Client[T]) Poll(now time.Time) time.Time {
	if c.next.IsZero() || now.Before(c.next) {
		return c.next
	}
	c.next = time.Time{}
	var pumped []*lane[T]
	for _, a := range c.Accesses() {
		halved := false
		for i := range a.Segs {
			s := &a.Segs[i]
			if s.tries == 0 || s.done {
				continue
			}
			if !now.Before(s.deadline) {
				if !halved {
					// One loss event per access and round: halve the window.
					a.lane.win.OnLoss(&vegas)
					halved = true
				}
				s.rto = min(2*s.rto, maxRTO)
				c.sendSeg(now, a, i)
			}
			if c.next.IsZero() || s.deadline.Before(c.next) {
				c.next = s.deadline
			}
		}
		pumped = append(pumped, a.lane)
	}
	for _, l := range pumped {
		c.pump(now, l)
	}
	return c.next
}

// Accesses returns the accesses in flight in the order they were
// started, so that what depends on visiting them (resends, timeouts)
// does not depend on map order.
func (c *Client[T]) Accesses() []*Access[T] {
	out := make([]*Access[T], 0, len(c.ops))
	for _, a := range c.ops {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b *Access[T]) int { return cmp.Compare(a.seq, b.seq) })
	return out
}
