package stor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// DefaultService is the name of the storage service at the switch.
const DefaultService = "stor"

// NodeConfig configures a storage node.
type NodeConfig struct {
	// Dir holds the node's volumes (created if missing).
	Dir string
	// ID is the node's id, 0..MaxNodes-1; -1 takes the one Dir holds (0
	// for a new Dir). A Dir made by another id is refused.
	ID int
	// Capacity bounds the bytes of extents the node takes; 0: no bound
	// but the disk's.
	Capacity uint64
	// Switch is the forwarding node ("host:port"); Fabric its options.
	Switch string
	Fabric endpoint.FabricOptions
	// Service names the storage service (DefaultService when empty).
	Service string
	// Check is how often the node checks that the switch still lists it
	// (registering again after a switch restart) and retries a pending
	// resync. Zero means one second.
	Check time.Duration
	// Logger receives the node's logs (none when nil).
	Logger *slog.Logger
	// Seed, when not zero, seeds the node's random draws (the jitter
	// of its retries), so that a run on the simulated network replays
	// from its seed. Zero draws from the system's generator.
	Seed uint64
}

// Node is a storage node: it keeps extents of volumes in Dir and serves
// them through the switch — reads as an anycast member of each replica
// set it belongs to, writes as a member of the writer's multicast groups.
type Node struct {
	ep    *endpoint.Endpoint
	st    *store
	cfg   NodeConfig
	log   *slog.Logger
	ctx   context.Context
	stop  context.CancelFunc
	wg    sync.WaitGroup
	reqs  sync.WaitGroup
	mu    sync.Mutex
	svcs  map[string]*endpoint.Service // by service name
	draws *draws
	stats NodeStats
	// registered: the last register registered every service (under mu).
	registered bool
	// trace: the logger takes LevelTrace (every read served and write
	// applied, for following a fault test's history).
	trace bool
	// applyDelay (tests) holds each write this long before it is
	// applied, as a slow disk or a busy node does.
	applyDelay time.Duration
}

// LevelTrace is the level of a node's per-request logs: below Debug, for
// tests that follow every read and write.
const LevelTrace = slog.LevelDebug - 4

// NodeStats are a node's counters.
type NodeStats struct {
	Reads, ReadBytes   uint64
	Writes, WriteBytes uint64
	Flushes            uint64
	Refused            uint64 // requests answered with a code other than OK
	Denied             uint64 // of those, requests for a volume of another scope (CodeDenied)
	Resynced           uint64 // extents copied from other replicas
}

// NewNode opens the node's directory and returns a node serving through ep
// once Start is called. The node does not close ep.
func NewNode(ep *endpoint.Endpoint, cfg NodeConfig) (*Node, error) {
	if cfg.Service == "" {
		cfg.Service = DefaultService
	}
	if cfg.Check <= 0 {
		cfg.Check = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	st, err := openStore(cfg.Dir, cfg.ID, cfg.Capacity)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Node{ep: ep, st: st, cfg: cfg, log: cfg.Logger, ctx: ctx, stop: cancel, svcs: map[string]*endpoint.Service{}, draws: newDraws(cfg.Seed),
		trace: cfg.Logger.Enabled(context.Background(), LevelTrace)}, nil
}

// ID is the node's id.
func (n *Node) ID() int { return int(n.st.id) }

// Stats returns the node's counters.
func (n *Node) Stats() NodeStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

// Start brings the node's volumes up to date with the other replicas
// (those a live writer is writing wait for it to take this node back into
// its groups), registers the node with the switch and serves until Close.
func (n *Node) Start(ctx context.Context) error {
	n.unready()
	if err := n.register(ctx); err != nil {
		return err
	}
	n.syncCatalog(ctx)
	for _, v := range n.st.list() {
		n.maybeResync(v)
	}
	n.wg.Add(1)
	go n.supervise(n.ep.NewGate())
	return nil
}

// unready stops serving reads of every volume until a resync has
// compared its extents with the other replicas' (maybeResync).
func (n *Node) unready() {
	for _, v := range n.st.list() {
		v.mu.Lock()
		v.ready = false
		v.setState(stateVerifying, nil)
		v.mu.Unlock()
	}
}

// Close stops serving: services and write groups end, the files close.
func (n *Node) Close() {
	n.stop()
	n.wg.Wait()
	n.mu.Lock()
	svcs := n.svcs
	n.svcs = map[string]*endpoint.Service{}
	n.mu.Unlock()
	closeServices(svcs)
	for _, v := range n.st.list() {
		v.mu.Lock()
		gs := v.groups()
		v.mu.Unlock()
		for _, g := range gs {
			g.stop()
		}
	}
	n.reqs.Wait()
	n.st.close()
}

// closeServices closes the services of svcs, in name order.
func closeServices(svcs map[string]*endpoint.Service) {
	for _, name := range slices.Sorted(maps.Keys(svcs)) {
		svcs[name].Close()
	}
}

// register makes the node a member of the service (rank = id), of its own
// service and of every replica set its volumes put it in.
func (n *Node) register(ctx context.Context) error {
	want := map[string][2]int{ // name → size, rank
		n.cfg.Service:                    {MaxNodes, int(n.st.id)},
		nodeName(n.cfg.Service, n.st.id): {1, 0},
	}
	for _, v := range n.st.list() {
		for _, s := range v.meta.Desc.Sets() {
			if i := slices.Index(s, n.st.id); i >= 0 {
				want[setName(n.cfg.Service, s)] = [2]int{len(s), i}
			}
		}
	}
	// Leave the old registrations first: after a switch restart their
	// group ids may be the new ones of other services.
	n.mu.Lock()
	old := n.svcs
	n.svcs = map[string]*endpoint.Service{}
	n.mu.Unlock()
	closeServices(old)
	n.mu.Lock()
	n.registered = false
	n.mu.Unlock()
	// In name order: what a node sends follows from its state alone.
	for _, name := range slices.Sorted(maps.Keys(want)) {
		sr := want[name]
		if err := n.registerOne(ctx, name, sr[0], sr[1]); err != nil {
			return err
		}
	}
	n.mu.Lock()
	n.registered = true
	n.mu.Unlock()
	return nil
}

func (n *Node) registerOne(ctx context.Context, name string, size, rank int) error {
	n.mu.Lock()
	old := n.svcs[name]
	delete(n.svcs, name)
	n.mu.Unlock()
	if old != nil {
		old.Close()
	}
	var s *endpoint.Service
	for {
		var err error
		s, err = n.ep.RegisterService(ctx, n.cfg.Switch, endpoint.ServiceConfig{Name: name, Size: size, Policy: ctrl.PolicyLeastOutstanding}, rank, n.handle, n.cfg.Fabric)
		passGate(ctx)
		if err == nil {
			break
		}
		// BUSY: the switch still counts this node's previous incarnation
		// alive (it restarted within the switch's heartbeat timeout).
		if !errors.Is(err, wire.StatusBusy) || ctx.Err() != nil {
			return fmt.Errorf("stor: node %d: %w", n.st.id, err)
		}
		if sleepCtx(ctx, 200*time.Millisecond) != nil {
			return fmt.Errorf("stor: node %d: %w", n.st.id, err)
		}
	}
	n.mu.Lock()
	n.svcs[name] = s
	n.mu.Unlock()
	return nil
}

// supervise registers the node again when the switch no longer lists it
// (the switch restarted, or counted it dead), and starts the resyncs that
// wait for a writer that is gone. It passes gate after each wait
// (passGate).
func (n *Node) supervise(gate *endpoint.Gate) {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.Check)
	defer t.Stop()
	gctx := context.WithValue(n.ctx, gateKey{}, gate)
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		gate.Pass()
		ctx, cancel := context.WithTimeout(gctx, n.cfg.Check)
		ms, err := n.ep.ServiceMembers(ctx, n.cfg.Switch, n.cfg.Service, n.cfg.Fabric)
		passGate(ctx)
		listed := err == nil && slices.ContainsFunc(ms, func(m ctrl.MemberInfo) bool {
			// The switch sees the address the datagrams come from,
			// which for a wildcard listener is not LocalAddr's.
			return m.ID == n.st.id && m.Addr.Port() == n.ep.LocalAddr().Port()
		})
		if !listed && n.ctx.Err() == nil {
			// The switch counted this node dead (or restarted), or does
			// not answer (the node may be cut off, and counted dead):
			// writes may have passed it by meanwhile, so it serves reads
			// again only once it has checked its extents against the
			// other replicas, as after a restart.
			n.unready()
		}
		n.mu.Lock()
		partial := !n.registered
		n.mu.Unlock()
		if partial && listed && n.ctx.Err() == nil {
			// Listed in the storage service, but some of its own or
			// replica set services failed to register last time: a
			// client asking for this node would reach another.
			n.log.Info("stor: registering the rest", "node", n.st.id)
			if err := n.register(ctx); err != nil {
				n.log.Warn("stor: register", "node", n.st.id, "err", err)
			}
		}
		if !listed && n.ctx.Err() == nil {
			n.log.Info("stor: registering again", "node", n.st.id, "err", err)
			if err := n.register(ctx); err != nil {
				n.log.Warn("stor: register", "node", n.st.id, "err", err)
			} else {
				n.syncCatalog(ctx)
			}
		}
		cancel()
		for _, v := range n.st.list() {
			n.maybeResync(v)
		}
	}
}
