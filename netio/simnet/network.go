package simnet

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/netio/loop"
)

// Node is a sans-I/O protocol core attached to the network at one address:
// a loop.Machine, the shape the real-socket driver takes too. The network
// calls it from the goroutine that drives the network, one call at a
// time; a Node must not call Step, RunFor or RunUntil. A datagram's RxTime
// is when it arrived on the virtual clock (now, or earlier for a datagram
// held while the node was stalled), and the network copies what Poll
// returns, so the node may reuse its buffers after Poll returns.
type Node = loop.Machine

var epoch = time.Unix(1_700_000_000, 0).UTC()

// Epoch returns the virtual time at which every Network starts:
// 2023-11-14 22:13:20 UTC.
func Epoch() time.Time { return epoch }

// Stats are a network's counters since New. Every datagram handed over by
// a node is eventually delivered or dropped exactly once, and each
// duplication adds one datagram, so once no events remain
// Sent+Duplicated == Delivered+Dropped().
type Stats struct {
	Sent           uint64 // datagrams handed to the network by nodes' Poll
	SentBytes      uint64 // payload bytes of Sent
	Delivered      uint64 // Receive calls
	DeliveredBytes uint64 // payload bytes of Delivered

	DroppedLoss     uint64 // lost on a link (LinkConfig.Loss)
	DroppedQueue    uint64 // tail-dropped at a full link queue
	DroppedMTU      uint64 // larger than a link's MTU
	DroppedNoRoute  uint64 // destination address not attached
	DroppedDetached uint64 // destination detached while the datagram was in flight
	// DroppedRecvBuffer counts datagrams delivered to a Conn from
	// ListenConn whose receive buffer was full or that was closed.
	DroppedRecvBuffer uint64

	Duplicated uint64 // extra copies made (LinkConfig.Dup)
	Corrupted  uint64 // datagrams with one bit flipped (LinkConfig.Corrupt)
	Reordered  uint64 // datagrams given extra delay (LinkConfig.Reorder)

	Polls  uint64 // Poll calls
	Events uint64 // events processed by Step
}

// Dropped is the total of all drop counters.
func (s Stats) Dropped() uint64 {
	return s.DroppedLoss + s.DroppedQueue + s.DroppedMTU + s.DroppedNoRoute + s.DroppedDetached +
		s.DroppedRecvBuffer
}

// host is one attached address. A detached host is never reused: a later
// Attach at the same address makes a new host, so events still referring
// to the old one see detached and drop.
type host struct {
	addr     netip.AddrPort
	node     Node
	up, down link
	pollEv   *event // pending evPoll at the current instant, or nil
	timerEv  *event // pending evTimer, or nil
	detached bool
	woken    bool // in Network.woken, waiting for Serve to poll it
	// A stalled host (Network.Stall) runs nothing until stallUntil
	// (virtual ns); what arrives meanwhile waits in held, in order, for
	// resumeEv.
	stallUntil int64
	held       []heldDatagram
	resumeEv   *event
}

// Network is a simulated network with a virtual clock. It is not safe for
// concurrent use. See the package documentation for the model.
type Network struct {
	// Trace, when not nil, is called for every send, delivery, poll, drop
	// and impairment, in order. It must not call methods of the Network.
	Trace func(ev TraceEvent)

	// Quiesce, set before Serve starts, makes runs under Serve
	// deterministic, as Step's are, whatever order the goroutines of the
	// bubble run in (see Serve). No other goroutine of the bubble may call
	// synctest.Wait while Serve runs.
	Quiesce bool

	seed   int64
	rng    *rand.Rand
	now    int64 // virtual ns since Epoch
	seq    uint64
	events eventHeap
	free   []*event
	bufs   netio.Pool // payloads in flight: bounded by the datagrams in flight at once
	hosts  map[netip.AddrPort]*host
	out    []netio.Datagram // reused Poll argument
	stats  Stats

	instantAt     int64 // virtual time of the last event processed
	instantCount  int   // events processed in a row at instantAt
	maxPerInstant int   // livelock threshold, MaxEventsPerInstant but for tests

	// Used only by Serve, Locked and Conns (serve.go, conn.go); the
	// deterministic methods never lock.
	mu         sync.Mutex
	serving    bool
	quiesce    bool // Quiesce, read when Serve started
	serveErr   error
	kick       chan struct{} // wakes Serve; nil unless serving
	clockStart time.Time     // clock reading when Serve started
	virtStart  int64         // virtual time when Serve started
	// With quiesce: woken holds the hosts goroutines woke (Wake, a
	// Conn's WriteBatch), which Serve polls in address order once every
	// goroutine of the bubble is blocked; signals the Conns whose readers
	// or writers are told once Serve has run every event due.
	woken   []*host
	signals []*simConn
	// With quiesce: the Conns' timer callbacks that fell due, which
	// Serve runs once every goroutine of the bubble is blocked.
	timers []dueTimer
}

// New returns an empty network whose virtual clock reads Epoch() and whose
// random decisions all come from one PCG generator seeded from seed.
func New(seed int64) *Network {
	return &Network{
		seed:  seed,
		rng:   rand.New(rand.NewPCG(uint64(seed), uint64(seed)^0x9e3779b97f4a7c15)),
		hosts: make(map[netip.AddrPort]*host),

		maxPerInstant: MaxEventsPerInstant,
	}
}

// Now returns the current virtual time.
func (n *Network) Now() time.Time { return epoch.Add(time.Duration(n.now)) }

// Elapsed returns the virtual time since Epoch.
func (n *Network) Elapsed() time.Duration { return time.Duration(n.now) }

// Seed returns the seed the network was created with.
func (n *Network) Seed() int64 { return n.seed }

// Stats returns a copy of the network's counters.
func (n *Network) Stats() Stats { return n.stats }

// Pending returns the number of queued events.
func (n *Network) Pending() int { return len(n.events) }

// Attached reports whether a node is attached at addr.
func (n *Network) Attached(addr netip.AddrPort) bool { return n.hosts[addr] != nil }

// Attach connects node at addr with an access link whose up direction
// (node to crossbar) is configured by up and down direction (crossbar to
// node) by down, and schedules a first Poll at the current time. It panics
// if addr is already attached or a config does not validate: both are
// mistakes in the test, not conditions to handle.
func (n *Network) Attach(addr netip.AddrPort, node Node, up, down LinkConfig) {
	mustValidate(up, down)
	if n.hosts[addr] != nil {
		panic(fmt.Sprintf("simnet: Attach: %v is already attached", addr))
	}
	if node == nil {
		panic("simnet: Attach: nil Node")
	}
	h := &host{addr: addr, node: node, up: link{cfg: up}, down: link{cfg: down}}
	n.hosts[addr] = h
	n.schedulePoll(h)
}

// SetLink replaces the configs of addr's up and down links. Datagrams
// already on a link keep the timing and impairment decisions they were
// given; the queue occupancy is kept. It is a no-op if addr is not
// attached, and panics if a config does not validate.
func (n *Network) SetLink(addr netip.AddrPort, up, down LinkConfig) {
	mustValidate(up, down)
	if h := n.hosts[addr]; h != nil {
		h.up.cfg = up
		h.down.cfg = down
	}
}

func mustValidate(up, down LinkConfig) {
	if err := up.Validate(); err != nil {
		panic(fmt.Sprintf("%v (up link)", err))
	}
	if err := down.Validate(); err != nil {
		panic(fmt.Sprintf("%v (down link)", err))
	}
}

// Detach crashes the node at addr: it is never called again, datagrams in
// flight to it (on its down link) are dropped and counted in
// DroppedDetached, and later datagrams to addr count as DroppedNoRoute.
// Datagrams it already handed to the network stay in flight. addr may be
// attached again later, with a fresh link state. It is a no-op if addr is
// not attached.
func (n *Network) Detach(addr netip.AddrPort) {
	h := n.hosts[addr]
	if h == nil {
		return
	}
	delete(n.hosts, addr)
	h.detached = true
	for _, d := range h.held {
		n.stats.DroppedDetached++
		n.trace(TraceDropDetached, d.src, h.addr, len(d.buf), Down)
		n.bufs.Put(d.buf)
	}
	h.held = nil
	if h.resumeEv != nil {
		n.remove(h.resumeEv)
		h.resumeEv = nil
	}
	if h.pollEv != nil {
		n.remove(h.pollEv)
		h.pollEv = nil
	}
	if h.timerEv != nil {
		n.remove(h.timerEv)
		h.timerEv = nil
	}
}

// heldDatagram is a datagram that reached a stalled host.
type heldDatagram struct {
	src netip.AddrPort
	buf []byte // owned, from the buffer pool
	at  int64  // arrival, virtual ns since Epoch
}

// Stall stops the node at addr for d of virtual time, as a process that
// its machine's scheduler (or a hypervisor) does not run: its Poll is not
// called, its timer waits, and datagrams that cross its down link
// meanwhile wait in arrival order, as in a socket's receive buffer, and
// reach it when it resumes, each with its arrival time as RxTime. On
// resuming it is polled. Stalling a stalled node extends the stall to the
// later end. It is a no-op if addr is not attached or d is not positive.
func (n *Network) Stall(addr netip.AddrPort, d time.Duration) {
	h := n.hosts[addr]
	if h == nil || d <= 0 {
		return
	}
	until := satAdd(n.now, int64(d))
	if until <= h.stallUntil {
		return
	}
	h.stallUntil = until
	if h.resumeEv != nil {
		n.remove(h.resumeEv)
	}
	h.resumeEv = n.schedule(evResume, until, h, netip.AddrPort{}, netip.AddrPort{}, nil)
}

// stalled reports whether h is stalled now.
func (n *Network) stalled(h *host) bool { return n.now < h.stallUntil }

// resume ends h's stall: it hands the node what arrived meanwhile and
// polls it.
func (n *Network) resume(h *host) {
	held := h.held
	h.held = nil
	for i, d := range held {
		if h.detached {
			for _, r := range held[i:] {
				n.stats.DroppedDetached++
				n.bufs.Put(r.buf)
			}
			break
		}
		n.receive(h, d.src, d.buf, d.at)
	}
	if !h.detached {
		n.schedulePoll(h)
	}
}

// Inject puts a copy of buf onto dst's down link as if src had sent it:
// a forged datagram from an attacker who spoofs src (the crossbar checks
// no source, as an IP network does not). It counts as sent. While Serve
// runs, call it inside Locked.
func (n *Network) Inject(src, dst netip.AddrPort, buf []byte) {
	n.stats.Sent++
	n.stats.SentBytes += uint64(len(buf))
	n.traceBuf(TraceSend, src, dst, buf, Down)
	b := n.bufs.Get(len(buf))
	copy(b, buf)
	n.fabric(src, dst, b, false)
}

// Wake schedules a Poll of the node at addr at the current virtual time,
// for example after the test handed it new work. Several Wakes at one
// instant cause one Poll. It is a no-op if addr is not attached.
func (n *Network) Wake(addr netip.AddrPort) {
	h := n.hosts[addr]
	if h == nil {
		return
	}
	if n.quiesce {
		if !h.woken {
			h.woken = true
			n.woken = append(n.woken, h)
		}
		return
	}
	n.schedulePoll(h)
}

// Step processes the next event, advancing the virtual clock to its time.
// It returns false, doing nothing, if no events are queued.
func (n *Network) Step() bool {
	if len(n.events) == 0 {
		return false
	}
	e := heap.Pop(&n.events).(*event)
	if e.at == n.instantAt {
		n.instantCount++
	} else {
		n.instantAt, n.instantCount = e.at, 1
	}
	n.now = e.at
	n.stats.Events++
	h := e.host
	switch e.kind {
	case evPoll:
		h.pollEv = nil
		if !n.stalled(h) { // else the poll on resuming serves
			n.poll(h)
		}
	case evTimer:
		h.timerEv = nil
		if h.pollEv == nil && !n.stalled(h) { // else the pending poll serves
			n.poll(h)
		}
	case evResume:
		h.resumeEv = nil
		n.resume(h)
	case evFabric:
		n.fabric(e.src, e.dst, e.buf, e.ctl)
		e.buf = nil // ownership passed on
	case evDeliver:
		n.deliver(h, e.src, e.buf)
		e.buf = nil
	}
	n.release(e)
	return true
}

// RunUntil processes events until cond returns true, checking it before
// the first event and after every event. It returns nil once cond is true,
// or a *RunError wrapping ErrTimeout when the next event lies beyond
// limit of virtual time from the start (the clock is then left at
// start+limit), ErrDeadlock when no events remain, or ErrLivelock.
func (n *Network) RunUntil(cond func() bool, limit time.Duration) error {
	start := n.now
	return n.run(start, satAdd(start, int64(limit)), cond)
}

// RunFor processes every event due within d of virtual time and leaves the
// clock at Now()+d. It panics with a *RunError wrapping ErrLivelock if
// virtual time stops advancing.
func (n *Network) RunFor(d time.Duration) {
	start := n.now
	if err := n.run(start, satAdd(start, int64(d)), nil); err != nil {
		panic(err)
	}
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func (n *Network) run(start, end int64, cond func() bool) error {
	if cond != nil && cond() {
		return nil
	}
	for {
		if len(n.events) == 0 {
			if cond == nil {
				n.now = max(n.now, end)
				return nil
			}
			return n.runError(ErrDeadlock, start)
		}
		if n.events[0].at > end {
			n.now = max(n.now, end)
			if cond == nil {
				return nil
			}
			return n.runError(ErrTimeout, start)
		}
		n.Step()
		if n.instantCount > n.maxPerInstant {
			return n.runError(ErrLivelock, start)
		}
		if cond != nil && cond() {
			return nil
		}
	}
}

func (n *Network) runError(reason error, start int64) *RunError {
	return &RunError{
		Err:     reason,
		Time:    n.Now(),
		Elapsed: time.Duration(n.now - start),
		Seed:    n.seed,
		Pending: len(n.events),
	}
}

// schedule queues an event of kind at virtual time at.
func (n *Network) schedule(kind evKind, at int64, h *host, src, dst netip.AddrPort, buf []byte) *event {
	var e *event
	if k := len(n.free); k > 0 {
		e = n.free[k-1]
		n.free[k-1] = nil
		n.free = n.free[:k-1]
	} else {
		e = new(event)
	}
	n.seq++
	*e = event{at: at, seq: n.seq, kind: kind, host: h, src: src, dst: dst, buf: buf}
	heap.Push(&n.events, e)
	return e
}

// remove takes a queued event out of the heap and recycles it.
func (n *Network) remove(e *event) {
	heap.Remove(&n.events, e.idx)
	n.bufs.Put(e.buf)
	e.buf = nil
	n.release(e)
}

func (n *Network) release(e *event) {
	*e = event{idx: -1}
	n.free = append(n.free, e)
}

func (n *Network) schedulePoll(h *host) {
	if h.pollEv == nil && !h.detached {
		h.pollEv = n.schedule(evPoll, n.now, h, netip.AddrPort{}, netip.AddrPort{}, nil)
	}
}

// setTimer replaces h's timer with deadline (zero = none).
func (n *Network) setTimer(h *host, deadline time.Time) {
	if deadline.IsZero() {
		if h.timerEv != nil {
			n.remove(h.timerEv)
			h.timerEv = nil
		}
		return
	}
	at := n.now
	if d := deadline.Sub(epoch); d > time.Duration(at) {
		at = int64(d)
	}
	if e := h.timerEv; e != nil {
		if e.at != at {
			n.seq++
			e.at, e.seq = at, n.seq
			heap.Fix(&n.events, e.idx)
		}
		return
	}
	h.timerEv = n.schedule(evTimer, at, h, netip.AddrPort{}, netip.AddrPort{}, nil)
}

func (n *Network) trace(kind TraceKind, src, dst netip.AddrPort, length int, dir Dir) {
	if n.Trace != nil {
		n.Trace(TraceEvent{Time: n.Now(), Kind: kind, Src: src, Dst: dst, Len: length, Dir: dir})
	}
}

// traceBuf traces a send or a delivery of buf.
func (n *Network) traceBuf(kind TraceKind, src, dst netip.AddrPort, buf []byte, dir Dir) {
	if n.Trace != nil {
		n.Trace(TraceEvent{Time: n.Now(), Kind: kind, Src: src, Dst: dst, Len: len(buf), Dir: dir, Buf: buf})
	}
}

// poll calls h's Poll and puts what it returns onto h's up link.
func (n *Network) poll(h *host) {
	n.stats.Polls++
	n.trace(TracePoll, h.addr, netip.AddrPort{}, 0, Up)
	out, deadline := h.node.Poll(n.Now(), n.out[:0])
	for i := range out {
		if h.detached { // the node detached itself
			break
		}
		d := &out[i]
		n.stats.Sent++
		n.stats.SentBytes += uint64(len(d.Buf))
		n.traceBuf(TraceSend, h.addr, d.Addr, d.Buf, Up)
		if len(d.Buf) > h.up.cfg.mtu() {
			n.stats.DroppedMTU++
			n.trace(TraceDropMTU, h.addr, d.Addr, len(d.Buf), Up)
			continue
		}
		buf := n.bufs.Get(len(d.Buf))
		copy(buf, d.Buf)
		n.transmit(&h.up, Up, nil, h.addr, d.Addr, buf, d.Control)
	}
	clear(out)
	n.out = out[:0]
	if !h.detached {
		n.setTimer(h, deadline)
	}
}

// fabric switches a datagram arriving at the crossbar onto the
// destination's down link.
func (n *Network) fabric(src, dst netip.AddrPort, buf []byte, ctl bool) {
	h := n.hosts[dst]
	if h == nil {
		n.stats.DroppedNoRoute++
		n.trace(TraceDropNoRoute, src, dst, len(buf), Down)
		n.bufs.Put(buf)
		return
	}
	n.transmit(&h.down, Down, h, src, dst, buf, ctl)
}

// deliver hands a datagram that crossed h's down link to h's node.
func (n *Network) deliver(h *host, src netip.AddrPort, buf []byte) {
	if h.detached {
		n.stats.DroppedDetached++
		n.trace(TraceDropDetached, src, h.addr, len(buf), Down)
		n.bufs.Put(buf)
		return
	}
	if n.stalled(h) {
		h.held = append(h.held, heldDatagram{src: src, buf: buf, at: n.now})
		return
	}
	n.receive(h, src, buf, n.now)
	n.schedulePoll(h)
}

// receive hands buf (owned), which arrived at virtual time at, to h's
// node.
func (n *Network) receive(h *host, src netip.AddrPort, buf []byte, at int64) {
	n.stats.Delivered++
	n.stats.DeliveredBytes += uint64(len(buf))
	n.traceBuf(TraceDeliver, src, h.addr, buf, Down)
	h.node.Receive(n.Now(), netio.Datagram{Addr: src, Buf: buf, RxTime: epoch.UnixNano() + at})
	n.bufs.Put(buf)
}

// transmit puts buf (owned) onto link l at the current time. For the up
// link dstHost is nil and the datagram goes to the crossbar; for the down
// link it goes to dstHost. Timing: a datagram of L payload bytes on a link
// with rate R starts when the link is free, occupies it for
// (L+Overhead)*8/R seconds, and arrives Latency after it finished.
func (n *Network) transmit(l *link, dir Dir, dstHost *host, src, dst netip.AddrPort, buf []byte, ctl bool) {
	cfg := &l.cfg
	size := len(buf)
	if size > cfg.mtu() {
		n.stats.DroppedMTU++
		n.trace(TraceDropMTU, src, dst, size, dir)
		n.bufs.Put(buf)
		return
	}
	end := n.now
	switch {
	case cfg.Rate > 0 && ctl && cfg.ControlFirst:
		// Strict priority: after the datagram on the wire and the
		// control datagrams ahead; later data waits for it.
		l.drain(n.now)
		tx := txTime(size+cfg.Overhead, cfg.Rate)
		start := max(l.onWire(n.now), l.ctlBusy)
		if start-n.now > txTime(cfg.queueBytes(), cfg.Rate) {
			n.stats.DroppedQueue++
			n.trace(TraceDropQueue, src, dst, size, dir)
			n.bufs.Put(buf)
			return
		}
		end = start + tx
		l.ctlBusy = end
		if l.busyUntil > start {
			l.busyUntil += tx
		} else {
			l.busyUntil = end
		}
	case cfg.Rate > 0:
		wire := size + cfg.Overhead
		charge := max(wire, 1) // so the backlog's length is bounded too
		l.drain(n.now)
		if l.queued+charge > cfg.queueBytes() {
			n.stats.DroppedQueue++
			n.trace(TraceDropQueue, src, dst, size, dir)
			n.bufs.Put(buf)
			return
		}
		end = max(n.now, l.busyUntil) + txTime(wire, cfg.Rate)
		l.busyUntil = end
		l.backlog = append(l.backlog, backlogEntry{end: end, charge: charge})
		l.queued += charge
	}
	if cfg.Loss > 0 && n.rng.Float64() < cfg.Loss {
		n.stats.DroppedLoss++
		n.trace(TraceDropLoss, src, dst, size, dir)
		n.bufs.Put(buf)
		return
	}
	arrive := satAdd(end, int64(cfg.Latency))
	if cfg.Corrupt > 0 && size > 0 && n.rng.Float64() < cfg.Corrupt {
		bit := n.rng.IntN(size * 8)
		buf[bit/8] ^= 1 << (bit % 8)
		n.stats.Corrupted++
		n.trace(TraceCorrupt, src, dst, size, dir)
	}
	if cfg.Reorder > 0 && n.rng.Float64() < cfg.Reorder {
		arrive = satAdd(arrive, 1+n.rng.Int64N(int64(cfg.reorderDelay())))
		n.stats.Reordered++
		n.trace(TraceReorder, src, dst, size, dir)
	}
	kind := evFabric
	if dir == Down {
		kind = evDeliver
	}
	n.schedule(kind, arrive, dstHost, src, dst, buf).ctl = ctl
	if cfg.Dup > 0 && n.rng.Float64() < cfg.Dup {
		dup := n.bufs.Get(size)
		copy(dup, buf)
		n.schedule(kind, arrive, dstHost, src, dst, dup).ctl = ctl
		n.stats.Duplicated++
		n.trace(TraceDup, src, dst, size, dir)
	}
}
