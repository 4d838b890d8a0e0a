package coll

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
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
	// Switches, with more than one address (at most MaxSwitches),
	// shards the job's in-network traffic over several forwarding
	// nodes: every in-network Allreduce, Reduce, ReduceScatter, Bcast
	// and Allgather is cut into one stripe of whole elements per switch,
	// so each carries about 1/K of the bytes (see shard.go). The ranks
	// rendezvous at every switch; Switches[0] is the communicator's
	// Switch (Switch must be empty or the same), whose group carries
	// Barrier and the host algorithms. With one address it is Switch.
	// Every rank must list the same switches in the same order.
	Switches []string
	// StripeEndpoints are the endpoints of switches 1..K−1 of Switches,
	// one each, none of them Endpoint (a group's id is the switch's, so
	// one endpoint cannot be a member at two switches). The
	// communicator does not close them.
	StripeEndpoints []*endpoint.Endpoint
	// Token authenticates control messages to the switch. With Switch it
	// must not be empty unless Insecure is set.
	Token []byte
	// Insecure rendezvouses at a switch that runs without a fabric token
	// (see endpoint.FabricOptions.Insecure).
	Insecure bool
	// Peers lists every rank's endpoint address (index = rank), used when
	// there is no Switch.
	Peers []netip.AddrPort
	// Logger receives debug logs (the algorithm chosen per call); nil
	// discards.
	Logger *slog.Logger
	// Liveness bounds how long a host algorithm's receive waits for a
	// rank that sends nothing: after Liveness with no byte of the
	// expected message, the collective fails with a *RankError naming
	// the rank. A rank computing for longer than Liveness before
	// entering a collective makes the others fail, so keep it above the
	// longest such gap. Zero means DefaultLiveness without a switch and
	// no bound with one; negative, no bound. With a switch, a rank that
	// dies is reported by the switch after its heartbeat timeout and
	// every pending operation with it fails then, whatever Liveness
	// says; a positive Liveness also bounds the wait for a rank that is
	// alive but silent (or for every rank, if the switch goes away).
	Liveness time.Duration
	// JoinTimeout bounds the rendezvous at the switch: New fails after it
	// (or when ctx ends, if sooner) saying how many ranks joined and which
	// are missing. Zero means DefaultJoinTimeout.
	JoinTimeout time.Duration
	// Hierarchy chooses two-level collectives for ranks that share a
	// host: with HierarchyAuto, New exchanges host keys (a collective of
	// every rank) and, when some host has more than one rank, every
	// collective (blocking and not) goes through a
	// shared-memory segment inside each host and over the network only
	// between one leader per host. The zero value, HierarchyOff, sends
	// every collective over the network (a launch from the environment
	// gets DefaultHierarchy, HierarchyAuto, instead). Communicators made
	// by Split run without a hierarchy.
	Hierarchy Hierarchy
	// HostID, with HierarchyAuto, names this rank's host: ranks with the
	// same HostID share memory (so they must share /dev/shm). Empty
	// means HostKey(), right for ranks that are processes; tests set it
	// to run several hosts in one process.
	HostID string
}

// Defaults of Config.
const (
	DefaultLiveness    = time.Minute
	DefaultJoinTimeout = time.Minute
)

// RankError reports a collective that failed because of one rank: the
// switch reported it dead (or gone), or, without a switch, it sent
// nothing for Config.Liveness. Unwrap gives the cause: an
// *endpoint.MemberError, endpoint.ErrPeerSilent or a *transport.PeerError.
// Self is set when the rank is the caller's own: the switch counted this
// rank dead (it was silent longer than the switch's heartbeat timeout:
// stopped, paused or starved of CPU) or no longer knows the group.
type RankError struct {
	Rank int
	Err  error
	Self bool
}

func (e *RankError) Error() string {
	var me *endpoint.MemberError
	switch {
	case e.Self:
		return fmt.Sprintf("coll: this rank (%d) is no longer a member of the group: the switch counted it dead, as it heard nothing from it for longer than its heartbeat timeout (the process was stopped, paused or starved of CPU), or the switch restarted (%v)", e.Rank, e.Err)
	case errors.As(e.Err, &me) && me.Left:
		return fmt.Sprintf("coll: rank %d left the communicator (%v)", e.Rank, e.Err)
	case errors.As(e.Err, &me):
		return fmt.Sprintf("coll: rank %d died: the switch stopped hearing from it (%v)", e.Rank, e.Err)
	case errors.Is(e.Err, errFoundDead):
		return fmt.Sprintf("coll: rank %d died or went silent (%v)", e.Rank, e.Err)
	case errors.Is(e.Err, errProcessGone):
		return fmt.Sprintf("coll: rank %d, on this host, died (%v)", e.Rank, e.Err)
	case errors.Is(e.Err, ErrHostAborted):
		return fmt.Sprintf("coll: rank %d, on this host, failed the collective (%v)", e.Rank, e.Err)
	case errors.Is(e.Err, endpoint.ErrPeerSilent):
		return fmt.Sprintf("coll: rank %d is silent, taken for dead (%v; see Config.Liveness)", e.Rank, e.Err)
	}
	return fmt.Sprintf("coll: rank %d is unreachable (%v)", e.Rank, e.Err)
}

func (e *RankError) Unwrap() error { return e.Err }

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
	// shards: the membership at each switch, shards[0] being (ep,
	// group, swAP); more than one when sharded (shard.go). Empty
	// without a switch.
	shards []shard
	// switches and stripeEps are Config.Switches and
	// Config.StripeEndpoints, for Split; ownEps the stripe endpoints
	// this communicator opened (Launch.Communicator) and closes.
	switches  []string
	stripeEps []*endpoint.Endpoint
	ownEps    []*endpoint.Endpoint
	sw        string
	swAP      netip.AddrPort // sw, parsed
	job       string         // the job's name at the switch, for Split
	token     []byte
	// insecure is Config.Insecure, for Split.
	insecure bool
	id       uint32 // context id: messages of different communicators never match
	log      *slog.Logger
	tuner    Tuner
	idle     time.Duration // two-sided receives' Idle bound (Config.Liveness; 0: none)
	// Config.Liveness and Config.JoinTimeout as given, for Split.
	liveness, joinTimeout time.Duration

	mu     sync.Mutex
	seq    uint64 // collective calls so far (tags keep overlapping calls apart)
	splits uint64
	closed bool

	// Aborted calls and the receives for other ranks' abort messages
	// (abort.go).
	abortMu sync.Mutex
	aborts  abortState
	abortWG sync.WaitGroup

	// hier is the two-level state (hier.go), nil without a hierarchy.
	hier *hierarchy
}

// New creates a communicator. With a switch it blocks until every rank has
// joined (or ctx ends).
func New(ctx context.Context, cfg Config) (*Communicator, error) {
	return newComm(ctx, cfg, 1)
}

// newComm is New with the context id of a communicator without a switch
// (Split gives each of its communicators its own): set before the
// receives for abort messages are posted, which match on it.
func newComm(ctx context.Context, cfg Config, id uint32) (*Communicator, error) {
	if cfg.Endpoint == nil {
		return nil, fmt.Errorf("%w: no endpoint", ErrArg)
	}
	if cfg.Size < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.Size {
		return nil, fmt.Errorf("%w: rank %d of size %d", ErrArg, cfg.Rank, cfg.Size)
	}
	switches, err := checkShards(&cfg)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Communicator{ep: cfg.Endpoint, rank: cfg.Rank, size: cfg.Size, sw: cfg.Switch, token: cfg.Token, insecure: cfg.Insecure, log: log, tuner: DefaultTuner{},
		liveness: cfg.Liveness, joinTimeout: cfg.JoinTimeout}
	switch {
	case cfg.Liveness == 0 && cfg.Switch == "":
		c.idle = DefaultLiveness
	case cfg.Liveness > 0:
		c.idle = cfg.Liveness
	}
	switch {
	case cfg.Switch != "":
		ap, err := endpoint.ResolveAddr(cfg.Switch)
		if err != nil {
			return nil, fmt.Errorf("%w: switch address %v", ErrArg, err)
		}
		c.swAP, c.sw = ap, ap.String() // looked up once
		job := cfg.Job
		if job == "" {
			job = "ndma"
		}
		jt := cfg.JoinTimeout
		if jt <= 0 {
			jt = DefaultJoinTimeout
		}
		jctx, cancel := context.WithTimeout(ctx, jt)
		g, err := cfg.Endpoint.JoinJob(jctx, c.sw, job, cfg.Size, cfg.Rank, endpoint.FabricOptions{Token: cfg.Token, Insecure: cfg.Insecure})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("coll: rendezvous: %w", err)
		}
		c.group, c.job = g, job
		c.id = g.ID()
		c.shards = []shard{{ep: cfg.Endpoint, group: g, sw: ap}}
		if len(switches) > 1 {
			c.switches, c.stripeEps = switches, cfg.StripeEndpoints
			jctx, cancel := context.WithTimeout(ctx, jt)
			err := c.joinShards(jctx, cfg, job)
			cancel()
			if err != nil {
				c.leaveShards(context.WithoutCancel(ctx))
				g.Leave(context.WithoutCancel(ctx))
				return nil, err
			}
		}
		c.peers = make([]netip.AddrPort, cfg.Size)
		for _, m := range g.Members() {
			c.peers[m.ID] = m.Addr
		}
	case len(cfg.Peers) == cfg.Size:
		c.peers = append([]netip.AddrPort(nil), cfg.Peers...)
		c.id = id
	default:
		return nil, fmt.Errorf("%w: need a Switch, or Peers for all %d ranks", ErrArg, cfg.Size)
	}
	c.startAborts()
	if cfg.Hierarchy != HierarchyOff && cfg.Hierarchy != HierarchyAuto {
		c.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("%w: hierarchy %d", ErrArg, cfg.Hierarchy)
	}
	if c.size > 1 {
		keys, err := c.agreeSetup(ctx, cfg.Hierarchy, cfg.HostID)
		if err == nil && cfg.Hierarchy == HierarchyAuto {
			c.hier, err = c.setupHierarchy(ctx, keys)
		}
		if err != nil {
			c.Close(context.WithoutCancel(ctx))
			return nil, err
		}
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

// SetTuner replaces the algorithm chooser used for AlgoAuto (with a
// hierarchy, for the leaders' step too).
func (c *Communicator) SetTuner(t Tuner) {
	c.tuner = t
	if c.hier != nil && c.hier.leaders != nil {
		c.hier.leaders.tuner = t
	}
}

// LocalRanks returns the ranks that share this rank's host, ascending,
// when collectives run in two levels (Config.Hierarchy); nil otherwise.
func (c *Communicator) LocalRanks() []int {
	if c.hier == nil {
		return nil
	}
	return append([]int(nil), c.hier.local...)
}

// Hosts is the number of hosts the ranks run on, when collectives run in
// two levels; 0 otherwise.
func (c *Communicator) Hosts() int {
	if c.hier == nil {
		return 0
	}
	return c.hier.hosts
}

// Close leaves the switch group (if any) and, with a hierarchy, the
// leaders' communicator, and unmaps the host's segment once the calls on
// it ended (or ctx ends: it then stays mapped). The endpoint stays open.
func (c *Communicator) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	var herr error
	if c.hier != nil {
		herr = c.hier.close(ctx)
	}
	c.stopAborts()
	if len(c.shards) > 0 {
		serr := c.leaveShards(ctx)
		if err := c.group.Leave(ctx); err != nil {
			return err
		}
		if serr != nil {
			return serr
		}
	}
	return herr
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

// eagerSend is the largest two-sided send of an algorithm that completes
// eagerly: the small messages whose latency a step waits on. Pipelined
// algorithms' segments (16 KiB by default) keep completing on delivery,
// which their windows count on.
const eagerSend = 4 << 10

// tag builds a message tag from the call's sequence number and a step
// within the algorithm.
func tag(seq uint64, step int) uint64 { return seq<<20 | uint64(step)&(1<<20-1) }

// sendOp is a two-sided send of data to rank to. With a switch it is
// bound to the rank's group membership, so it fails as soon as the
// switch reports the rank dead. Token holds the rank (for opErr). A send
// of at most eagerSend bytes completes once the transport has its copy
// (endpoint.Op.Eager), so an algorithm's step does not wait for the
// peer's ACK, only for what it receives.
func (c *Communicator) sendOp(to int, t uint64, data []byte) *endpoint.Op {
	op := &endpoint.Op{Kind: endpoint.KindSendMsg, Peer: c.peers[to], Comm: c.id, Tag: t, Buf: data, Token: uint64(to), Eager: len(data) <= eagerSend}
	if c.group != nil {
		op.Group, op.From = c.group.ID(), uint16(to)
	}
	return op
}

// recvOp is a two-sided receive from rank from into buf: bound to the
// rank's group membership with a switch, and by Config.Liveness.
func (c *Communicator) recvOp(from int, t uint64, buf []byte) *endpoint.Op {
	op := &endpoint.Op{Kind: endpoint.KindRecvMsg, Peer: c.peers[from], Comm: c.id, Tag: t, Buf: buf, Token: uint64(from), Idle: c.idle}
	if c.group != nil {
		op.Group, op.From = c.group.ID(), uint16(from)
	}
	return op
}

// opErr is the error of a completed op: a failure caused by one rank (it
// died, left, went silent or became unreachable) as a *RankError naming
// it; a message shorter than its buffer (every collective's message sizes
// follow from its arguments) as ErrArg.
func (c *Communicator) opErr(op *endpoint.Op) error {
	err := op.Err
	if err == nil {
		if op.Kind == endpoint.KindRecvMsg && op.N != len(op.Buf) {
			return fmt.Errorf("%w: rank %d sent %d bytes, expected %d", ErrArg, op.Token, op.N, len(op.Buf))
		}
		return nil
	}
	return c.stripeErr(c.rankErr(err, op), op)
}

// memberGroup reports whether group is the communicator's group at the
// switch that op (nil: any) went through.
func (c *Communicator) memberGroup(group uint32, op *endpoint.Op) bool {
	if c.group == nil {
		return false
	}
	if !c.sharded() || op == nil || op.Kind == endpoint.KindSendMsg || op.Kind == endpoint.KindRecvMsg {
		return group == c.group.ID()
	}
	return group == c.shards[c.shardOf(op)].group.ID()
}

// rankErr names the rank behind err when one is: the member a
// *endpoint.MemberError names (a group's member ids are its ranks), or
// the peer of a two-sided op that went silent or unreachable.
func (c *Communicator) rankErr(err error, op *endpoint.Op) error {
	var re *RankError
	if err == nil || errors.As(err, &re) {
		return err
	}
	var me *endpoint.MemberError
	if errors.As(err, &me) && c.memberGroup(me.Group, op) {
		return &RankError{Rank: int(me.Member), Err: err, Self: int(me.Member) == c.rank}
	}
	if errors.Is(err, wire.StatusNotMember) && c.group != nil {
		// The group's operations refused as not a member's: this rank
		// is no longer one.
		return &RankError{Rank: c.rank, Err: err, Self: true}
	}
	var pe *transport.PeerError
	if op != nil && (op.Kind == endpoint.KindSendMsg || op.Kind == endpoint.KindRecvMsg) &&
		(errors.Is(err, endpoint.ErrPeerSilent) || errors.As(err, &pe)) {
		return &RankError{Rank: int(op.Token), Err: err}
	}
	return err
}

func (c *Communicator) send(ctx context.Context, to int, t uint64, data []byte) error {
	op := c.sendOp(to, t, data)
	if err := c.ep.Do(ctx, op); err != nil {
		return c.rankErr(err, op)
	}
	return nil
}

func (c *Communicator) recv(ctx context.Context, from int, t uint64, buf []byte) error {
	op := c.recvOp(from, t, buf)
	if err := c.ep.Do(ctx, op); err != nil {
		return c.rankErr(err, op)
	}
	return c.opErr(op)
}

// sendrecv sends to one rank while receiving from another.
func (c *Communicator) sendrecv(ctx context.Context, to int, sbuf []byte, from int, rbuf []byte, t uint64) error {
	sop := c.sendOp(to, t, sbuf)
	if err := c.ep.Start(sop, nil); err != nil {
		return err
	}
	rerr := c.recv(ctx, from, t, rbuf)
	if err := c.awaitOp(ctx, sop); err != nil && rerr == nil {
		rerr = err
	}
	return rerr
}

// Members returns the member table (rank → endpoint address).
func (c *Communicator) Members() []netip.AddrPort { return c.peers }
