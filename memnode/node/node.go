package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"github.com/ndma/ndma/internal/ctrlclient"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/netio/loop"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire/ctrl"
)

// Options for New beyond the Core's Config.
type Options struct {
	// Logger receives warnings (socket errors) and the pool lending's
	// events; nil discards.
	Logger *slog.Logger
	// Security, when set, protects every datagram with a secure.Layer
	// of this identity: the node talks only to processes that prove an
	// identity of the same fabric, in sessions sealed with
	// SecurityOptions, and takes pool requests and grants only from a
	// switch's credential. The transport's MTU then leaves room for the
	// tag, so that a sealed datagram is no larger than
	// Config.Transport.MTU.
	Security        *secure.Identity
	SecurityOptions secure.Options
}

// Node runs a Core over a netio.Conn with a loop.Driver: one goroutine
// reads datagram batches and a timer serves deadlines; a single mutex
// makes whoever holds it the Core's owner. All methods are safe for
// concurrent use.
type Node struct {
	log *slog.Logger
	io  *loop.Driver

	mu     sync.Mutex
	core   *Core
	closed bool
	sec    *secure.Layer // Options.Security's layer, or nil
	mtu    int           // the transport's MTU

	// incarnation tells this node's lifetime from a later one at the
	// same address (a restarted memory node: Lend).
	incarnation uint64
}

// New returns a node serving cfg.Store on conn, which it owns from now on
// (Close closes it).
func New(conn netio.Conn, cfg Config, opts Options) (*Node, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sec, err := secure.ProcessLayer(opts.Security, opts.SecurityOptions, log)
	if err != nil {
		return nil, fmt.Errorf("memory node: security: %w", err)
	}
	if sec != nil {
		cfg.Transport = cfg.Transport.Sealed() // the layer opens every datagram the core sees
	}
	core, err := NewCore(cfg)
	if err != nil {
		return nil, err
	}
	n := &Node{log: log, core: core, sec: sec, mtu: cfg.Transport.MTU, incarnation: mrand.Uint64()}
	if n.mtu == 0 {
		n.mtu = transport.DefaultMTU
	}
	var m loop.Machine = core
	if sec != nil {
		core.Server().SetIdentities(sec.Peer) // before the driver starts: no lock needed yet
		m = secure.Wrap(m, sec)
	}
	n.io = loop.New(m, &n.mu, []netio.Conn{conn}, loop.Config{Logger: log, Name: "memory node"})
	n.io.Start()
	return n, nil
}

// LocalAddr is the socket's address.
func (n *Node) LocalAddr() netip.AddrPort { return n.io.Conn().LocalAddr() }

// Stats returns the core's counters.
func (n *Node) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.core.Stats()
}

// SecurityStats returns the security layer's counters (zero without
// Options.Security).
func (n *Node) SecurityStats() secure.LayerStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.sec.Stats() // zero for a nil layer
}

// Lend offers capacity bytes of the node's region key to the pool of the
// switch sw (Config.Pool names the same switch and key), and keeps
// offering it as the node's heartbeat every opts' heartbeat interval
// until ctx ends or the node closes. It returns the node id once the
// first offer is accepted, or its error: a wire.Status for a refusal, a
// *ctrlclient.NoAnswerError (matching ErrNoSwitch) when no answer came
// (the first offer waits at most four intervals). See ctrlclient.Lend.
func (n *Node) Lend(ctx context.Context, sw netip.AddrPort, key, capacity uint64, opts ctrlclient.Options) (uint16, error) {
	id, err := ctrlclient.Lend(ctx, (*lender)(n), n.log, sw, key, capacity, n.incarnation, opts)
	if err != nil {
		return 0, fmt.Errorf("memory node: %w", err)
	}
	return id, nil
}

// Leave tells the switch sw that the node stops lending region key:
// the switch counts it dead at once instead of after its heartbeat
// timeout. Cancel the Lend context first.
func (n *Node) Leave(ctx context.Context, sw netip.AddrPort, key uint64, opts ctrlclient.Options) error {
	if err := ctrlclient.Leave(ctx, (*lender)(n), sw, key, n.incarnation, opts); err != nil {
		return fmt.Errorf("memory node: %w", err)
	}
	return nil
}

// do sends one encoded control request to sw and waits for its answer,
// or for ctx: a context deadline earlier than Config.OpTimeout bounds
// it, and cancellation abandons it.
func (n *Node) do(ctx context.Context, sw netip.AddrPort, msg []byte) ctrlclient.Result {
	if err := ctx.Err(); err != nil {
		return ctrlclient.Result{Err: err}
	}
	done := make(chan struct{})
	call := &Call{Peer: sw, Msg: msg, Done: func(*Call) { close(done) }}
	if dl, ok := ctx.Deadline(); ok {
		call.Timeout = max(time.Until(dl), time.Nanosecond)
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return ctrlclient.Result{Err: ErrClosed, Closed: true}
	}
	now := time.Now()
	if err := n.core.Post(now, call); err != nil {
		n.mu.Unlock()
		return ctrlclient.Result{Err: err}
	}
	n.io.PumpLocked(now)
	n.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		n.mu.Lock()
		n.core.Cancel(call)
		n.io.PumpLocked(time.Now())
		n.mu.Unlock()
		<-done
		if errors.Is(call.Err, ErrCanceled) {
			call.Err = fmt.Errorf("%w: %w", call.Err, ctx.Err())
		}
	}
	err := call.Err
	return ctrlclient.Result{Resp: call.Resp, Operand: call.Operand, Acked: call.Acked,
		TimedOut: errors.Is(err, ErrTimeout), Closed: errors.Is(err, ErrClosed), Err: err}
}

// lender is the Node as ctrlclient's Lender.
type lender Node

func (l *lender) Do(ctx context.Context, sw netip.AddrPort, msg []byte) ctrlclient.Result {
	return (*Node)(l).do(ctx, sw, msg)
}

func (l *lender) Control(ctx context.Context, sw netip.AddrPort, req *ctrl.Msg, opts *ctrlclient.Options) (*ctrl.Msg, error) {
	return ctrlclient.Exchange(ctx, l, sw, req, opts, l.mtu, l.sec == nil)
}

func (l *lender) Send(ctx context.Context, sw netip.AddrPort, msg []byte) error {
	return (*Node)(l).do(ctx, sw, msg).Err
}

func (l *lender) Reports(switchInc uint64) ([][]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.core.Server().PoolReports(switchInc)
}

func (l *lender) Reported(switchInc uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.core.Server().PoolReported(switchInc)
}

func (l *lender) Kept() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.core.Server().PoolKept()
}

func (l *lender) Closed(err error) bool { return errors.Is(err, ErrClosed) }

// CloseLinger bounds how long Close keeps reading while the node owes a
// peer the acknowledgment of data it received: two of the transport's
// largest retransmission timeouts.
const CloseLinger = 2 * transport.DefaultMaxRTO

// Close fails the node's requests in flight with ErrClosed, closes the
// socket and waits for the reader goroutine. It is idempotent. First it
// sends the ACKs it holds back, and while it owes a peer the
// acknowledgment of data received it keeps reading, for at most
// CloseLinger; responses peers have not acknowledged are dropped.
func (n *Node) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	n.io.StopLocked()
	n.io.LingerLocked(CloseLinger, func() bool {
		n.core.FlushAcks()
		n.io.PumpLocked(time.Now())
		return !n.core.Owed()
	})
	n.core.FailAll(ErrClosed)
	n.mu.Unlock()
	return n.io.Close()
}
