package stor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire/ctrl"
)

// GatewayConfig configures a Gateway.
type GatewayConfig struct {
	// Switch is the forwarding node; Fabric its options.
	Switch string
	Fabric endpoint.FabricOptions
	// Service names the storage service (DefaultService when empty).
	Service string
	// Name is the gateway's own service (Service+".gw" when empty).
	Name string
	// MaxInflight bounds the bytes of reads and writes the gateway has
	// forwarded to storage nodes and not yet seen answered, as a storage
	// target bounds its queue to its disks: beyond it a request waits at
	// the gateway instead of overrunning the switch's relay queues. Zero
	// means 8 MiB.
	MaxInflight int
	// Logger receives the gateway's logs (none when nil).
	Logger *slog.Logger
	// Seed, when not zero, seeds the gateway's random draws (as
	// ClientOptions.Seed).
	Seed uint64
}

// Gateway is the controller of the controller-forwarding mode, the
// design that multicast writes and anycast reads improve on: a storage
// target on its own host that every I/O goes to. It forwards a read to
// one replica of its extent and relays the answer, and a write to every
// replica, one copy each, answering when all have it.
type Gateway struct {
	ep  *endpoint.Endpoint
	cfg GatewayConfig
	c   *Client
	log *slog.Logger
	svc *endpoint.Service // under mu

	stop, done chan struct{}

	inflight *semaphore.Weighted

	mu      sync.Mutex
	descs   map[string]Descriptor
	writers map[writerKey]*gwWriter // bounded by MaxGatewayVolumes
	live    []uint16
	liveAt  time.Time
	stats   GatewayStats
}

// GatewayStats are a gateway's counters.
type GatewayStats struct {
	Reads, Writes, Flushes uint64
	Copies                 uint64 // write copies sent to replicas
	Failed                 uint64 // requests answered with a code other than OK
	Denied                 uint64 // of those, requests for a volume of another scope (CodeDenied)
}

// NewGateway returns a gateway using ep (which it does not close).
func NewGateway(ep *endpoint.Endpoint, cfg GatewayConfig) *Gateway {
	if cfg.Service == "" {
		cfg.Service = DefaultService
	}
	if cfg.Name == "" {
		cfg.Name = GatewayName(cfg.Service)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxInflight <= 0 {
		cfg.MaxInflight = 8 << 20
	}
	return &Gateway{ep: ep, cfg: cfg, log: cfg.Logger, descs: map[string]Descriptor{}, writers: map[writerKey]*gwWriter{},
		c:        NewClient(ep, cfg.Switch, ClientOptions{Fabric: cfg.Fabric, Service: cfg.Service, Seed: cfg.Seed}),
		inflight: semaphore.NewWeighted(int64(max(cfg.MaxInflight, MaxIO)))}
}

// GatewayName is the default service name of the gateway of storage
// service service.
func GatewayName(service string) string { return service + ".gw" }

// Start registers the gateway with the switch, and keeps it registered:
// every second it checks that the switch lists it (a restarted switch, or
// one that counted it dead, does not) and registers again if not.
func (g *Gateway) Start(ctx context.Context) error {
	if err := g.register(ctx); err != nil {
		return err
	}
	g.stop = make(chan struct{})
	g.done = make(chan struct{})
	go g.supervise()
	return nil
}

func (g *Gateway) register(ctx context.Context) error {
	g.mu.Lock()
	old := g.svc
	g.svc = nil
	g.mu.Unlock()
	if old != nil {
		old.Close()
	}
	s, err := g.ep.RegisterService(ctx, g.cfg.Switch, endpoint.ServiceConfig{Name: g.cfg.Name, Size: 1, Policy: ctrl.PolicyLeastOutstanding}, 0, g.handle, g.cfg.Fabric)
	if err != nil {
		return fmt.Errorf("stor: gateway: %w", err)
	}
	g.mu.Lock()
	g.svc = s
	g.mu.Unlock()
	return nil
}

func (g *Gateway) supervise() {
	defer close(g.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		ms, err := g.ep.ServiceMembers(ctx, g.cfg.Switch, g.cfg.Name, g.cfg.Fabric)
		if err != nil || len(ms) == 0 {
			g.log.Info("stor: gateway registering again", "err", err)
			if err := g.register(ctx); err != nil {
				g.log.Warn("stor: gateway register", "err", err)
			}
		}
		cancel()
	}
}

// Close stops serving.
func (g *Gateway) Close() {
	if g.stop != nil {
		close(g.stop)
		<-g.done
		g.stop = nil
	}
	g.mu.Lock()
	s := g.svc
	g.svc = nil
	g.mu.Unlock()
	if s != nil {
		s.Close()
	}
}

// Stats returns the gateway's counters.
func (g *Gateway) Stats() GatewayStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stats
}

// desc returns volume name's descriptor (cached).
func (g *Gateway) desc(ctx context.Context, name string) (Descriptor, error) {
	g.mu.Lock()
	d, ok := g.descs[name]
	g.mu.Unlock()
	if ok {
		return d, nil
	}
	vi, err := g.c.find(ctx, name)
	if err != nil {
		return Descriptor{}, err
	}
	d = vi.Descriptor
	g.mu.Lock()
	if len(g.descs) >= MaxGatewayVolumes {
		clear(g.descs)
	}
	g.descs[name] = d
	g.mu.Unlock()
	return d, nil
}

// MaxGatewayVolumes bounds the descriptors a gateway caches (a full cache
// is emptied: they are fetched again from the nodes), and the writers
// whose generations it keeps.
const MaxGatewayVolumes = 4096

// liveNodes returns the nodes the switch lists, refreshed at most every
// liveEvery (or at once with fresh).
func (g *Gateway) liveNodes(ctx context.Context, fresh bool) ([]uint16, error) {
	g.mu.Lock()
	if !fresh && time.Since(g.liveAt) < liveEvery {
		l := g.live
		g.mu.Unlock()
		return l, nil
	}
	g.mu.Unlock()
	l, err := g.c.live(ctx)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.live, g.liveAt = l, time.Now()
	g.mu.Unlock()
	return l, nil
}

// liveEvery is how long a gateway trusts its list of live nodes.
const liveEvery = 500 * time.Millisecond

// gatewayKey is the key of a request to the gateway: a storage node that
// gets it (a restarted switch gave the gateway's service id to the node's
// service) refuses it as meant for another (WRONG_NODE), and the client
// looks the gateway up again.
const gatewayKey = 1<<64 - 1

func (g *Gateway) handle(key uint64, who endpoint.Caller, req []byte) ([]byte, error) {
	if key != 0 && key != gatewayKey {
		// Meant for a storage node (see Node.handle).
		return refusal(CodeWrongNode, "this is the gateway, not a storage node"), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp := g.serve(ctx, who, req)
	g.mu.Lock()
	if len(resp) == 0 || resp[0] != byte(CodeOK) {
		g.stats.Failed++
	}
	g.mu.Unlock()
	return resp, nil
}

func (g *Gateway) serve(ctx context.Context, who endpoint.Caller, req []byte) []byte {
	if len(req) == 0 {
		return refusal(CodeBadRequest, "empty request")
	}
	switch req[0] {
	case opRead:
		r, ok := parseRead(req)
		if !ok {
			return refusal(CodeBadRequest, "read: malformed")
		}
		d, err := g.desc(ctx, r.Name)
		if err != nil {
			return refusal(codeOf(err), err.Error())
		}
		if !g.may(who, d.Owner) {
			return g.deny(d)
		}
		if r.Off >= d.Size {
			return refusal(CodeOutOfRange, "read past the end")
		}
		g.mu.Lock()
		g.stats.Reads++
		g.mu.Unlock()
		if err := g.inflight.Acquire(ctx, int64(r.Len)); err != nil {
			return refusal(CodeNotReady, "gateway queue: "+err.Error())
		}
		resp, err := readExtent(ctx, g.c, d, int(r.Off/d.Extent), req)
		g.inflight.Release(int64(r.Len))
		if err != nil {
			return refusal(codeOf(err), err.Error())
		}
		return resp
	case opGwWrite, opGwFlush:
		r, ok := parseOne(req)
		if !ok {
			return refusal(CodeBadRequest, "malformed")
		}
		d, err := g.desc(ctx, r.Name)
		if err != nil {
			return refusal(codeOf(err), err.Error())
		}
		if !g.may(who, d.Owner) {
			return g.deny(d)
		}
		e, op := -1, uint8(opFlushOne)
		if req[0] == opGwWrite {
			if r.Off >= d.Size {
				return refusal(CodeOutOfRange, "write past the end")
			}
			e, op = int(r.Off/d.Extent), opWriteOne
		}
		n := min(int64(len(r.Data)*d.Replicas), int64(g.cfg.MaxInflight))
		if err := g.inflight.Acquire(ctx, n); err != nil {
			return refusal(CodeNotReady, "gateway queue: "+err.Error())
		}
		w, done, err := g.writer(d, r.Holder)
		if err == nil {
			unlock := func() {}
			if op == opWriteOne {
				unlock = w.order.lock(int64(r.Off), int64(r.Off)+int64(len(r.Data)), g.ep.NewGate)
			}
			err = g.forward(ctx, w, e, r.append(nil, op))
			unlock()
			done()
		}
		g.inflight.Release(n)
		if err != nil {
			return refusal(gwCode(err), err.Error())
		}
		g.mu.Lock()
		if op == opWriteOne {
			g.stats.Writes++
		} else {
			g.stats.Flushes++
		}
		g.mu.Unlock()
		return []byte{byte(CodeOK)}
	}
	return refusal(CodeBadRequest, fmt.Sprintf("unknown request %d", req[0]))
}

// may reports whether a request from who may reach a volume of owner
// through the gateway: the gateway acts on the storage nodes with its
// own credential (of the storage service's scope), so it checks for them
// what a node checks (Node.may).
func (g *Gateway) may(who endpoint.Caller, owner string) bool {
	if g.ep.Identity() == nil {
		return true
	}
	svc, _ := secure.NameScopes(g.cfg.Service)
	return who.Is(svc) || owner != "" && who.Is(owner)
}

func (g *Gateway) deny(d Descriptor) []byte {
	g.mu.Lock()
	g.stats.Denied++
	g.mu.Unlock()
	owner := d.Owner
	if owner == "" {
		owner = "the storage service"
	}
	return refusal(CodeDenied, fmt.Sprintf("volume %s belongs to %s, not to the requester's scope", d.Name, owner))
}

// gwWriter is the data generation of the writer (lease holder) of one
// volume whose writes the gateway forwards: a Volume the gateway keeps,
// not opened (the writer holds the lease), whose generation code it runs
// (Volume.genLocked), as a writer that multicasts runs it before it forms
// its groups.
type gwWriter struct {
	v *Volume
	// again: the generation must be recorded anew before the next write
	// (a write or a generation failed on a node).
	again atomic.Bool
	users int // requests using it (under Gateway.mu)
	// order keeps overlapping writes one after the other.
	order blockOrder
}

// blockOrder orders a writer's overlapping writes at the gateway. The
// gateway sends each write to each replica itself, so two writes to one
// block in flight at once could reach the replicas in different orders
// (a lost copy of one resent after the other) and leave them holding
// different bytes once both are acknowledged. A write therefore waits
// until every write it overlaps that came before it has been answered
// by every replica: first come, first served, so that the order is the
// requests' order of arrival (which a simulated run fixes by its seed).
type blockOrder struct {
	mu      sync.Mutex
	cond    sync.Cond // a wait a synctest bubble counts as durably blocked
	next    uint64
	held    []orderSpan
	waiting []orderSpan
}

// orderSpan is a write's byte range [off, end) and its turn.
type orderSpan struct {
	off, end int64
	turn     uint64
}

func (a orderSpan) overlaps(b orderSpan) bool { return a.off < b.end && b.off < a.end }

// lock waits for the turn of a write of [off, end) and returns what ends
// it. A write that must wait makes a gate with newGate (in its turn's
// order) and passes it once its turn came, so that the writes woken at
// one instant go on in a fixed order on the simulated network.
func (o *blockOrder) lock(off, end int64, newGate func() *endpoint.Gate) (unlock func()) {
	o.mu.Lock()
	if o.cond.L == nil {
		o.cond.L = &o.mu
	}
	me := orderSpan{off, end, o.next}
	o.next++
	o.waiting = append(o.waiting, me)
	var gate *endpoint.Gate
	for slices.ContainsFunc(o.held, me.overlaps) ||
		slices.ContainsFunc(o.waiting, func(w orderSpan) bool { return w.turn < me.turn && w.overlaps(me) }) {
		if gate == nil {
			gate = newGate()
		}
		o.cond.Wait()
	}
	o.waiting = slices.DeleteFunc(o.waiting, func(w orderSpan) bool { return w.turn == me.turn })
	o.held = append(o.held, me)
	o.mu.Unlock()
	if gate != nil {
		gate.Pass()
	}
	return func() {
		o.mu.Lock()
		o.held = slices.DeleteFunc(o.held, func(w orderSpan) bool { return w.turn == me.turn })
		o.cond.Broadcast()
		o.mu.Unlock()
	}
}

// writer returns the generation state of holder's writes to volume d,
// counted in use until done is called. The table holds up to
// MaxGatewayVolumes writers; a full one forgets those not in use (their
// next writes record new generations), and refuses a new writer while
// every one is in use.
func (g *Gateway) writer(d Descriptor, holder uint64) (w *gwWriter, done func(), err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := writerKey{d.Name, d.Created, holder}
	w = g.writers[k]
	if w == nil {
		if len(g.writers) >= MaxGatewayVolumes {
			maps.DeleteFunc(g.writers, func(_ writerKey, w *gwWriter) bool { return w.users == 0 })
			if len(g.writers) >= MaxGatewayVolumes {
				return nil, nil, fmt.Errorf("%w: the gateway forwards the writes of %d writers", ErrNotReady, len(g.writers))
			}
		}
		w = &gwWriter{v: &Volume{c: g.c, d: d, write: true, holder: holder, ctrl: g.cfg.Name, log: g.log,
			groups: map[string]*wgroup{}, missing: map[uint16]bool{}, form: make(chan struct{}, 1)}}
		g.writers[k] = w
	}
	w.users++
	return w, func() {
		g.mu.Lock()
		w.users--
		g.mu.Unlock()
	}, nil
}

// writerKey names a writer of one incarnation of a volume.
type writerKey struct {
	name    string
	created int64
	holder  uint64
}

// generation makes sure w writes in a generation recorded on every node
// of the volume the switch lists (as a writer's formLocked does): a node
// that is down is left out, and learns from the others, when it returns,
// that it missed writes. A node that is listed but does not answer stops
// the writes until it answers or the switch counts it dead.
func (g *Gateway) generation(ctx context.Context, w *gwWriter) error {
	v := w.v
	v.lockForm()
	defer v.unlockForm()
	again := w.again.Load()
	live, err := g.liveNodes(ctx, again)
	if err != nil {
		return err
	}
	live = slices.DeleteFunc(slices.Clone(live), func(id uint16) bool { return !slices.Contains(v.d.Nodes, id) })
	if v.gen != 0 && !again && slices.Equal(live, v.genMembers) {
		return nil
	}
	// No write is in flight while the generation changes: one still on
	// its way to a node left out would complete on the others only.
	v.io.close()
	defer v.io.open()
	w.again.Store(true)
	st, err := g.c.Stat(ctx, v.d.Name)
	if err != nil {
		return err
	}
	if st.Desc.Created != v.d.Created {
		return fmt.Errorf("%w: %s was created anew", ErrNoVolume, v.d.Name)
	}
	states := map[uint16]leaseResp{}
	for _, nv := range st.Nodes {
		states[uint16(nv.Node)] = leaseResp{Epoch: nv.Epoch, Gen: nv.Gen, Ready: nv.Ready, Outdated: nv.Outdated, Grouped: nv.Grouped}
	}
	if silent := slices.DeleteFunc(slices.Clone(live), func(id uint16) bool { _, ok := states[id]; return ok }); len(silent) > 0 {
		return fmt.Errorf("%w: volume %s: nodes %v are up but do not answer", ErrNoReplica, v.d.Name, silent)
	}
	for _, nv := range st.Nodes {
		if !nv.Leased && slices.Contains(live, uint16(nv.Node)) {
			// It restarted: the writer's next lease renewal reaches it.
			return fmt.Errorf("%w: volume %s: node %d does not hold the writer's lease yet", ErrNotReady, v.d.Name, nv.Node)
		}
	}
	v.reform = true // a new generation, whatever the nodes
	if err := v.genLocked(ctx, live, states); err != nil {
		return err
	}
	for _, id := range v.d.Nodes {
		if !slices.Contains(v.genMembers, id) {
			g.log.Warn("stor: gateway: replica left out: writing without it", "volume", v.d.Name, "node", id, "generation", v.gen)
		}
	}
	w.again.Store(false)
	return nil
}

// errGeneration: the write's generation ended while it waited; it is
// sent again in the next.
var errGeneration = fmt.Errorf("%w: the volume's nodes changed", ErrNotReady)

// forward sends req (a write to extent e, or with e -1 a flush) to each
// node of w's generation that holds it, a copy each, and waits for all.
// A write with no copy current among them fails (ErrNotCurrent); one that
// a node does not take fails, and the next records a generation without
// the node if the switch counts it dead, so that a write is acknowledged
// only once every node that missed it is known, durably, to have.
func (g *Gateway) forward(ctx context.Context, w *gwWriter, e int, req []byte) error {
	if err := g.generation(ctx, w); err != nil {
		return err
	}
	v := w.v
	v.io.enter()
	defer v.io.leave()
	if w.again.Load() {
		return errGeneration
	}
	to := v.d.Nodes
	if e >= 0 {
		to = v.d.Replica(e)
	}
	to = slices.DeleteFunc(slices.Clone(to), func(id uint16) bool { return !slices.Contains(v.genMembers, id) })
	if e >= 0 && !slices.ContainsFunc(to, func(id uint16) bool { return v.cur[id] }) {
		return fmt.Errorf("%w: volume %s extent %d: no node up (of %v) held a current copy when the writer started writing without the others",
			ErrNotCurrent, v.d.Name, e, v.d.Replica(e))
	}
	if len(to) == 0 {
		return fmt.Errorf("%w: volume %s: every node is down", ErrNoReplica, v.d.Name)
	}
	errs := make([]error, len(to))
	g.c.forEach(ctx, len(to), func(ctx context.Context, i int) { _, errs[i] = g.c.call(ctx, to[i], "write", req) })
	g.mu.Lock()
	g.stats.Copies += uint64(len(to))
	g.mu.Unlock()
	var first error
	for _, err := range errs {
		var ne *NodeError
		if errors.As(err, &ne) && !retryable(err) && !errors.Is(err, ErrLeaseHeld) {
			return err // the node refused it: the writer must know
		}
		first = cmpErr(first, err)
	}
	if first != nil {
		// The next try records a generation: without a node that is
		// down, with one that restarted (whose lease the writer's next
		// renewal gives back); another writer's lease fails it.
		w.again.Store(true)
		if errors.Is(first, ErrLeaseHeld) {
			return fmt.Errorf("%w: %v", errGeneration, first)
		}
	}
	return first
}

// gwCode is the code the gateway answers err with: one the writer retries
// (NOT_READY) while the fabric recovers from a failure.
func gwCode(err error) Code {
	var ne *NodeError
	if retryable(err) && !errors.As(err, &ne) || errors.Is(err, ErrNotCurrent) || errors.Is(err, ErrNoReplica) {
		return CodeNotReady
	}
	return codeOf(err)
}
