package stor

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/transport"
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
	return &Node{ep: ep, st: st, cfg: cfg, log: cfg.Logger, ctx: ctx, stop: cancel, svcs: map[string]*endpoint.Service{},
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
	go n.supervise()
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
	for _, s := range svcs {
		s.Close()
	}
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
	for _, s := range old {
		s.Close()
	}
	n.mu.Lock()
	n.registered = false
	n.mu.Unlock()
	for name, sr := range want {
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
		if err == nil {
			break
		}
		// BUSY: the switch still counts this node's previous incarnation
		// alive (it restarted within the switch's heartbeat timeout).
		if !errors.Is(err, wire.StatusBusy) || ctx.Err() != nil {
			return fmt.Errorf("stor: node %d: %w", n.st.id, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stor: node %d: %w", n.st.id, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	n.mu.Lock()
	n.svcs[name] = s
	n.mu.Unlock()
	return nil
}

// supervise registers the node again when the switch no longer lists it
// (the switch restarted, or counted it dead), and starts the resyncs that
// wait for a writer that is gone.
func (n *Node) supervise() {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.Check)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Check)
		ms, err := n.ep.ServiceMembers(ctx, n.cfg.Switch, n.cfg.Service, n.cfg.Fabric)
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

// handle serves one anycast request. A request meant for one node carries
// its id+1 as the key: a switch that restarted may have given the
// service's group id to another service, and a client that still has the
// old one reaches the wrong node, which says so.
func (n *Node) handle(key uint64, req []byte) ([]byte, error) {
	n.reqs.Add(1)
	defer n.reqs.Done()
	if len(req) == 0 {
		return n.refuse(CodeBadRequest, "empty request"), nil
	}
	if key != 0 && key != uint64(n.st.id)+1 {
		return n.refuse(CodeWrongNode, fmt.Sprintf("this is node %d, not %d", n.st.id, key-1)), nil
	}
	var resp []byte
	switch req[0] {
	case opInfo:
		resp = n.info()
	case opCreate:
		resp = n.create(req[1:])
	case opRemove:
		resp = n.remove(req[1:])
	case opList:
		resp = n.listVols()
	case opStat:
		resp = n.stat(req[1:])
	case opLease:
		resp = n.lease(req[1:])
	case opJoin:
		resp = n.join(req[1:])
	case opRead:
		resp = n.read(req)
	case opVersions:
		resp = n.versions(req[1:])
	case opMissing:
		resp = n.missing(req[1:])
	case opWriteOne, opFlushOne:
		resp = n.one(req)
	case opGen:
		resp = n.setGen(req[1:])
	case opForce:
		resp = n.force(req[1:])
	case opEnroll:
		resp = n.enroll(req[1:])
	case opCatalog:
		resp = n.catalogAdd(req[1:])
	case opCatList:
		n.st.mu.Lock()
		resp = okJSON(n.st.cat.list())
		n.st.mu.Unlock()
	default:
		resp = n.refuse(CodeBadRequest, fmt.Sprintf("unknown request %d", req[0]))
	}
	return resp, nil
}

func (n *Node) refuse(c Code, msg string) []byte {
	n.mu.Lock()
	n.stats.Refused++
	n.mu.Unlock()
	return refusal(c, msg)
}

func (n *Node) refuseErr(err error) []byte { return n.refuse(codeOf(err), err.Error()) }

// leasedVolume returns volume name locked (v.mu) if holder holds its
// write lease, or nil and the refusal.
func (n *Node) leasedVolume(name string, holder uint64) (*vol, []byte) {
	v, refused := n.volume(name)
	if v == nil {
		return nil, refused
	}
	v.mu.Lock()
	if !v.leasedTo(holder) {
		v.mu.Unlock()
		return nil, n.refuse(CodeLeaseHeld, "the requester does not hold the volume's write lease")
	}
	return v, nil
}

// volume returns volume name, or nil and the NO_VOLUME refusal.
func (n *Node) volume(name string) (*vol, []byte) {
	if v := n.st.get(name); v != nil {
		return v, nil
	}
	return nil, n.refuse(CodeNoVolume, name)
}

func okJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return append([]byte{byte(CodeOK)}, b...)
}

// NodeInfo is what a node says about itself.
type NodeInfo struct {
	ID       int    `json:"id"`
	Addr     string `json:"addr"`
	Capacity uint64 `json:"capacity"`
	Used     uint64 `json:"used"`
	Volumes  int    `json:"volumes"`
}

func (n *Node) info() []byte {
	n.st.mu.Lock()
	ni := NodeInfo{ID: int(n.st.id), Addr: n.ep.LocalAddr().String(), Capacity: n.st.capacity, Used: n.st.used, Volumes: len(n.st.vols)}
	n.st.mu.Unlock()
	return okJSON(ni)
}

func (n *Node) create(b []byte) []byte {
	var d Descriptor
	if err := json.Unmarshal(b, &d); err != nil {
		return n.refuse(CodeBadRequest, "descriptor: "+err.Error())
	}
	if !slices.Contains(d.Nodes, n.st.id) {
		return n.refuse(CodeBadRequest, fmt.Sprintf("volume %s is not placed on node %d", d.Name, n.st.id))
	}
	v, fresh, err := n.st.create(d)
	if err != nil {
		return n.refuseErr(err)
	}
	if fresh {
		n.log.Info("stor: volume created", "name", d.Name, "size", d.Size, "replicas", d.Replicas)
	}
	ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
	defer cancel()
	for _, s := range v.meta.Desc.Sets() {
		name := setName(n.cfg.Service, s)
		n.mu.Lock()
		have := n.svcs[name] != nil
		n.mu.Unlock()
		if i := slices.Index(s, n.st.id); i >= 0 && !have {
			if err := n.registerOne(ctx, name, len(s), i); err != nil {
				return n.refuse(CodeIO, err.Error())
			}
		}
	}
	return []byte{byte(CodeOK)}
}

func (n *Node) remove(b []byte) []byte {
	d := dec{b: b}
	name, force := d.str(), d.u8()
	if d.bad {
		return n.refuse(CodeBadRequest, "remove: short request")
	}
	v, refused := n.volume(name)
	if v == nil {
		return refused
	}
	v.mu.Lock()
	held := v.holder != 0 && time.Now().Before(v.expires)
	v.mu.Unlock()
	if held && force == 0 {
		return n.refuse(CodeLeaseHeld, "volume "+name+" is open for writing")
	}
	if err := n.st.remove(name); err != nil {
		return n.refuseErr(err)
	}
	n.log.Info("stor: volume removed", "name", name)
	return []byte{byte(CodeOK)}
}

// syncCatalog merges the catalogs of the live nodes into this node's,
// after a start or a cut: it learns of the volumes created meanwhile, and
// deletes its copy of a volume removed meanwhile.
func (n *Node) syncCatalog(ctx context.Context) {
	ms, err := n.ep.ServiceMembers(ctx, n.cfg.Switch, n.cfg.Service, n.cfg.Fabric)
	if err != nil {
		return
	}
	for _, m := range ms {
		if m.ID == n.st.id {
			continue
		}
		body, err := n.call(ctx, m.ID, "catalog", []byte{opCatList})
		var es []CatalogEntry
		if err != nil || json.Unmarshal(body, &es) != nil {
			continue
		}
		for _, e := range es {
			if e.Desc.Check() != nil {
				continue
			}
			n.st.mu.Lock()
			v := n.st.vols[e.Desc.Name]
			held := v != nil && v.meta.Desc.Created == e.Desc.Created
			if v != nil && !held && e.Removed == 0 {
				n.st.mu.Unlock()
				continue // another incarnation of the name: this node's stays
			}
			_, _ = n.st.cat.add(e, time.Now())
			n.st.mu.Unlock()
			if held && e.Removed != 0 {
				if err := n.st.remove(e.Desc.Name); err == nil {
					n.log.Info("stor: volume removed while this node was away: copy deleted", "volume", e.Desc.Name, "node", n.st.id)
				}
			}
		}
	}
}

// catalogAdd records a volume, or its removal, in the node's catalog.
func (n *Node) catalogAdd(b []byte) []byte {
	var e CatalogEntry
	if err := json.Unmarshal(b, &e); err != nil {
		return n.refuse(CodeBadRequest, "catalog: "+err.Error())
	}
	if err := e.Desc.Check(); err != nil {
		return n.refuseErr(err)
	}
	n.st.mu.Lock()
	defer n.st.mu.Unlock()
	if v := n.st.vols[e.Desc.Name]; v != nil && e.Removed == 0 && v.meta.Desc.Created != e.Desc.Created {
		return n.refuse(CodeExists, fmt.Sprintf("%s: this node holds another volume of that name", e.Desc.Name))
	}
	if _, err := n.st.cat.add(e, time.Now()); err != nil {
		return n.refuseErr(err)
	}
	return []byte{byte(CodeOK)}
}

func (n *Node) listVols() []byte {
	var ds []Descriptor
	for _, v := range n.st.list() {
		v.mu.Lock()
		ds = append(ds, v.meta.Desc)
		v.mu.Unlock()
	}
	return okJSON(ds)
}

// NodeVolume is one node's state of one volume.
type NodeVolume struct {
	Node     int               `json:"node"`
	Desc     Descriptor        `json:"desc"`
	Epoch    uint64            `json:"epoch"`
	Ready    bool              `json:"ready"`              // serves reads
	Stale    int               `json:"stale"`              // extents awaiting a copy
	Leased   bool              `json:"leased"`             // a writer holds the lease
	LeaseMs  int64             `json:"lease_ms,omitempty"` // its time left
	Missing  map[uint16]uint64 `json:"missing,omitempty"`  // replicas that missed writes (id → first version missed)
	Held     uint64            `json:"held"`               // bytes of the volume on this node
	MaxVer   uint64            `json:"max_version"`
	Writers  int               `json:"write_groups"` // write groups this node is in
	Writes   uint64            `json:"writes"`       // writes applied since the node started
	Syncing  bool              `json:"syncing"`
	HolderID uint64            `json:"-"`
	// Gen and Members: the data generation the copy was last written in
	// and that generation's nodes; Outdated: the copy is known to have
	// missed writes. State says why a copy that is not Ready serves no
	// reads (ready, verifying, resyncing, waiting, writer, outdated), and
	// WaitFor which nodes it waits to hear from.
	Gen      uint64   `json:"gen"`
	Members  []uint16 `json:"members"`
	Outdated bool     `json:"outdated,omitempty"`
	State    string   `json:"state"`
	WaitFor  []uint16 `json:"wait_for,omitempty"`
	// Grouped: the node is in a write group of the lease holder for every
	// replica set it belongs to. WriterGen: the generation the lease
	// holder writes in (0: it has not started writing).
	Grouped   bool   `json:"grouped,omitempty"`
	WriterGen uint64 `json:"writer_gen,omitempty"`
}

func (n *Node) stat(b []byte) []byte {
	d := dec{b: b}
	name := d.str()
	v, refused := n.volume(name)
	if v == nil {
		return refused
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	nv := NodeVolume{Node: int(n.st.id), Desc: v.meta.Desc, Epoch: v.meta.Epoch, Ready: v.ready, Stale: len(v.stale),
		Missing: v.meta.Missing, Held: v.meta.Desc.HeldBytes(n.st.id), MaxVer: slices.Max(v.versions), Writers: len(v.wgroups),
		Writes: v.appliedW, Syncing: v.syncing, Gen: v.meta.Gen, Members: v.meta.members(), Outdated: v.meta.Outdated,
		State: v.state, WaitFor: v.waitFor, Grouped: v.grouped(n.cfg.Service, n.st.id)}
	if left := time.Until(v.expires); v.holder != 0 && left > 0 {
		nv.Leased, nv.LeaseMs, nv.WriterGen = true, left.Milliseconds(), v.holderGen
	}
	return okJSON(nv)
}

// leaseReq asks for (or renews, or with Release gives back) a volume's
// write lease for TTL; Epoch, when above the node's, becomes its epoch.
type leaseReq struct {
	Name    string `json:"name"`
	Holder  uint64 `json:"holder"`
	TTLMs   int64  `json:"ttl_ms"`
	Epoch   uint64 `json:"epoch"`
	Release bool   `json:"release,omitempty"`
	// Gen and Members: the writer's data generation and its nodes. A node
	// left out of a later generation than its own has missed writes.
	Gen     uint64   `json:"gen,omitempty"`
	Members []uint16 `json:"members,omitempty"`
}

// leaseResp is the node's answer: its epoch, who holds the lease, and
// the state of its copy (see NodeVolume).
type leaseResp struct {
	Epoch    uint64 `json:"epoch"`
	Holder   uint64 `json:"holder"`
	LeaseMs  int64  `json:"lease_ms"`
	Gen      uint64 `json:"gen"`
	Ready    bool   `json:"ready"`
	Outdated bool   `json:"outdated,omitempty"`
	Grouped  bool   `json:"grouped,omitempty"`
}

// MaxLease bounds a lease's TTL.
const MaxLease = 10 * time.Minute

func (n *Node) lease(b []byte) []byte {
	var r leaseReq
	if err := json.Unmarshal(b, &r); err != nil || r.Holder == 0 || r.TTLMs <= 0 || time.Duration(r.TTLMs)*time.Millisecond > MaxLease {
		return n.refuse(CodeBadRequest, "lease: want a holder and a TTL up to "+MaxLease.String())
	}
	v, refused := n.volume(r.Name)
	if v == nil {
		return refused
	}
	v.mu.Lock()
	now := time.Now()
	for {
		live := v.holder != 0 && now.Before(v.expires)
		if live && v.holder != r.Holder {
			resp := leaseResp{Epoch: v.meta.Epoch, Holder: v.holder, LeaseMs: v.expires.Sub(now).Milliseconds()}
			v.mu.Unlock()
			out := okJSON(resp)
			out[0] = byte(CodeLeaseHeld)
			return out
		}
		if r.Release || v.holder == r.Holder || len(v.wgroups) == 0 {
			break
		}
		// A new writer: the writes of the old one that reached this
		// node are applied before its groups end.
		v.drainLocked()
		now = time.Now()
	}
	var stop []*writeGroup
	if r.Release {
		if v.holder == r.Holder {
			v.holder, v.expires = 0, time.Time{}
			stop = v.takeGroups()
		}
	} else {
		if v.holder != r.Holder {
			// A new writer: the old one's groups end, so its writes no
			// longer reach this node.
			stop = v.takeGroups()
			v.holder, v.holderGen, v.direct = r.Holder, 0, false
		}
		v.expires = now.Add(time.Duration(r.TTLMs) * time.Millisecond)
		if !v.direct {
			// (A holder writing through a gateway renews without a
			// generation: the gateway records them.)
			v.holderGen = r.Gen
		}
		if r.Gen > v.meta.Gen && !slices.Contains(r.Members, n.st.id) && !v.meta.Outdated {
			// The writer went on without this node.
			n.log.Warn("stor: copy outdated: the writer writes without this node", "volume", r.Name, "node", n.st.id,
				"generation", v.meta.Gen, "writer_generation", r.Gen)
			v.meta.Outdated, v.ready = true, false
			v.setState(stateOutdated, nil)
			v.startTrack(true)
			stop = append(stop, v.takeGroups()...)
			if err := v.saveMeta(); err != nil {
				v.mu.Unlock()
				return n.refuseErr(ioErr(err))
			}
		}
		if r.Epoch > v.meta.Epoch {
			v.meta.Epoch = r.Epoch
			if err := v.saveMeta(); err != nil {
				v.mu.Unlock()
				return n.refuseErr(ioErr(err))
			}
		}
	}
	resp := leaseResp{Epoch: v.meta.Epoch, Holder: v.holder, Gen: v.meta.Gen, Ready: v.ready, Outdated: v.meta.Outdated,
		Grouped: len(stop) == 0 && v.grouped(n.cfg.Service, n.st.id)}
	v.mu.Unlock()
	for _, g := range stop {
		g.stop()
	}
	return okJSON(resp)
}

// joinReq asks the node to join the writer's multicast group for one
// replica set of a volume.
type joinReq struct {
	Name   string `json:"name"`
	Holder uint64 `json:"holder"`
	Epoch  uint64 `json:"epoch"`
	Set    string `json:"set"` // the set's service name
	Job    string `json:"job"`
	Size   int    `json:"size"`
	Rank   int    `json:"rank"`
}

func (n *Node) join(b []byte) []byte {
	var r joinReq
	if err := json.Unmarshal(b, &r); err != nil || r.Size < 2 || r.Rank < 1 || r.Rank >= r.Size || r.Job == "" {
		return n.refuse(CodeBadRequest, "join: want a job, a size of 2 or more and a rank from 1")
	}
	v, refused := n.leasedVolume(r.Name, r.Holder)
	if v == nil {
		return refused
	}
	if r.Epoch < v.meta.Epoch {
		v.mu.Unlock()
		return n.refuse(CodeStaleEpoch, fmt.Sprintf("join: epoch %d, the node's is %d", r.Epoch, v.meta.Epoch))
	}
	if r.Epoch > v.meta.Epoch {
		v.meta.Epoch = r.Epoch
		if err := v.saveMeta(); err != nil {
			v.mu.Unlock()
			return n.refuseErr(ioErr(err))
		}
	}
	if v.wgroups == nil {
		v.wgroups = map[string]*writeGroup{}
	}
	old := v.wgroups[r.Set]
	if old != nil {
		old.draining = true // applies what reached it before the new group starts
	}
	ctx, cancel := context.WithCancel(n.ctx)
	g := &writeGroup{cancel: cancel, done: make(chan struct{}), joined: make(chan struct{})}
	v.wgroups[r.Set] = g
	if v.live == nil {
		v.live = map[*writeGroup]struct{}{}
	}
	v.live[g] = struct{}{}
	v.mu.Unlock()
	if old != nil {
		old.stop()
	}
	go n.serveGroup(ctx, v, r, g)
	return []byte{byte(CodeOK)}
}

// grouped reports whether node is in a live write group for every replica
// set of v it belongs to (for a holder writing through a gateway: in the
// generation it writes in). Caller holds v.mu.
func (v *vol) grouped(service string, node uint16) bool {
	if v.holder == 0 || !time.Now().Before(v.expires) {
		return false
	}
	if v.direct {
		return v.holderGen == v.meta.Gen && slices.Contains(v.meta.members(), node)
	}
	for _, s := range v.meta.Desc.Sets() {
		if slices.Contains(s, node) && v.wgroups[setName(service, s)] == nil {
			return false
		}
	}
	return true
}

// genReq records the lease holder's new data generation: Members are the
// nodes it writes to from now on; Outdated tells this node that its copy
// is not current (it copies what it lacks from a current replica before
// it serves reads).
type genReq struct {
	Name     string   `json:"name"`
	Holder   uint64   `json:"holder"`
	Gen      uint64   `json:"gen"`
	Members  []uint16 `json:"members"`
	Outdated bool     `json:"outdated,omitempty"`
	// Direct: the holder sends each write to each member itself (through
	// a gateway), in no write group; a member of its generation gets its
	// writes.
	Direct bool `json:"direct,omitempty"`
}

func (n *Node) setGen(b []byte) []byte {
	var r genReq
	if err := json.Unmarshal(b, &r); err != nil || r.Gen == 0 || !slices.IsSorted(r.Members) || !slices.Contains(r.Members, n.st.id) {
		return n.refuse(CodeBadRequest, "generation: want a generation above 0 and sorted members that include this node")
	}
	v, refused := n.leasedVolume(r.Name, r.Holder)
	if v == nil {
		return refused
	}
	if r.Gen > v.meta.Gen {
		// The writer forms every group anew for a new generation, once
		// every write of the old one ended: those it saw complete are
		// applied here before this node takes the generation (as one
		// of its current copies, it must hold them); the old groups'
		// late deliveries, of writes that failed, are not.
		v.drainLocked()
		if !v.leasedTo(r.Holder) {
			v.mu.Unlock()
			return n.refuse(CodeLeaseHeld, "the requester does not hold the volume's write lease")
		}
	}
	var stop []*writeGroup
	defer func() {
		v.mu.Unlock()
		for _, g := range stop {
			g.stop()
		}
	}()
	if r.Gen < v.meta.Gen {
		return n.refuse(CodeStaleEpoch, fmt.Sprintf("generation %d, the node's is %d", r.Gen, v.meta.Gen))
	}
	for _, m := range r.Members {
		if !slices.Contains(v.meta.Desc.Nodes, m) {
			return n.refuse(CodeBadRequest, fmt.Sprintf("generation: node %d holds none of volume %s", m, r.Name))
		}
	}
	if r.Gen == v.meta.Gen && slices.Equal(r.Members, v.meta.Members) && (v.meta.Outdated || !r.Outdated) {
		return []byte{byte(CodeOK)}
	}
	if r.Outdated && !v.meta.Outdated {
		n.log.Warn("stor: copy outdated: the writer found it behind", "volume", r.Name, "node", n.st.id, "generation", v.meta.Gen)
	}
	if r.Gen > v.meta.Gen {
		stop = v.takeGroups() // joined while the old ones drained
	}
	v.meta.Gen, v.meta.Members = r.Gen, slices.Clone(r.Members)
	v.meta.Outdated = v.meta.Outdated || r.Outdated
	v.holderGen, v.direct = r.Gen, r.Direct
	if !v.ready || v.meta.Outdated {
		v.startTrack(true) // before the new generation's first write to it
	}
	for _, m := range r.Members {
		// In the writer's groups again (a copy that is behind says so
		// itself, as outdated).
		delete(v.meta.Missing, m)
	}
	if len(v.meta.Missing) == 0 {
		v.meta.Missing = nil
	}
	if v.meta.Outdated && v.ready {
		v.ready = false
		v.setState(stateOutdated, nil)
	}
	if err := v.saveMeta(); err != nil {
		return n.refuseErr(ioErr(err))
	}
	return []byte{byte(CodeOK)}
}

// forceReq declares this node's copy of a volume current, whatever it
// missed: it takes generation Gen (above every one the operator's client
// saw) with itself as the only member, so that every other copy is
// outdated against it.
type forceReq struct {
	Name string `json:"name"`
	Gen  uint64 `json:"gen"`
}

func (n *Node) force(b []byte) []byte {
	var r forceReq
	if err := json.Unmarshal(b, &r); err != nil || r.Gen == 0 {
		return n.refuse(CodeBadRequest, "force: want a volume and a generation")
	}
	v, refused := n.volume(r.Name)
	if v == nil {
		return refused
	}
	v.mu.Lock()
	if v.holder != 0 && time.Now().Before(v.expires) {
		v.mu.Unlock()
		return n.refuse(CodeLeaseHeld, "volume "+r.Name+" is open for writing")
	}
	if r.Gen <= v.meta.Gen {
		v.mu.Unlock()
		return n.refuse(CodeStaleEpoch, fmt.Sprintf("force: generation %d, the node's is %d", r.Gen, v.meta.Gen))
	}
	n.log.Warn("stor: copy declared current by an operator", "volume", r.Name, "node", n.st.id,
		"generation", v.meta.Gen, "new_generation", r.Gen, "was_outdated", v.meta.Outdated)
	v.meta.Gen, v.meta.Members, v.meta.Outdated, v.meta.Missing = r.Gen, []uint16{n.st.id}, false, nil
	if err := v.saveMeta(); err != nil {
		v.mu.Unlock()
		return n.refuseErr(ioErr(err))
	}
	for e := range v.stale {
		// An interrupted copy: what the node holds of it is what it has.
		if err := v.copied(e, 0, false); err != nil {
			v.mu.Unlock()
			return n.refuseErr(err)
		}
	}
	v.ready = true
	v.setState(stateReady, nil)
	v.stopTrack()
	v.mu.Unlock()
	return []byte{byte(CodeOK)}
}

// enrollReq: node Node copied what its copy lacked from this node's copy
// of generation Gen, and counts itself a member of that generation from
// now on (a writer may go on with it, without the other members).
type enrollReq struct {
	Name string `json:"name"`
	Gen  uint64 `json:"gen"`
	Node uint16 `json:"node"`
}

// enroll lists a copy that caught up from this one among the members of
// this copy's generation, durably, and answers the members: a member
// that later checks whether it is current (resync) hears from every node
// the members' lists name, so it cannot miss a generation a writer
// started with the new member and without it. Refused (STALE_EPOCH)
// unless this copy is current in generation Gen.
func (n *Node) enroll(b []byte) []byte {
	var r enrollReq
	if err := json.Unmarshal(b, &r); err != nil || r.Gen == 0 {
		return n.refuse(CodeBadRequest, "enroll: want a volume, a generation and a node")
	}
	v, refused := n.volume(r.Name)
	if v == nil {
		return refused
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if !slices.Contains(v.meta.Desc.Nodes, r.Node) {
		return n.refuse(CodeBadRequest, fmt.Sprintf("enroll: node %d holds none of volume %s", r.Node, r.Name))
	}
	if v.meta.Outdated || v.meta.Gen != r.Gen {
		return n.refuse(CodeStaleEpoch, fmt.Sprintf("enroll: generation %d, this copy's is %d (outdated %v)", r.Gen, v.meta.Gen, v.meta.Outdated))
	}
	if ms := v.meta.members(); !slices.Contains(ms, r.Node) {
		v.meta.Members = addNode(ms, r.Node)
		if err := v.saveMeta(); err != nil {
			return n.refuseErr(ioErr(err))
		}
	}
	return okJSON(v.meta.members())
}

// writeGroup is the node's membership in a writer's multicast group.
type writeGroup struct {
	cancel context.CancelFunc
	done   chan struct{}
	joined chan struct{} // closed once the group formed (or failed to)
	// draining (under v.mu): the group was taken for a new generation,
	// group or writer; before it stops it applies the writes that
	// reached this node (see drainGroup).
	draining bool
	// grp (under v.mu) is the group once joined; applied the id of the
	// latest of its messages applied (see Group.Arrived).
	grp     *endpoint.Group
	applied atomic.Uint64
}

// stopped reports whether the group's goroutine has returned.
func (g *writeGroup) stopped() bool {
	select {
	case <-g.done:
		return true
	default:
		return false
	}
}

func (g *writeGroup) stop() {
	g.cancel()
	<-g.done
}

// groups returns v's write groups. Caller holds v.mu.
func (v *vol) groups() []*writeGroup {
	out := make([]*writeGroup, 0, len(v.wgroups))
	for _, g := range v.wgroups {
		out = append(out, g)
	}
	return out
}

// takeGroups forgets v's write groups and returns them (to stop outside
// v.mu). Caller holds v.mu.
func (v *vol) takeGroups() []*writeGroup {
	out := v.groups()
	v.wgroups = nil
	return out
}

// drainLocked takes v's write groups, lets each apply the writes that
// reached this node before it stops, and waits for them: a write the
// writer saw complete had reached every member, but may still wait in
// the group to be applied. Caller holds v.mu, which is released while
// the groups drain and held again on return.
func (v *vol) drainLocked() {
	gs := v.takeGroups()
	if len(gs) == 0 {
		return
	}
	for _, g := range gs {
		g.draining = true
	}
	v.mu.Unlock()
	for _, g := range gs {
		g.stop()
	}
	v.mu.Lock()
}

// serveGroup joins the writer's group and applies its writes and flushes
// in order until the writer leaves, the lease passes to another writer or
// the node closes.
func (n *Node) serveGroup(ctx context.Context, v *vol, r joinReq, g *writeGroup) {
	defer close(g.done)
	defer func() {
		v.mu.Lock()
		delete(v.live, g)
		v.mu.Unlock()
	}()
	jctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	grp, err := n.ep.JoinJob(jctx, n.cfg.Switch, r.Job, r.Size, r.Rank, n.cfg.Fabric)
	cancel()
	if err == nil {
		v.mu.Lock()
		g.grp = grp
		v.mu.Unlock()
	}
	close(g.joined)
	if err != nil {
		n.log.Warn("stor: join write group", "volume", r.Name, "job", r.Job, "err", err)
		v.mu.Lock()
		if v.wgroups[r.Set] == g {
			delete(v.wgroups, r.Set)
		}
		v.mu.Unlock()
		return
	}
	defer func() {
		lctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = grp.Leave(lctx)
		cancel()
	}()
	n.maybeResync(v)
	buf := make([]byte, writeHdr+MaxIO)
	var sum [8 * flushSlots]byte
	for {
		m, err := grp.RecvAtMost(ctx, 0, buf)
		if err != nil {
			if ctx.Err() == nil {
				n.log.Debug("stor: write group ended", "volume", r.Name, "job", r.Job, "err", err)
			}
			v.mu.Lock()
			if v.wgroups[r.Set] == g {
				delete(v.wgroups, r.Set)
			}
			drain := g.draining
			v.mu.Unlock()
			if drain {
				n.drainGroup(v, r, g, grp, buf)
			}
			return
		}
		msg := buf[:m]
		_, id := grp.Arrived(0)
		switch msg[0] {
		case opWrite:
			n.applyWrite(v, r, g, msg)
			g.applied.Store(id)
		case opFlush:
			v.mu.Lock()
			code := v.werr
			v.werr = CodeOK
			if !v.removed {
				if err := v.sync(); err != nil && code == CodeOK {
					code = codeOf(err)
				}
			}
			v.mu.Unlock()
			g.applied.Store(id)
			n.mu.Lock()
			n.stats.Flushes++
			n.mu.Unlock()
			// Slot 0 counts the replicas, slot code those that failed so.
			clear(sum[:])
			binary.LittleEndian.PutUint64(sum[:], 1)
			if code != CodeOK && int(code) < flushSlots {
				binary.LittleEndian.PutUint64(sum[8*int(code):], 1)
			}
			var res [8 * flushSlots]byte
			if err := grp.Allreduce(ctx, sum[:], res[:], wire.DtypeI64, wire.AluAdd, endpoint.ReduceOptions{}); err != nil {
				n.log.Debug("stor: flush", "volume", r.Name, "err", err)
			}
		}
	}
}

// applyWrite applies one write message of the writer's group g.
func (n *Node) applyWrite(v *vol, r joinReq, g *writeGroup, msg []byte) {
	if len(msg) < writeHdr {
		return
	}
	ver, off := binary.BigEndian.Uint64(msg[1:]), binary.BigEndian.Uint64(msg[9:])
	data := msg[writeHdr:]
	if n.applyDelay > 0 {
		time.Sleep(n.applyDelay)
	}
	v.mu.Lock()
	if v.wgroups[r.Set] != g && !g.draining {
		// A group the writer formed anew since, or of a writer that
		// left this node out: what it still delivers may be older than
		// what the new one did.
		v.mu.Unlock()
		return
	}
	e, err := v.check(n.st.id, off, len(data))
	if err == nil && !v.removed {
		err = v.apply(e, ver, off, data)
	}
	if n.trace {
		n.log.Log(n.ctx, LevelTrace, "stor: write", "node", n.st.id, "off", off, "len", len(data), "version", ver,
			"generation", v.meta.Gen, "state", v.state, "set", r.Set, "job", r.Job, "draining", g.draining)
	}
	if err != nil && v.werr == CodeOK {
		v.werr = codeOf(err)
		n.log.Warn("stor: write", "volume", r.Name, "off", off, "len", len(data), "err", err)
	}
	v.mu.Unlock()
	n.mu.Lock()
	n.stats.Writes++
	n.stats.WriteBytes += uint64(len(data))
	n.mu.Unlock()
}

// drainGroup applies the writes that reached this node in group grp and
// still wait there, once the group was taken for a new generation, group
// or writer (drainLocked). A write multicast completes at the writer when
// every member's endpoint has it, not when the member applied it; the
// writer starts the next generation only after its writes ended, and
// counts the members current in it: they must hold every write it saw
// complete. A write not here whole did not complete: it is not waited
// for. Flushes are skipped: one that completed had this node's answer,
// one that did not is sent again.
func (n *Node) drainGroup(v *vol, r joinReq, g *writeGroup, grp *endpoint.Group, buf []byte) {
	for {
		m, ok, err := grp.TryRecvAtMost(0, buf)
		if err != nil || !ok {
			return
		}
		_, id := grp.Arrived(0)
		if m > 0 && buf[0] == opWrite {
			n.applyWrite(v, r, g, buf[:m])
		}
		g.applied.Store(id)
	}
}

// joinedGroups returns v's live write groups that formed.
func (v *vol) joinedGroups() []*writeGroup {
	v.mu.Lock()
	defer v.mu.Unlock()
	var gs []*writeGroup
	for g := range v.live {
		if g.grp != nil {
			gs = append(gs, g)
		}
	}
	return gs
}

// applied waits, for at most readWait, until this node applied every
// write of groups gs that had reached it whole when it was called: a
// writer sees a write complete once every replica's endpoint holds it,
// before the replica applied it, and a read another client starts after
// that must see it. It reports false when the time ran out.
//
// (A write completes without a member only once the switch counted it
// dead, and the switch counts every membership of an address dead at
// once, since any datagram from it is a sign of life for all: a node left
// out of a write that way is out of its read services too, and serves
// reads again only after it registered anew and compared its copy with
// the others'; see supervise.)
func (n *Node) applied(gs []*writeGroup) bool {
	deadline := time.Now().Add(readWait)
	for _, g := range gs {
		whole, _ := g.grp.Arrived(0)
		for g.applied.Load() < whole && !g.stopped() {
			if time.Now().After(deadline) {
				return false
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	return true
}

func (n *Node) read(b []byte) []byte {
	r, ok := parseRead(b)
	if !ok {
		return n.refuse(CodeBadRequest, "read: malformed")
	}
	v, refused := n.volume(r.Name)
	if v == nil {
		return refused
	}
	resync := r.MinVer&resyncRead != 0
	minVer := r.MinVer &^ resyncRead
	if !n.applied(v.joinedGroups()) {
		return n.refuse(CodeNotReady, fmt.Sprintf("volume %s: node %d has not applied the writes that reached it yet", r.Name, n.st.id))
	}
	// A write the writer saw complete may still be on its way from this
	// node's transport to the disk: wait for it a little.
	for wait := time.Duration(0); ; wait += time.Millisecond {
		v.mu.Lock()
		e, err := v.check(n.st.id, r.Off, int(r.Len))
		if err != nil {
			v.mu.Unlock()
			return n.refuseErr(err)
		}
		switch {
		case v.removed:
			v.mu.Unlock()
			return n.refuse(CodeNoVolume, r.Name)
		case v.stale[e] || !v.ready && (!resync || v.meta.Outdated):
			v.mu.Unlock()
			return n.refuse(CodeNotReady, fmt.Sprintf("volume %s: node %d is resyncing", r.Name, n.st.id))
		case v.versions[e] < minVer:
			v.mu.Unlock()
			if wait >= readWait {
				return n.refuse(CodeNotReady, fmt.Sprintf("extent %d: node %d has version %#x, want %#x", e, n.st.id, v.versions[e], minVer))
			}
			time.Sleep(time.Millisecond)
			continue
		}
		if n.trace {
			n.log.Log(n.ctx, LevelTrace, "stor: read", "node", n.st.id, "off", r.Off, "len", r.Len, "version", v.versions[e],
				"generation", v.meta.Gen, "state", v.state, "resync", resync)
		}
		out := make([]byte, 9+int(r.Len))
		out[0] = byte(CodeOK)
		binary.BigEndian.PutUint64(out[1:], v.versions[e])
		_, err = readAt(v.data, out[9:], int64(r.Off))
		v.mu.Unlock()
		if err != nil {
			return n.refuseErr(ioErr(err))
		}
		n.mu.Lock()
		n.stats.Reads++
		n.stats.ReadBytes += uint64(r.Len)
		n.mu.Unlock()
		return out
	}
}

// readWait bounds how long a read waits for a write it asks for.
const readWait = 200 * time.Millisecond

// resyncRead marks a read another replica makes to copy an extent: it may
// read a node that is itself resyncing, from extents that are not stale.
const resyncRead = 1 << 63

func (n *Node) versions(b []byte) []byte {
	d := dec{b: b}
	name := d.str()
	v, refused := n.volume(name)
	if v == nil {
		return refused
	}
	if !n.applied(v.joinedGroups()) {
		return n.refuse(CodeNotReady, fmt.Sprintf("volume %s: node %d has not applied the writes that reached it yet", name, n.st.id))
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]byte, 1, 1+8*len(v.versions))
	for e, ver := range v.versions {
		if v.stale[e] {
			ver = 0
		}
		out = binary.BigEndian.AppendUint64(out, ver)
	}
	return out
}

// one serves the controller-forwarding mode's write of one replica's copy,
// or its flush: the writer (Holder) must hold the lease.
func (n *Node) one(b []byte) []byte {
	r, ok := parseOne(b)
	if !ok {
		return n.refuse(CodeBadRequest, "malformed")
	}
	v, refused := n.leasedVolume(r.Name, r.Holder)
	if v == nil {
		return refused
	}
	var err error
	if b[0] == opWriteOne {
		var e int
		if e, err = v.check(n.st.id, r.Off, len(r.Data)); err == nil && !v.removed {
			err = v.apply(e, r.Ver, r.Off, r.Data)
		}
	} else if !v.removed {
		err = v.sync()
	}
	v.mu.Unlock()
	if err != nil {
		return n.refuseErr(err)
	}
	n.mu.Lock()
	if b[0] == opWriteOne {
		n.stats.Writes++
		n.stats.WriteBytes += uint64(len(r.Data))
	} else {
		n.stats.Flushes++
	}
	n.mu.Unlock()
	return []byte{byte(CodeOK)}
}

// missingReq records that Node missed writes to a volume from version
// Since on (Since 0: it caught up).
type missingReq struct {
	Name  string `json:"name"`
	Node  uint16 `json:"node"`
	Since uint64 `json:"since"`
}

func (n *Node) missing(b []byte) []byte {
	var r missingReq
	if err := json.Unmarshal(b, &r); err != nil {
		return n.refuse(CodeBadRequest, "missing: "+err.Error())
	}
	v, refused := n.volume(r.Name)
	if v == nil {
		return refused
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	_, had := v.meta.Missing[r.Node]
	switch {
	case r.Since == 0 && had:
		delete(v.meta.Missing, r.Node)
		if len(v.meta.Missing) == 0 {
			v.meta.Missing = nil
		}
	case r.Since != 0 && !had:
		if v.meta.Missing == nil {
			v.meta.Missing = map[uint16]uint64{}
		}
		v.meta.Missing[r.Node] = r.Since
	default:
		return []byte{byte(CodeOK)}
	}
	if err := v.saveMeta(); err != nil {
		return n.refuseErr(ioErr(err))
	}
	return []byte{byte(CodeOK)}
}

// nodeCallTimeout bounds one try of a request to one node, and
// nodeCopyTimeout one read (up to MaxIO bytes).
const (
	nodeCallTimeout = 3 * time.Second
	nodeCopyTimeout = 10 * time.Second
)

// call sends req to node id's own service and returns the reply's body,
// or the node's refusal as a *NodeError.
func (n *Node) call(ctx context.Context, id uint16, what string, req []byte) ([]byte, error) {
	return callNode(ctx, n.ep, n.cfg.Switch, n.cfg.Service, n.cfg.Fabric, id, what, req)
}

func callNode(ctx context.Context, ep *endpoint.Endpoint, sw, service string, opts endpoint.FabricOptions, id uint16, what string, req []byte) ([]byte, error) {
	name := nodeName(service, id)
	// One node that does not answer (or a switch that keeps answering
	// BUSY) holds its caller up for at most this long a try.
	limit := nodeCallTimeout
	if req[0] == opRead {
		limit = nodeCopyTimeout
	}
	for try := 0; ; try++ {
		actx, cancel := context.WithTimeout(ctx, limit)
		resp, err := retryBusy(actx, false, func() ([]byte, error) { return ep.Anycast(actx, sw, name, uint64(id)+1, req, opts) })
		cancel()
		var body []byte
		if err == nil {
			body, err = replyBody(int(id), what, resp)
		} else {
			err = fmt.Errorf("stor: node %d: %s: %w", id, what, err)
		}
		if try == 0 && ctx.Err() == nil && (staleService(err) || silentService(err)) {
			// The switch restarted: the cached group id may name no
			// service (its requests go unanswered), or another node's.
			// Look the service up again.
			if _, lerr := ep.ServiceMembers(ctx, sw, name, opts); lerr == nil {
				continue
			}
		}
		return body, err
	}
}

// silentService reports whether err says that nobody answered a request
// to a service: after a switch restart, a cached group id may name a
// group that is no service any more, whose requests go unanswered.
func silentService(err error) bool {
	return errors.Is(err, endpoint.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, transport.ErrPeerDead)
}

// staleService reports whether err says that a cached service group id no
// longer names the service (the switch restarted and forgot it, or gave
// its id to another).
func staleService(err error) bool {
	return errors.Is(err, wire.StatusNotMember) || errors.Is(err, ErrWrongNode)
}

// replyBody splits a reply into its code and body.
func replyBody(node int, what string, resp []byte) ([]byte, error) {
	if len(resp) == 0 {
		return nil, &NodeError{Node: node, Op: what, Code: CodeBadRequest, Msg: "empty reply"}
	}
	if c := Code(resp[0]); c != CodeOK {
		msg := string(resp[1:])
		if c == CodeLeaseHeld && len(msg) > 0 && msg[0] == '{' {
			msg = "" // a lease answer: the caller decodes it
		}
		return resp[1:], &NodeError{Node: node, Op: what, Code: c, Msg: msg}
	}
	return resp[1:], nil
}

// maybeResync starts a resync of v unless one runs, v is ready or removed.
func (n *Node) maybeResync(v *vol) {
	v.mu.Lock()
	if v.ready || v.syncing || v.removed {
		v.mu.Unlock()
		return
	}
	grouped := len(v.wgroups) > 0 || v.direct && v.grouped(n.cfg.Service, n.st.id)
	v.syncing = true
	v.mu.Unlock()
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		err := n.resync(v, grouped)
		v.mu.Lock()
		v.syncing = false
		v.mu.Unlock()
		if err != nil && n.ctx.Err() == nil {
			n.log.Info("stor: resync pending", "volume", v.meta.Desc.Name, "node", n.st.id, "why", err)
		}
	}()
}

// errWriterActive: the resync waits for the writer to take this node into
// its groups.
var errWriterActive = errors.New("a writer holds the lease and has not taken this node back yet")

// setState records why v does not serve reads. Caller holds v.mu.
func (v *vol) setState(state string, waitFor []uint16) {
	v.state, v.waitFor = state, waitFor
}

// resync decides whether this node's copy of v is current, and makes it
// so, before it serves reads again (after a start, or after the switch
// stopped listing it):
//
//   - It asks every other node of the volume for its state. A node holding
//     a later generation without this one proves that this copy missed
//     writes: it is outdated (durably) and copies every extent it holds
//     from replicas that are current (ready). Before it counts itself a
//     member of their generation it joins it on record at the source
//     (ENROLL), which lists it among the generation's members.
//   - A copy not known to be outdated is current once every other node of
//     its generation, and every node the lists of the members that
//     answered name, has answered (a writer that went on without this
//     node recorded a later generation on each node it kept, which may be
//     copies that caught up after this generation began): then it copies
//     the extents that one of them holds in a newer version (a write that
//     reached some replicas and not others when the writer or a node
//     stopped). Until they have answered it waits, serving nothing.
//   - While a writer holds the lease and has not taken this node into its
//     groups, its writes would pass the node by: it waits for the writer.
func (n *Node) resync(v *vol, grouped bool) error {
	ctx, cancel := context.WithTimeout(n.ctx, time.Minute)
	defer cancel()
	v.mu.Lock()
	d := v.meta.Desc
	gen, members, outdated := v.meta.Gen, slices.Clone(v.meta.members()), v.meta.Outdated
	if !outdated {
		v.setState(stateVerifying, nil)
	}
	// Writes applied here since this node joined the writer's groups are
	// kept over the copies; with no group (now, not when this resync was
	// decided on: it may have joined since), none is of the writer's
	// latest generation.
	v.startTrack(len(v.wgroups) == 0 && !(v.direct && v.grouped(n.cfg.Service, n.st.id)))
	v.mu.Unlock()
	type peer struct {
		nv NodeVolume
		vs []uint64
	}
	peers := map[uint16]*peer{}
	leased := false
	var maxGen uint64     // the latest generation of a node the writer leases
	var newer *NodeVolume // a node of a later generation without this one
	for _, p := range d.Nodes {
		if p == n.st.id {
			continue
		}
		var e enc
		e.u8(opStat)
		e.str(d.Name)
		body, err := n.call(ctx, p, "stat", e.b)
		if err != nil {
			continue // dead or without the volume: unknown
		}
		var nv NodeVolume
		if json.Unmarshal(body, &nv) != nil || nv.Desc.Created != d.Created {
			continue
		}
		if nv.Leased && nv.WriterGen > 0 {
			// A writer writes (one that holds the lease but has not
			// started a generation waits for copies to be current).
			leased = true
			maxGen = max(maxGen, nv.Gen)
		}
		if nv.Gen > gen && !slices.Contains(nv.Members, n.st.id) && (newer == nil || nv.Gen > newer.Gen) {
			newer = &nv
		}
		var ve enc
		ve.u8(opVersions)
		ve.str(d.Name)
		vb, err := n.call(ctx, p, "versions", ve.b)
		if err != nil || len(vb) != 8*d.Extents() {
			continue
		}
		vs := make([]uint64, d.Extents())
		for i := range vs {
			vs[i] = binary.BigEndian.Uint64(vb[8*i:])
		}
		peers[p] = &peer{nv: nv, vs: vs}
	}
	if newer != nil && !outdated {
		outdated = true
		n.log.Warn("stor: copy outdated: another node holds a later generation without this one", "volume", d.Name, "node", n.st.id,
			"generation", gen, "peer", newer.Node, "peer_generation", newer.Gen)
		v.mu.Lock()
		v.meta.Outdated = true
		v.startTrack(true)
		stale := v.takeGroups() // of a generation the writer left
		err := v.saveMeta()
		v.mu.Unlock()
		for _, g := range stale {
			g.stop()
		}
		grouped = false
		if err != nil {
			return ioErr(err)
		}
	}
	if leased && (!grouped || maxGen > gen) {
		// A writer writes: unless this node is in its latest generation
		// and groups, the writes pass it by.
		v.mu.Lock()
		v.setState(stateWriter, nil)
		v.mu.Unlock()
		return errWriterActive
	}
	// Whom to copy from: an outdated copy from current replicas only, a
	// current one from any node of its generation that is not outdated.
	var from []uint16
	if outdated {
		for p, pr := range peers {
			if pr.nv.Ready && !pr.nv.Outdated {
				from = append(from, p)
			}
		}
	} else {
		// Every member of the generation, and every node a member
		// that answered lists (copies that caught up from a member
		// joined it there, and a writer may have gone on with them).
		need := slices.Clone(members)
		for _, pr := range peers {
			if pr.nv.Gen >= gen {
				for _, m := range pr.nv.Members {
					need = addNode(need, m)
				}
			}
		}
		var missing []uint16
		for _, p := range need {
			if p != n.st.id && peers[p] == nil {
				missing = append(missing, p)
			}
		}
		if len(missing) > 0 {
			v.mu.Lock()
			v.setState(stateWaiting, missing)
			v.mu.Unlock()
			return fmt.Errorf("nodes %v of generation %d are down: this copy may have missed writes they took", missing, gen)
		}
		for p, pr := range peers {
			if !pr.nv.Outdated {
				from = append(from, p)
			}
		}
	}
	slices.Sort(from)
	type job struct {
		e    int
		from []uint16 // replicas to copy from, the newest first
	}
	var jobs []job
	var todo []int
	var lacking []int
	v.mu.Lock()
	for e := range d.Extents() {
		if !d.Holds(n.st.id, e) {
			continue
		}
		var src []uint16
		held := false
		for _, p := range from {
			if !d.Holds(p, e) {
				continue
			}
			held = true
			pv, mine := peers[p].vs[e], v.versions[e]
			// An outdated copy takes every extent: one it missed writes
			// of may carry the version of a later write it took since
			// (a version says which write came last, not that every
			// earlier one is there).
			if outdated || pv > mine || v.stale[e] && pv > 0 {
				src = append(src, p)
			}
		}
		if outdated && !held {
			lacking = append(lacking, e)
			continue
		}
		if !outdated && len(src) > 0 && !v.stale[e] {
			n.log.Warn("stor: replicas differ: taking the newer copy (a write interrupted by a failure)", "volume", d.Name, "node", n.st.id,
				"extent", e, "version", v.versions[e], "from", src)
		}
		slices.SortStableFunc(src, func(a, b uint16) int { return -cmpU64(peers[a].vs[e], peers[b].vs[e]) })
		if len(src) > 0 {
			jobs = append(jobs, job{e, src})
			todo = append(todo, e)
		}
	}
	if len(lacking) > 0 {
		v.setState(stateOutdated, nil)
		v.mu.Unlock()
		return fmt.Errorf("outdated, and no current replica of extents %v answers to copy from", lacking)
	}
	if len(jobs) > 0 {
		v.setState(stateResyncing, nil)
	}
	err := v.markStale(todo)
	v.mu.Unlock()
	if err != nil {
		return err
	}
	for _, j := range jobs {
		var cerr error
		for _, p := range j.from {
			if cerr = n.copyExtent(ctx, v, j.e, p, outdated); cerr == nil {
				break
			}
		}
		if cerr != nil {
			return fmt.Errorf("extent %d: %w", j.e, cerr)
		}
	}
	var top *NodeVolume // an outdated copy's source of the latest generation
	if outdated {
		top = &peers[from[0]].nv
		for _, p := range from {
			if peers[p].nv.Gen > top.Gen {
				top = &peers[p].nv
			}
		}
		v.mu.Lock()
		adopt := top.Gen > v.meta.Gen
		v.mu.Unlock()
		if adopt {
			// Current now, in top's generation: joined there first.
			b, _ := json.Marshal(enrollReq{Name: d.Name, Gen: top.Gen, Node: n.st.id})
			body, err := n.call(ctx, uint16(top.Node), "enroll", append([]byte{opEnroll}, b...))
			var ms []uint16
			if err == nil {
				err = json.Unmarshal(body, &ms)
			}
			if err != nil {
				return fmt.Errorf("joining generation %d at node %d: %w", top.Gen, top.Node, err)
			}
			top.Members = ms
		}
	}
	v.mu.Lock()
	for e := range v.stale {
		// Stale extents no peer has a newer copy of.
		if err := v.copied(e, 0, false); err != nil {
			v.mu.Unlock()
			return err
		}
	}
	if outdated {
		// Current now: of the generation of the newest replica it copied
		// from, unless a writer has given it a later one since.
		if top.Gen > v.meta.Gen {
			v.meta.Gen = top.Gen
			v.meta.Members = addNode(top.Members, n.st.id)
		}
		v.meta.Outdated = false
		v.meta.Missing = nil // what this copy knew of the others is past
		if err := v.saveMeta(); err != nil {
			v.mu.Unlock()
			return ioErr(err)
		}
	}
	if v.holder != 0 && v.holderGen > 0 && time.Now().Before(v.expires) && (!v.grouped(n.cfg.Service, n.st.id) || v.meta.Outdated) {
		// A writer took the lease, or left this node out, meanwhile.
		v.setState(stateWriter, nil)
		v.mu.Unlock()
		return errWriterActive
	}
	v.ready = true
	v.setState(stateReady, nil)
	v.stopTrack()
	v.mu.Unlock()
	n.log.Info("stor: volume ready", "volume", d.Name, "node", n.st.id, "copied", len(jobs), "was_outdated", outdated)
	// Tell the other replicas this one caught up.
	for p := range peers {
		b, _ := json.Marshal(missingReq{Name: d.Name, Node: n.st.id})
		_, _ = n.call(ctx, p, "missing", append([]byte{opMissing}, b...))
	}
	v.mu.Lock()
	delete(v.meta.Missing, n.st.id)
	v.mu.Unlock()
	return nil
}

// addNode returns ids with id added, in order.
func addNode(ids []uint16, id uint16) []uint16 {
	out := slices.Clone(ids)
	if i, ok := slices.BinarySearch(out, id); !ok {
		out = slices.Insert(out, i, id)
	}
	return out
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// copyExtent copies extent e from replica p, a piece at a time. The
// bytes of the writes applied here since the resync began (or the writer
// took this outdated copy into its groups) are kept (they are at least
// as new as the copy's), the rest of the piece written, so the copy never overwrites a newer write and completes
// however busy the writer is. exact (an outdated copy): take p's bytes
// and version whatever this node's version, which may be of a write p
// never got; else ask p for at least the version this node has. The
// extent's version becomes the copy's (the lowest of its pieces'), or
// the later of the two if writes were applied here during the copy.
func (n *Node) copyExtent(ctx context.Context, v *vol, e int, p uint16, exact bool) error {
	d := &v.meta.Desc
	base := uint64(e) * d.Extent
	got := ^uint64(0)
	v.mu.Lock()
	start := v.versions[e]
	v.mu.Unlock()
	for off := uint64(0); off < d.Extent; off += MaxIO {
		l := min(uint64(MaxIO), d.Extent-off)
		v.mu.Lock()
		v0 := v.versions[e]
		v.mu.Unlock()
		minVer := v0
		if exact {
			minVer = 0
		}
		req := (&readReq{Name: d.Name, Off: base + off, Len: uint32(l), MinVer: minVer | resyncRead}).append(nil)
		body, err := n.call(ctx, p, "read", req)
		if err == nil && len(body) != 8+int(l) {
			err = fmt.Errorf("%w: short copy", ErrIO)
		}
		v.mu.Lock()
		if err == nil && !v.removed {
			err = v.writeExcept(body[8:], base+off, v.dirty[e])
		}
		v.mu.Unlock()
		if err != nil {
			return err
		}
		got = min(got, binary.BigEndian.Uint64(body))
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	n.mu.Lock()
	n.stats.Resynced++
	n.mu.Unlock()
	return v.copied(e, got, v.versions[e] == start)
}
