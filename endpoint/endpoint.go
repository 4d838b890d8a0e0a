package endpoint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/netio/loop"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// Endpoint drives a Core over a netio.Conn with a loop.Driver: one
// goroutine reads datagram batches, a timer serves deadlines, and callers
// post operations; a single mutex makes the Core's owner whoever holds
// it. All methods are safe for concurrent use.
type Endpoint struct {
	log *slog.Logger
	io  *loop.Driver // reads, writes and times the Core (as endpointMachine)

	mu     sync.Mutex
	core   *Core
	closed bool

	// sec, when not nil, seals every datagram written and opens every
	// datagram read (Options.Security), wrapped around the core.
	sec *secure.Layer
	id  *secure.Identity // Options.Security

	services map[uint32]*Service // anycast services served, by group
	svcIDs   map[string]uint32   // service name → group (lookup cache)
	closers  []func()            // run by Close (stop heartbeats)
	handlers sync.WaitGroup      // anycast handler goroutines (at most Config.MaxIncoming)

	// Completions waiting for room in their notify channel, handed over
	// in completion order by one goroutine (notifier) while any wait.
	notes    []*Op
	noting   bool
	notifier sync.WaitGroup
	closing  chan struct{} // closed by Close: the notifier stops waiting

	drv driving // callers reading the socket themselves (Driving)

	// On the simulated network: handlers' replies queued for the
	// instant's flush (replies_sim.go). Under mu.
	replyTimer netio.Timer
	replies    []pendingReply
}

// Options for Listen and New beyond the Core's Config.
type Options struct {
	// Logger receives warnings (socket errors); nil discards.
	Logger *slog.Logger
	// UDP configures the socket made by Listen.
	UDP netio.UDPConfig
	// Security, when set, protects every datagram with a secure.Layer
	// of this identity: the endpoint talks only to processes that
	// prove an identity of the same fabric, in sessions sealed with
	// SecurityOptions, and drops (and counts) everything else. The
	// transport's MTU then leaves room for the tag, so that a sealed
	// datagram is no larger than Config.Transport.MTU.
	Security        *secure.Identity
	SecurityOptions secure.Options
}

// Listen opens a UDP socket on addr (e.g. "127.0.0.1:0") and returns an
// endpoint using it.
func Listen(addr string, cfg Config, opts Options) (*Endpoint, error) {
	conn, err := netio.ListenUDP(addr, opts.UDP)
	if err != nil {
		return nil, err
	}
	ep, err := New(conn, cfg, opts)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return ep, nil
}

// New returns an endpoint driving conn, which it owns from now on (Close
// closes it).
func New(conn netio.Conn, cfg Config, opts Options) (*Endpoint, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sec, err := secure.ProcessLayer(opts.Security, opts.SecurityOptions, log)
	if err != nil {
		return nil, fmt.Errorf("endpoint: security: %w", err)
	}
	if sec != nil {
		cfg.Transport = cfg.Transport.Sealed() // the layer opens every datagram the core sees
	}
	core, err := NewCore(cfg)
	if err != nil {
		return nil, err
	}
	ep := &Endpoint{log: log, core: core, closing: make(chan struct{}),
		services: make(map[uint32]*Service), svcIDs: make(map[string]uint32), sec: sec, id: opts.Security}
	var m loop.Machine = (*endpointMachine)(ep)
	if sec != nil {
		m = secure.Wrap(m, sec)
	}
	// The machine keeps nothing of a datagram past Receive (what it keeps
	// it copies), so a conn that hands out its own buffers (simnet's) is
	// read without buffers of the endpoint's.
	_, views := conn.(netio.ViewOnlyReader)
	ep.io = loop.New(m, &ep.mu, []netio.Conn{conn}, loop.Config{Logger: log, Name: "endpoint", Views: views})
	ep.initReplyOrder()
	ep.io.Start()
	return ep, nil
}

// LocalAddr is the socket's address.
func (ep *Endpoint) LocalAddr() netip.AddrPort { return ep.io.Conn().LocalAddr() }

// endpointMachine is the Core as the endpoint's driver runs it: its Poll
// hands the operations that completed to their callers and the requests
// that arrived to their services. The driver calls it under ep.mu.
type endpointMachine Endpoint

func (m *endpointMachine) Receive(now time.Time, d netio.Datagram) { m.core.Receive(now, d) }

func (m *endpointMachine) Poll(now time.Time, out []netio.Datagram) ([]netio.Datagram, time.Time) {
	ep := (*Endpoint)(m)
	out, done, next := ep.core.Poll(now, out)
	// Wake waiters before the send syscall: their results are final,
	// and what is left to send (ACKs, retransmissions) no longer
	// matters to them.
	for _, op := range done {
		ep.signalLocked(op)
	}
	ep.dispatchLocked()
	return out, next
}

// pumpLocked polls the core, sends, signals completions and arms the
// timer (loop.Driver.PumpLocked). Caller holds mu.
func (ep *Endpoint) pumpLocked(now time.Time) { ep.io.PumpLocked(now) }

// signalLocked reports op's completion: Done is closed, and op is sent on
// its notify channel, or queued for the notifier if the channel is full
// (or completions already wait: they keep their order). Caller holds mu.
func (ep *Endpoint) signalLocked(op *Op) {
	if op.done != nil {
		close(op.done)
	}
	if ep.drv.active && (op.waiter || op.cq != nil) {
		ep.drv.woke = true // a goroutine waits to run: the driver lets it
	}
	if op.cq == nil {
		ep.wakeDriver()
		return
	}
	if len(ep.notes) == 0 {
		select {
		case op.cq <- op:
			ep.wakeDriver()
			return
		default:
		}
	}
	ep.notes = append(ep.notes, op)
	if !ep.noting {
		ep.noting = true
		ep.notifier.Add(1)
		go ep.notify()
	}
}

// notify hands queued completions to their channels, one at a time,
// until none is left. After Close it hands over only those that find
// room, and drops the rest (their Done channels are closed).
func (ep *Endpoint) notify() {
	defer ep.notifier.Done()
	for {
		ep.mu.Lock()
		if len(ep.notes) == 0 {
			ep.noting = false
			ep.mu.Unlock()
			return
		}
		op := ep.notes[0]
		ep.notes[0] = nil
		ep.notes = ep.notes[1:]
		ep.mu.Unlock()
		select {
		case op.cq <- op:
		case <-ep.closing:
			select {
			case op.cq <- op:
			default:
			}
		}
		ep.wakeDriver()
	}
}

// Start posts op asynchronously. Completion closes op.Done(); if notify is
// not nil the op is also sent on it. Give notify room for every op in
// flight: completions that find it full wait, in completion order, for
// one goroutine of the endpoint to hand them over, and count against
// Config.MaxOps until then (Start fails with transport.ErrQueueFull while
// MaxOps ops are in flight or waiting so). At Close, completions still
// waiting are dropped where their channel has no room.
func (ep *Endpoint) Start(op *Op, notify chan<- *Op) error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.closed {
		return ErrClosed
	}
	if len(ep.notes) > 0 && ep.core.inFlight()+len(ep.notes) >= ep.core.cfg.MaxOps {
		return transport.ErrQueueFull
	}
	op.done = make(chan struct{})
	op.cq = notify
	op.waiter = false
	now := time.Now()
	if err := ep.core.Post(now, op); err != nil {
		return err
	}
	ep.pumpLocked(now)
	return nil
}

// Cancel abandons an op started with Start: it completes with
// ErrCanceled (Done is closed) unless it already completed. Once it has,
// the endpoint no longer touches the op's buffers.
func (ep *Endpoint) Cancel(op *Op) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if op.posted && !op.finished {
		ep.core.Cancel(op)
		ep.pumpLocked(time.Now())
	}
}

// Done is closed when an op started with Start completes.
func (op *Op) Done() <-chan struct{} { return op.done }

// finishedChan reports whether op.Done() is closed.
func (op *Op) finishedChan() bool {
	select {
	case <-op.done:
		return true
	default:
		return false
	}
}

// Do runs op and waits for it, or for ctx: a context deadline earlier than
// the op's timeout becomes its timeout, and cancellation abandons the op.
func (ep *Endpoint) Do(ctx context.Context, op *Op) error {
	if err := ep.Begin(ctx, op); err != nil {
		return err
	}
	return ep.Wait(ctx, op)
}

// Begin posts op as Do does, without waiting: a context deadline earlier
// than the op's timeout becomes its timeout. Wait for it with Wait and
// the same ctx. With Begin, one goroutine can put several operations on
// the wire in an order it chooses and wait for them together.
func (ep *Endpoint) Begin(ctx context.Context, op *Op) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		if t := time.Until(dl); op.Timeout == 0 || t < op.Timeout {
			op.Timeout = max(t, time.Nanosecond)
		}
	}
	return ep.Start(op, nil)
}

// Wait waits for op, posted by Begin, or for ctx: cancellation abandons
// the op. It returns the op's error.
func (ep *Endpoint) Wait(ctx context.Context, op *Op) error {
	ep.Drive(ctx, op.finishedChan)
	ep.mu.Lock()
	op.waiter = !op.finished
	ep.mu.Unlock()
	select {
	case <-op.done:
		return op.Err
	case <-ctx.Done():
		ep.mu.Lock()
		if !op.finished {
			ep.core.Cancel(op)
			ep.pumpLocked(time.Now())
		}
		ep.mu.Unlock()
		<-op.done
		if errors.Is(op.Err, ErrCanceled) {
			return fmt.Errorf("%w: %w", op.Err, ctx.Err())
		}
		return op.Err
	}
}

// Register exposes buf to peers' one-sided operations with the given
// permissions and returns its key (key 0 draws a random one). Until
// Deregister, read or write buf only inside Locked: peers' operations
// modify it from the endpoint's goroutine.
func (ep *Endpoint) Register(buf []byte, perm wire.Perm, key uint64) (uint64, error) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.core.Store().Register(buf, perm, key)
}

// Deregister withdraws a region; later requests get StatusBadKey.
func (ep *Endpoint) Deregister(key uint64) error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.core.Store().Deregister(key)
}

// Locked runs f while no peer operation can touch registered memory.
func (ep *Endpoint) Locked(f func()) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	f()
}

// Stats returns the core's counters.
func (ep *Endpoint) Stats() Stats {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.core.Stats()
}

// SecurityStats returns the security layer's counters (zero without
// Options.Security).
func (ep *Endpoint) SecurityStats() secure.LayerStats {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.sec.Stats()
}

// Identity returns the identity the endpoint seals its datagrams under
// (Options.Security), or nil when it runs without a security layer.
func (ep *Endpoint) Identity() *secure.Identity { return ep.id }

// PeerIdentity returns the certified identity of the process at addr,
// once a secure session with it is established (never without
// Options.Security).
func (ep *Endpoint) PeerIdentity(addr netip.AddrPort) (secure.Cert, bool) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.sec == nil {
		return secure.Cert{}, false
	}
	return ep.sec.Peer(addr)
}

// CloseLinger bounds how long Close keeps reading while the endpoint owes
// a peer the acknowledgment of data it received (see Close): two of the
// transport's largest retransmission timeouts.
const CloseLinger = 2 * transport.DefaultMaxRTO

// Close fails outstanding operations with ErrClosed, closes the socket and
// waits for the reader goroutine. It is idempotent. First it sends the
// ACKs it holds back, and while it owes a peer the acknowledgment of
// data received (a peer at an address not validated yet is acknowledged
// in full only once it echoes a challenge) it keeps reading, for at most
// CloseLinger.
func (ep *Endpoint) Close() error {
	ep.mu.Lock()
	if ep.closed {
		ep.mu.Unlock()
		return nil
	}
	ep.closed = true // Start fails from now on
	ep.io.StopLocked()
	// ACKs held back to ride on later data go out now, and the endpoint
	// lingers (reading, for at most CloseLinger) while it owes a peer the
	// ACK of data it received: a stranger's data is acknowledged only
	// once the stranger echoes a challenge, and a peer whose last message
	// is never acknowledged resends it until it gives this endpoint up
	// for dead (a rank that sent its part of a Gather to a root that
	// returned and closed).
	ep.lingerLocked(func() bool {
		ep.core.FlushAcks()
		ep.pumpLocked(time.Now())
		return !ep.core.Owed()
	})
	ep.core.FailAll(ErrClosed)
	_, done, _ := ep.core.Poll(time.Now(), nil)
	for _, op := range done {
		ep.signalLocked(op)
	}
	close(ep.closing)
	closers := ep.closers
	ep.closers = nil
	ep.mu.Unlock()
	for _, f := range closers {
		f()
	}
	err := ep.io.Close()
	ep.closeDriver()
	ep.handlers.Wait()
	ep.notifier.Wait()
	return err
}

// lingerLocked calls done, and then every millisecond, until it reports
// true or CloseLinger has passed, letting the reader goroutine run in
// between. Caller holds mu; so does done.
func (ep *Endpoint) lingerLocked(done func() bool) { ep.io.LingerLocked(CloseLinger, done) }

// addCloser registers f to run at Close (after outstanding ops failed).
func (ep *Endpoint) addCloser(f func()) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	ep.closers = append(ep.closers, f)
}

// Remote is a handle for one-sided operations against one peer (a memory
// node or another endpoint).
type Remote struct {
	ep   *Endpoint
	addr netip.AddrPort
}

// Dial resolves addr ("host:port") and checks that a peer answers there
// with a no-op request, so a wrong address fails here, within ctx.
func (ep *Endpoint) Dial(ctx context.Context, addr string) (*Remote, error) {
	ap, err := ResolveAddr(addr)
	if err != nil {
		return nil, fmt.Errorf("endpoint: dial: %w", err)
	}
	r := &Remote{ep: ep, addr: ap}
	if err := ep.Do(ctx, &Op{Kind: KindNop, Peer: ap}); err != nil {
		return nil, fmt.Errorf("endpoint: dial %v: %w", ap, err)
	}
	return r, nil
}

// Remote returns a handle for addr without probing it.
func (ep *Endpoint) Remote(addr netip.AddrPort) *Remote { return &Remote{ep: ep, addr: addr} }

// Addr is the peer's address.
func (r *Remote) Addr() netip.AddrPort { return r.addr }

// Read fills buf from the peer's region key at byte offset addr.
func (r *Remote) Read(ctx context.Context, key, addr uint64, buf []byte) error {
	return r.ep.Do(ctx, &Op{Kind: KindRead, Peer: r.addr, Key: key, Addr: addr, Buf: buf})
}

// Write stores data into the peer's region key at byte offset addr.
func (r *Remote) Write(ctx context.Context, key, addr uint64, data []byte) error {
	return r.ep.Do(ctx, &Op{Kind: KindWrite, Peer: r.addr, Key: key, Addr: addr, Buf: data})
}

// CompareAndSwap atomically replaces the little-endian 64-bit word at addr
// with swap if it equals compare. It returns the previous value; the swap
// happened if and only if prev == compare.
func (r *Remote) CompareAndSwap(ctx context.Context, key, addr, compare, swap uint64) (prev uint64, err error) {
	op := &Op{Kind: KindCAS, Peer: r.addr, Key: key, Addr: addr, Compare: compare, Swap: swap}
	err = r.ep.Do(ctx, op)
	return op.Old, err
}

// FetchAdd atomically adds delta to the 64-bit word at addr and returns the
// previous value.
func (r *Remote) FetchAdd(ctx context.Context, key, addr, delta uint64) (uint64, error) {
	op := &Op{Kind: KindFetchAdd, Peer: r.addr, Key: key, Addr: addr, Add: delta}
	err := r.ep.Do(ctx, op)
	return op.Old, err
}

// Apply performs mem[addr+i] = alu(mem[addr+i], data[i]) element-wise at
// the peer, with elements of type dt (little-endian).
func (r *Remote) Apply(ctx context.Context, key, addr uint64, dt wire.Dtype, alu wire.Alu, data []byte) error {
	return r.ep.Do(ctx, &Op{Kind: KindVector, Peer: r.addr, Key: key, Addr: addr, Buf: data, Dtype: dt, Alu: alu})
}

// MTU is the largest datagram this endpoint sends, in bytes (its
// transport's MTU). A forwarding node refuses a member whose MTU is above
// its own.
func (ep *Endpoint) MTU() int {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.core.MTU()
}

// PoolSegment is the most bytes one pool request carries or reads (its
// payload, hop list included for chains).
func (ep *Endpoint) PoolSegment() int {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.core.PoolSegment()
}
