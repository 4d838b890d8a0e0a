package coll

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"

	"github.com/ndma/ndma/endpoint"
)

// Errors.
var (
	// ErrArg wraps invalid arguments (bad root, mismatched buffer sizes...).
	ErrArg = errors.New("coll: invalid argument")
	// ErrNoLaunch (wrapped with ErrArg) is ParseEnv's error when no
	// launcher's variables are set: the process was not started as a rank.
	ErrNoLaunch = errors.New("coll: not started by a launcher")
	// ErrNoSwitch means an in-network algorithm was asked for on a
	// communicator without a forwarding node.
	ErrNoSwitch = errors.New("coll: no forwarding node for an in-network algorithm")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("coll: communicator closed")
)

// Config creates a Communicator explicitly. Bootstrap from a launcher's
// environment with FromEnv instead.
type Config struct {
	// Endpoint carries all traffic; the communicator does not close it.
	Endpoint *endpoint.Endpoint
	// Rank and Size: this process's rank in [0, Size).
	Rank, Size int
	// Switch is the forwarding node's address ("host:port"). With it the
	// ranks rendezvous there (Job names the job; every rank uses the same
	// name) and in-network algorithms are available. Without it, Peers
	// must list every rank's endpoint address and only host algorithms
	// run.
	Switch string
	Job    string
	// Token authenticates control messages to the switch.
	Token []byte
	// Peers lists every rank's endpoint address (index = rank), used when
	// there is no Switch.
	Peers []netip.AddrPort
	// Logger receives debug logs (the algorithm chosen per call); nil
	// discards.
	Logger *slog.Logger
}

// Communicator is a group of ranks that run collectives together, MPI
// style. Every rank must call the same collectives in the same order with
// matching arguments. Methods are safe for concurrent use; non-blocking
// calls may overlap.
type Communicator struct {
	ep    *endpoint.Endpoint
	rank  int
	size  int
	peers []netip.AddrPort
	group *endpoint.Group // nil without a switch
	sw    string
	swAP  netip.AddrPort // sw, parsed
	token []byte
	id    uint32 // context id: messages of different communicators never match
	log   *slog.Logger
	tuner Tuner

	mu     sync.Mutex
	seq    uint64 // collective calls so far (tags keep overlapping calls apart)
	splits uint64
	closed bool
}

// New creates a communicator. With a switch it blocks until every rank has
// joined (or ctx ends).
func New(ctx context.Context, cfg Config) (*Communicator, error) {
	if cfg.Endpoint == nil {
		return nil, fmt.Errorf("%w: no endpoint", ErrArg)
	}
	if cfg.Size < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.Size {
		return nil, fmt.Errorf("%w: rank %d of size %d", ErrArg, cfg.Rank, cfg.Size)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Communicator{ep: cfg.Endpoint, rank: cfg.Rank, size: cfg.Size, sw: cfg.Switch, token: cfg.Token, log: log, tuner: DefaultTuner{}}
	switch {
	case cfg.Switch != "":
		ap, err := netip.ParseAddrPort(cfg.Switch)
		if err != nil {
			return nil, fmt.Errorf("%w: switch address %q: %v", ErrArg, cfg.Switch, err)
		}
		c.swAP = ap
		job := cfg.Job
		if job == "" {
			job = "ndma"
		}
		g, err := cfg.Endpoint.JoinJob(ctx, cfg.Switch, job, cfg.Size, cfg.Rank, endpoint.FabricOptions{Token: cfg.Token})
		if err != nil {
			return nil, fmt.Errorf("coll: rendezvous: %w", err)
		}
		c.group = g
		c.id = g.ID()
		c.peers = make([]netip.AddrPort, cfg.Size)
		for _, m := range g.Members() {
			c.peers[m.ID] = m.Addr
		}
	case len(cfg.Peers) == cfg.Size:
		c.peers = append([]netip.AddrPort(nil), cfg.Peers...)
		c.id = 1
	default:
		return nil, fmt.Errorf("%w: need a Switch, or Peers for all %d ranks", ErrArg, cfg.Size)
	}
	return c, nil
}

// Rank is this process's rank.
func (c *Communicator) Rank() int { return c.rank }

// Size is the number of ranks.
func (c *Communicator) Size() int { return c.size }

// InNetwork reports whether a forwarding node is available.
func (c *Communicator) InNetwork() bool { return c.group != nil }

// Group is the communicator's group at the switch (its id and members),
// or nil without a switch.
func (c *Communicator) Group() *endpoint.Group { return c.group }

// SetTuner replaces the algorithm chooser used for AlgoAuto.
func (c *Communicator) SetTuner(t Tuner) { c.tuner = t }

// Close leaves the switch group (if any). The endpoint stays open.
func (c *Communicator) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	if c.group != nil {
		return c.group.Leave(ctx)
	}
	return nil
}

// call reserves the next collective sequence number; every rank makes the
// same calls in the same order, so they agree on it.
func (c *Communicator) call() (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, ErrClosed
	}
	c.seq++
	return c.seq, nil
}

// tag builds a message tag from the call's sequence number and a step
// within the algorithm.
func tag(seq uint64, step int) uint64 { return seq<<20 | uint64(step)&(1<<20-1) }

func (c *Communicator) send(ctx context.Context, to int, t uint64, data []byte) error {
	return c.ep.SendMsg(ctx, c.peers[to], c.id, t, data)
}

func (c *Communicator) recv(ctx context.Context, from int, t uint64, buf []byte) error {
	n, err := c.ep.RecvMsg(ctx, c.peers[from], c.id, t, buf)
	if err == nil && n != len(buf) {
		return fmt.Errorf("%w: rank %d sent %d bytes, expected %d", ErrArg, from, n, len(buf))
	}
	return err
}

// sendrecv sends to one rank while receiving from another.
func (c *Communicator) sendrecv(ctx context.Context, to int, sbuf []byte, from int, rbuf []byte, t uint64) error {
	sop, err := c.ep.StartSendMsg(c.peers[to], c.id, t, sbuf, nil)
	if err != nil {
		return err
	}
	rerr := c.recv(ctx, from, t, rbuf)
	select {
	case <-sop.Done():
	case <-ctx.Done():
		return ctx.Err()
	}
	if rerr != nil {
		return rerr
	}
	return sop.Err
}

// Members returns the member table (rank → endpoint address).
func (c *Communicator) Members() []netip.AddrPort { return c.peers }
