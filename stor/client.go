package stor

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// ClientOptions configure a Client.
type ClientOptions struct {
	// Fabric carries the fabric token for the switch.
	Fabric endpoint.FabricOptions
	// Service names the storage service (DefaultService when empty).
	Service string
	// Window bounds the pieces of one ReadAt or WriteAt in flight at
	// once. Zero means 32.
	Window int
	// MaxInflight bounds the bytes of reads (and of writes through a
	// gateway) in flight at once over the client's volumes, as a block
	// layer bounds its queue: beyond it an I/O waits, instead of
	// overrunning the switch's relay queues. A write through a gateway
	// counts once per replica (the gateway's link carries a copy for
	// each), so that the gateway's queue drains within the I/O timeouts.
	// Zero means 8 MiB.
	MaxInflight int
}

// Client manages volumes and opens them, through the switch at sw.
type Client struct {
	ep       *endpoint.Endpoint
	sw       string
	opts     ClientOptions
	inflight *semaphore.Weighted
	// inflightLimit is inflight's size.
	inflightLimit int64
}

// IOTimeout is a good endpoint.Config.OpTimeout for an endpoint that
// carries volume I/O: a read or write waits behind the others in flight
// (a gateway's link carries every client's), longer under overload than
// the endpoint's default 10 s.
const IOTimeout = time.Minute

// NewClient returns a client using ep (which it does not close). Each
// request is bounded by ep's Config.OpTimeout (see IOTimeout).
func NewClient(ep *endpoint.Endpoint, sw string, opts ClientOptions) *Client {
	if opts.Service == "" {
		opts.Service = DefaultService
	}
	if opts.Window <= 0 {
		opts.Window = 32
	}
	if opts.MaxInflight <= 0 {
		opts.MaxInflight = 8 << 20
	}
	limit := int64(max(opts.MaxInflight, MaxIO))
	return &Client{ep: ep, sw: sw, opts: opts, inflight: semaphore.NewWeighted(limit), inflightLimit: limit}
}

func (c *Client) call(ctx context.Context, id uint16, what string, req []byte) ([]byte, error) {
	return callNode(ctx, c.ep, c.sw, c.opts.Service, c.opts.Fabric, id, what, req)
}

// live returns the ids of the storage nodes the switch lists as alive.
func (c *Client) live(ctx context.Context) ([]uint16, error) {
	ms, err := c.ep.ServiceMembers(ctx, c.sw, c.opts.Service, c.opts.Fabric)
	if errors.Is(err, wire.StatusNotMember) {
		return nil, fmt.Errorf("%w: no storage node is registered with the switch %s as service %q (start them with ndma stord --switch)", ErrNoReplica, c.sw, c.opts.Service)
	}
	if err != nil {
		return nil, fmt.Errorf("stor: asking the switch for the storage nodes: %w", err)
	}
	ids := make([]uint16, 0, len(ms))
	for _, m := range ms {
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	return ids, nil
}

// Nodes asks every live storage node about itself.
func (c *Client) Nodes(ctx context.Context) ([]NodeInfo, error) {
	ids, err := c.live(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]NodeInfo, len(ids))
	errs := make([]error, len(ids))
	forEach(len(ids), func(i int) {
		body, err := c.call(ctx, ids[i], "info", []byte{opInfo})
		if err == nil {
			err = json.Unmarshal(body, &out[i])
		}
		errs[i] = err
	})
	return out, errors.Join(errs...)
}

// forEach runs f(0..n-1) in parallel and waits.
func forEach(n int, f func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i)
		}()
	}
	wg.Wait()
}

// VolumeSpec asks for a volume.
type VolumeSpec struct {
	Name     string
	Size     uint64
	Extent   uint64 // 0: 4 MiB
	Replicas int    // 0: 3, or every live node if fewer
	Nodes    int    // nodes to spread over (0: every live one)
}

// DefaultExtent is a volume's extent size unless asked otherwise.
const DefaultExtent = 4 << 20

// Create makes a volume on the live storage nodes.
func (c *Client) Create(ctx context.Context, spec VolumeSpec) (Descriptor, error) {
	ids, err := c.live(ctx)
	if err != nil {
		return Descriptor{}, err
	}
	if spec.Extent == 0 {
		spec.Extent = DefaultExtent
	}
	if spec.Replicas == 0 {
		spec.Replicas = min(3, len(ids))
	}
	if spec.Nodes > 0 {
		if spec.Nodes > len(ids) {
			return Descriptor{}, fmt.Errorf("%w: %d nodes asked, %d live", ErrNoReplica, spec.Nodes, len(ids))
		}
		ids = ids[:spec.Nodes]
	}
	if spec.Replicas > len(ids) {
		return Descriptor{}, fmt.Errorf("%w: %d replicas asked, %d live storage nodes (one copy per node)", ErrNoReplica, spec.Replicas, len(ids))
	}
	d := Descriptor{Name: spec.Name, Size: spec.Size, Extent: spec.Extent, Replicas: spec.Replicas, Nodes: ids, Created: time.Now().UnixNano()}
	if err := d.Check(); err != nil {
		return Descriptor{}, err
	}
	if vi, err := c.find(ctx, spec.Name); err == nil {
		what := "on nodes " + fmt.Sprint(vi.Nodes)
		if vi.Live == 0 {
			what += ", all down"
		}
		return Descriptor{}, fmt.Errorf("%w: %s (created %s, %s)", ErrExists, spec.Name, time.Unix(0, vi.Created).UTC().Format(time.RFC3339), what)
	} else if !errors.Is(err, ErrNoVolume) {
		return Descriptor{}, err
	}
	b, _ := json.Marshal(d)
	req := append([]byte{opCreate}, b...)
	errs := make([]error, len(ids))
	forEach(len(ids), func(i int) { _, errs[i] = c.call(ctx, ids[i], "create", req) })
	if err := errors.Join(errs...); err != nil {
		// Undo what was made.
		var e enc
		e.u8(opRemove)
		e.str(d.Name)
		e.u8(1)
		forEach(len(ids), func(i int) {
			if errs[i] == nil {
				_, _ = c.call(ctx, ids[i], "remove", e.b)
			}
		})
		return Descriptor{}, fmt.Errorf("stor: create %s: %w", d.Name, err)
	}
	// Every live node records the name, so that it stays taken (and
	// listed) while the volume's own nodes are down.
	c.catalogAll(ctx, CatalogEntry{Desc: d})
	return d, nil
}

// catalogAll records e in the catalog of every live storage node (best
// effort: a node that misses it learns nothing of the volume, as one that
// was down).
func (c *Client) catalogAll(ctx context.Context, e CatalogEntry) {
	ids, err := c.live(ctx)
	if err != nil {
		return
	}
	b, _ := json.Marshal(e)
	req := append([]byte{opCatalog}, b...)
	forEach(len(ids), func(i int) { _, _ = c.call(ctx, ids[i], "catalog", req) })
}

// VolumeInfo is a volume as the live nodes report it.
type VolumeInfo struct {
	Descriptor
	Live int `json:"live"` // nodes of the volume that answered
	// Unavailable: every node holding the volume is down (another node's
	// catalog knows of it).
	Unavailable bool `json:"unavailable,omitempty"`
	// Conflict lists other incarnations of the name (their creation
	// times, Unix ns) that answering nodes still hold: created while
	// this one's nodes were down, or removed while theirs were.
	Conflict []int64 `json:"conflict,omitempty"`
}

// List returns every volume a live node holds or knows of, by name.
func (c *Client) List(ctx context.Context) ([]VolumeInfo, error) {
	ids, err := c.live(ctx)
	if err != nil {
		return nil, err
	}
	lists := make([][]Descriptor, len(ids))
	cats := make([][]CatalogEntry, len(ids))
	errs := make([]error, len(ids))
	forEach(len(ids), func(i int) {
		body, err := c.call(ctx, ids[i], "list", []byte{opList})
		if err == nil {
			err = json.Unmarshal(body, &lists[i])
		}
		if err == nil {
			if body, cerr := c.call(ctx, ids[i], "catalog", []byte{opCatList}); cerr == nil {
				_ = json.Unmarshal(body, &cats[i])
			}
		}
		errs[i] = err
	})
	// The latest incarnation of each name that some node holds or knows
	// of, unless a node knows it removed.
	type key struct {
		name    string
		created int64
	}
	removed := map[key]bool{}
	known := map[key]Descriptor{}
	held := map[key]int{}
	for i := range ids {
		for _, e := range cats[i] {
			k := key{e.Desc.Name, e.Desc.Created}
			if e.Removed != 0 {
				removed[k] = true
			} else {
				known[k] = e.Desc
			}
		}
		for _, d := range lists[i] {
			k := key{d.Name, d.Created}
			known[k] = d
			held[k]++
		}
	}
	by := map[string]*VolumeInfo{}
	for k, d := range known {
		if removed[k] {
			continue
		}
		v := by[k.name]
		if v == nil || v.Created < d.Created {
			if v != nil {
				v.Conflict = append(v.Conflict, v.Created)
			}
			conflict := []int64(nil)
			if v != nil {
				conflict = v.Conflict
			}
			v = &VolumeInfo{Descriptor: d, Live: held[k], Conflict: conflict}
			by[k.name] = v
		} else {
			v.Conflict = append(v.Conflict, d.Created)
		}
	}
	out := make([]VolumeInfo, 0, len(by))
	for _, v := range by {
		v.Unavailable = v.Live == 0
		slices.Sort(v.Conflict)
		out = append(out, *v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, errors.Join(errs...)
}

// find returns volume name as the live nodes report it.
func (c *Client) find(ctx context.Context, name string) (VolumeInfo, error) {
	if err := checkName(name); err != nil {
		return VolumeInfo{}, err
	}
	vs, err := c.List(ctx)
	for _, v := range vs {
		if v.Name == name {
			return v, nil
		}
	}
	if err != nil {
		return VolumeInfo{}, err
	}
	return VolumeInfo{}, fmt.Errorf("%w: %s", ErrNoVolume, name)
}

// VolumeStat is a volume's state over its nodes.
type VolumeStat struct {
	Desc     Descriptor   `json:"desc"`
	Nodes    []NodeVolume `json:"nodes"` // the nodes that answered
	Down     []uint16     `json:"down"`  // the volume's nodes that did not
	Degraded bool         `json:"degraded"`
	Leased   bool         `json:"leased"`
	// Health sums it up: "healthy" (every copy current and serving),
	// "degraded" (some copy down or not current, but every extent has a
	// current copy serving), "unavailable" (some extents have no current
	// copy up: they cannot be read or written until one returns or an
	// operator forces one), or "split" (two copies each hold writes the
	// other lacks: an operator forced both; one must be chosen).
	Health string `json:"health"`
	// Unavailable lists the replica sets with no current copy serving.
	Unavailable [][]uint16 `json:"unavailable,omitempty"`
}

// Stat reports volume name on each of its nodes.
func (c *Client) Stat(ctx context.Context, name string) (*VolumeStat, error) {
	vi, err := c.find(ctx, name)
	if err != nil {
		return nil, err
	}
	d := vi.Descriptor
	st := &VolumeStat{Desc: d}
	nvs := make([]*NodeVolume, len(d.Nodes))
	var e enc
	e.u8(opStat)
	e.str(name)
	forEach(len(d.Nodes), func(i int) {
		body, err := c.call(ctx, d.Nodes[i], "stat", e.b)
		var nv NodeVolume
		if err == nil && json.Unmarshal(body, &nv) == nil && nv.Desc.Created == d.Created {
			nvs[i] = &nv
		}
	})
	ready := map[uint16]bool{}
	for i, nv := range nvs {
		if nv == nil {
			st.Down = append(st.Down, d.Nodes[i])
			st.Degraded = true
			continue
		}
		st.Nodes = append(st.Nodes, *nv)
		st.Leased = st.Leased || nv.Leased
		if len(nv.Missing) > 0 || !nv.Ready || nv.Stale > 0 || nv.Outdated {
			st.Degraded = true
		}
		if nv.Ready && !nv.Outdated {
			ready[uint16(nv.Node)] = true
		}
	}
	for _, s := range d.Sets() {
		if !slices.ContainsFunc(s, func(id uint16) bool { return ready[id] }) {
			st.Unavailable = append(st.Unavailable, s)
		}
	}
	st.Health = "healthy"
	switch {
	case split(st.Nodes):
		st.Health = "split"
	case len(st.Unavailable) > 0:
		st.Health = "unavailable"
	case st.Degraded:
		st.Health = "degraded"
	}
	return st, nil
}

// split reports whether two copies, neither known outdated, each hold a
// generation that leaves the other out (each may hold writes the other
// lacks).
func split(nvs []NodeVolume) bool {
	for i, a := range nvs {
		for _, b := range nvs[i+1:] {
			if !a.Outdated && !b.Outdated && a.Gen != b.Gen &&
				!slices.Contains(a.Members, uint16(b.Node)) && !slices.Contains(b.Members, uint16(a.Node)) {
				return true
			}
		}
	}
	return false
}

// ForceCurrent declares node's copy of volume name current, whatever
// writes it missed: it takes a generation above every one the answering
// nodes hold (by a wide margin, above those of nodes that are down too),
// so that every other copy, when it answers, counts as outdated and is
// replaced by this one's. Writes acknowledged while node was left out are
// lost. Refused while the volume is open for writing.
func (c *Client) ForceCurrent(ctx context.Context, name string, node uint16) (*VolumeStat, error) {
	st, err := c.Stat(ctx, name)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(st.Desc.Nodes, node) {
		return nil, fmt.Errorf("%w: node %d holds none of volume %s (nodes %v)", ErrBadRequest, node, name, st.Desc.Nodes)
	}
	var top uint64
	found := false
	for _, nv := range st.Nodes {
		top = max(top, nv.Gen)
		found = found || nv.Node == int(node)
	}
	if !found {
		return nil, fmt.Errorf("%w: node %d does not answer", ErrNoReplica, node)
	}
	b, _ := json.Marshal(forceReq{Name: name, Gen: top + forceStep})
	if _, err := c.call(ctx, node, "force", append([]byte{opForce}, b...)); err != nil {
		return nil, err
	}
	return st, nil
}

// forceStep is how far a forced generation jumps: past any generation a
// node that is down could have reached since.
const forceStep = 1 << 32

// Removed says what Remove removed.
type Removed struct {
	Desc Descriptor `json:"desc"`
	From []uint16   `json:"from"` // the nodes that deleted their copy
	Down []uint16   `json:"down"` // the volume's nodes that were down: they delete their copies when they return
}

// Remove deletes volume name from its nodes and records its removal in
// every live node's catalog. A volume open for writing, or with a node
// down (which keeps its copy until it learns of the removal), is refused
// unless force.
func (c *Client) Remove(ctx context.Context, name string, force bool) (*Removed, error) {
	st, err := c.Stat(ctx, name)
	if err != nil {
		return nil, err
	}
	if len(st.Down) > 0 && !force {
		return nil, fmt.Errorf("stor: remove %s: nodes %v are down and would keep their copies (force to remove anyway)", name, st.Down)
	}
	var e enc
	e.u8(opRemove)
	e.str(name)
	e.u8(boolByte(force))
	errs := make([]error, len(st.Nodes))
	forEach(len(st.Nodes), func(i int) {
		_, errs[i] = c.call(ctx, uint16(st.Nodes[i].Node), "remove", e.b)
	})
	r := &Removed{Desc: st.Desc, Down: st.Down}
	for i, err := range errs {
		if err == nil {
			r.From = append(r.From, uint16(st.Nodes[i].Node))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return r, err
	}
	c.catalogAll(ctx, CatalogEntry{Desc: st.Desc, Removed: time.Now().UnixNano()})
	return r, nil
}

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// OpenOptions configure Open.
type OpenOptions struct {
	// Write takes the volume's write lease: one writer at a time; a second
	// gets ErrLeaseHeld.
	Write bool
	// Lease is the lease's lifetime, renewed every third of it while the
	// volume is open. Zero means 10 s. A writer that dies loses the lease
	// this long after its last renewal.
	Lease time.Duration
	// Controller, when set, sends every read, write and flush to the
	// gateway of that service name (see Gateway) instead of straight to
	// the replicas: the controller-forwarding design, for comparison.
	Controller string
	// Logger receives what happens to an open volume that its user does
	// not see in the result of a call: a replica dropped from the write
	// groups or taken back, the groups formed again after a switch
	// restart, a lease lost. Nil: none.
	Logger *slog.Logger
}

// DefaultLease is a write lease's lifetime unless asked otherwise.
const DefaultLease = 10 * time.Second

// Volume is an open volume: io.ReaderAt, io.WriterAt and Flush. A write
// is one multicast to its extent's replica group and completes when every
// live replica has it; Flush returns when every live replica has made
// every completed write durable. A read goes to one replica of its
// extent, chosen by the switch (least outstanding requests).
type Volume struct {
	c     *Client
	d     Descriptor
	write bool
	ttl   time.Duration
	ctrl  string // the gateway's service, in controller-forwarding mode
	log   *slog.Logger

	holder uint64
	epoch  uint64

	// form serializes the forming of the groups and of the data
	// generation (a channel: who waits for it waits durably), held across
	// the network calls that takes; mu guards groups and missing, held
	// only to read or swap them, never across a network wait.
	form     chan struct{}
	flushing chan struct{} // held by the flush in progress
	io       gate          // writes and flushes in flight; closed while the groups change
	mu       sync.Mutex
	groups   map[string]*wgroup
	jobSeq   uint64 // write groups formed, for their job names
	// gen is the data generation this writer writes in (0 before the
	// first), genMembers its nodes, cur those of them that held a current
	// copy when it started.
	gen        uint64
	genMembers []uint16
	cur        map[uint16]bool
	curGen     uint64 // the generation genMembers and cur were recorded in
	ctr        uint64 // last version counter used (under verMu)
	verMu      sync.Mutex
	lastVer    []uint64 // per extent: the version of the last write completed (under verMu)
	missing    map[uint16]bool
	reform     bool  // the groups must be formed again (under form)
	lost       error // the lease was lost

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// wgroup is the writer's multicast group for one replica set: rank 0 is
// the writer, rank i+1 node members[i].
type wgroup struct {
	set     []uint16
	members []uint16
	g       *endpoint.Group
}

// gone returns the *endpoint.MemberError of the first member the switch
// said died or left the group, or nil. The switch completes a multicast
// posted after that without the member, which would then miss a write
// the writer counts complete while it still counts the member current:
// the group is not written to again.
func (g *wgroup) gone() error {
	for i := range g.members {
		if err := g.g.Gone(i + 1); err != nil {
			return err
		}
	}
	return nil
}

// Open opens volume name; with Write it takes the write lease.
func (c *Client) Open(ctx context.Context, name string, o OpenOptions) (*Volume, error) {
	vi, err := c.find(ctx, name)
	if err != nil {
		return nil, err
	}
	if vi.Unavailable {
		return nil, fmt.Errorf("%w: every node of volume %s (%v) is down", ErrNoReplica, name, vi.Nodes)
	}
	d := vi.Descriptor
	if o.Lease <= 0 {
		o.Lease = DefaultLease
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	v := &Volume{c: c, d: d, write: o.Write, ttl: o.Lease, ctrl: o.Controller, log: o.Logger, groups: map[string]*wgroup{}, missing: map[uint16]bool{},
		lastVer: make([]uint64, d.Extents()), stop: make(chan struct{}), done: make(chan struct{}), form: make(chan struct{}, 1), flushing: make(chan struct{}, 1)}
	if !o.Write {
		close(v.done)
		return v, nil
	}
	for v.holder == 0 {
		v.holder = rand.Uint64()
	}
	if err := v.acquire(ctx); err != nil {
		return nil, err
	}
	if v.ctrl != "" {
		go v.renew()
		return v, nil
	}
	v.lockForm()
	err = v.formLocked(ctx)
	v.unlockForm()
	if err != nil {
		v.release()
		return nil, err
	}
	go v.renew()
	return v, nil
}

// Size is the volume's size in bytes.
func (v *Volume) Size() int64 { return int64(v.d.Size) }

// Descriptor is the volume's shape and placement.
func (v *Volume) Descriptor() Descriptor { return v.d }

// liveNodes returns the volume's nodes the switch lists.
func (v *Volume) liveNodes(ctx context.Context) ([]uint16, error) {
	ids, err := v.c.live(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(ids, func(id uint16) bool { return !slices.Contains(v.d.Nodes, id) }), nil
}

// leaseAll asks every node in ids for the lease with epoch; it returns the
// highest epoch granted and each answering node's answer, or the refusal.
func (v *Volume) leaseAll(ctx context.Context, ids []uint16, epoch uint64, release bool) (uint64, map[uint16]leaseResp, error) {
	b, _ := json.Marshal(leaseReq{Name: v.d.Name, Holder: v.holder, TTLMs: v.ttl.Milliseconds(), Epoch: epoch, Release: release,
		Gen: v.curGen, Members: v.genMembers})
	req := append([]byte{opLease}, b...)
	resps := make([]leaseResp, len(ids))
	errs := make([]error, len(ids))
	forEach(len(ids), func(i int) {
		body, err := v.c.call(ctx, ids[i], "lease", req)
		if len(body) > 0 && body[0] == '{' {
			_ = json.Unmarshal(body, &resps[i])
		}
		errs[i] = err
	})
	var top uint64
	got := map[uint16]leaseResp{}
	for i, err := range errs {
		if errors.Is(err, ErrLeaseHeld) {
			return 0, nil, fmt.Errorf("%w: volume %s is open for writing by another client (node %d: %v left)", ErrLeaseHeld, v.d.Name, ids[i], time.Duration(resps[i].LeaseMs)*time.Millisecond)
		}
		if err == nil {
			got[ids[i]] = resps[i]
		}
		top = max(top, resps[i].Epoch)
	}
	return top, got, errors.Join(errs...)
}

// ErrNotCurrent: no node that answers holds a current copy of some
// extents (those that do are down, or the copies that answer missed
// writes): the volume is not opened for writing, and reads of those
// extents fail, until a current node returns or an operator declares a
// copy current (Client.ForceCurrent).
var ErrNotCurrent = errors.New("stor: no current replica")

// acquire takes the lease on every live node of the volume, then sets an
// epoch above every one they had. It waits (up to openWait) for every
// replica set to have a current copy among the live nodes.
func (v *Volume) acquire(ctx context.Context) error {
	deadline := time.Now().Add(openWait)
	for {
		ids, err := v.liveNodes(ctx)
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			return fmt.Errorf("%w: no node of volume %s is up", ErrNoReplica, v.d.Name)
		}
		top, _, err := v.leaseAll(ctx, ids, 0, false)
		if err != nil {
			v.release()
			return err
		}
		v.epoch = top + 1
		_, states, err := v.leaseAll(ctx, ids, v.epoch, false)
		if err != nil {
			v.release()
			return err
		}
		lacking := v.lacking(states)
		if len(lacking) == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			v.release()
			return fmt.Errorf("%w: volume %s: no node up holds a current copy of the extents on nodes %v (see ndma vol stat %s)",
				ErrNotCurrent, v.d.Name, lacking, v.d.Name)
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			v.release()
			return err
		}
	}
}

// openWait bounds how long Open waits for nodes that are checking their
// copies (after a restart) to find them current.
const openWait = 10 * time.Second

// lacking returns the replica sets (joined) of which no node in states
// is current. Caller holds mu or owns v.
func (v *Volume) lacking(states map[uint16]leaseResp) [][]uint16 {
	var out [][]uint16
	for _, s := range v.d.Sets() {
		if !slices.ContainsFunc(s, func(id uint16) bool { st, ok := states[id]; return ok && v.current(id, st) }) {
			out = append(out, s)
		}
	}
	return out
}

// current reports whether node id, answering st, holds every write this
// volume's writers completed.
func (v *Volume) current(id uint16, st leaseResp) bool {
	if st.Outdated {
		return false
	}
	if v.curGen == 0 {
		// This writer has written nothing yet: the nodes' own word.
		return st.Ready
	}
	// A node that did not take this writer's generation missed its
	// writes, whatever it thinks (it may not have learned yet that it
	// was left out). One that took it was in the groups of every write
	// of it: current if it was when the generation started, or has
	// caught up since. (A generation some member failed to take saw no
	// writes: a node that missed it missed nothing.)
	return st.Gen >= v.curGen && (v.cur[id] || st.Ready)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// release gives the lease back (best effort).
func (v *Volume) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if ids, err := v.liveNodes(ctx); err == nil {
		_, _, _ = v.leaseAll(ctx, ids, 0, true)
	}
}

// renew keeps the lease, and forms the groups again when a node came back,
// a node is not in the groups it should be in (it restarted), or the
// switch forgot a group (it restarted).
func (v *Volume) renew() {
	defer close(v.done)
	t := time.NewTicker(v.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-v.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), v.ttl/3)
		ids, err := v.liveNodes(ctx)
		if err == nil {
			var states map[uint16]leaseResp
			_, states, err = v.leaseAll(ctx, ids, v.epoch, false)
			if errors.Is(err, ErrLeaseHeld) {
				v.verMu.Lock()
				v.lost = err
				v.verMu.Unlock()
				v.log.Error("stor: write lease lost to another writer", "volume", v.d.Name, "err", err)
			}
			if v.ctrl != "" {
				cancel()
				continue
			}
			v.lockForm()
			if why := v.needReform(ids, states); why != "" {
				v.log.Info("stor: forming the write groups again", "volume", v.d.Name, "why", why)
				v.reform = true
				if err := v.formLocked(ctx); err != nil {
					v.log.Warn("stor: forming the write groups", "volume", v.d.Name, "err", err) // again at the next tick
				}
			}
			v.unlockForm()
		}
		cancel()
	}
}

// lockForm takes v.form; unlockForm gives it back.
func (v *Volume) lockForm()   { v.form <- struct{}{} }
func (v *Volume) unlockForm() { <-v.form }

// groupList returns the write groups.
func (v *Volume) groupList() []*wgroup {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]*wgroup, 0, len(v.groups))
	for _, g := range v.groups {
		out = append(out, g)
	}
	return out
}

// needReform says why the groups must be formed again, or "". Caller
// holds form.
func (v *Volume) needReform(live []uint16, states map[uint16]leaseResp) string {
	if !slices.Equal(live, v.genMembers) {
		return fmt.Sprintf("nodes up %v, writing to %v", live, v.genMembers)
	}
	for _, id := range live {
		if st, ok := states[id]; ok && !st.Grouped {
			return fmt.Sprintf("node %d is not in its write groups", id)
		}
	}
	for _, g := range v.groupList() {
		if err := g.g.Err(); err != nil {
			return fmt.Sprintf("write group of nodes %v: %v", g.members, err)
		}
	}
	if len(v.lacking(states)) > 0 {
		return "a replica set has no current copy"
	}
	return ""
}

// formLocked starts a new data generation for the nodes alive now and
// forms the groups again: a set whose members changed gets a new group
// (the old one is left). Caller holds form.
func (v *Volume) formLocked(ctx context.Context) error {
	// No write or flush is in flight while the groups change: a node
	// leaves the groups of an older generation when it takes a new one,
	// and the switch completes a multicast without a member that left,
	// so a write still on its way in an old group could complete on some
	// copies only.
	v.io.close()
	defer v.io.open()
	var lastErr error
	for try := 0; try < 3; try++ {
		if try > 0 {
			// A node that died while joining drops off the switch's list.
			if err := sleepCtx(ctx, time.Second); err != nil {
				return cmpErr(lastErr, err)
			}
		}
		live, err := v.liveNodes(ctx)
		if err != nil {
			lastErr = err
			continue
		}
		_, states, err := v.leaseAll(ctx, live, v.epoch, false)
		if errors.Is(err, ErrLeaseHeld) {
			return err
		}
		// A node the switch lists that does not answer may still serve
		// reads: it cannot be left out of a generation without being
		// told. Wait until it answers or the switch counts it dead.
		if silent := slices.DeleteFunc(slices.Clone(live), func(id uint16) bool { _, ok := states[id]; return ok }); len(silent) > 0 {
			lastErr = fmt.Errorf("%w: volume %s: nodes %v are up but do not answer: %v", ErrNoReplica, v.d.Name, silent, err)
			continue
		}
		if lastErr = v.genLocked(ctx, live, states); lastErr != nil {
			continue
		}
		if listed, err := v.liveNodes(ctx); err == nil {
			// Nodes up but left out learn it now from the generation
			// the lease renewal carries, and stop serving reads.
			out := slices.DeleteFunc(listed, func(id uint16) bool { return slices.Contains(v.genMembers, id) })
			if len(out) > 0 {
				_, _, _ = v.leaseAll(ctx, out, v.epoch, false)
			}
		}
		if lastErr = v.formOnce(ctx, v.genMembers); lastErr == nil {
			v.mu.Lock()
			missing := maps.Clone(v.missing)
			v.mu.Unlock()
			for _, id := range v.d.Nodes {
				if !slices.Contains(v.genMembers, id) && !missing[id] {
					missing[id] = true
					v.note(ctx, v.genMembers, id)
					v.log.Warn("stor: replica dropped: writing without it", "volume", v.d.Name, "node", id, "generation", v.gen)
				}
				if slices.Contains(v.genMembers, id) && missing[id] {
					delete(missing, id)
					v.log.Info("stor: replica back in the write groups", "volume", v.d.Name, "node", id, "generation", v.gen)
				}
			}
			v.mu.Lock()
			v.missing = missing
			v.mu.Unlock()
			v.reform = false
			return nil
		}
	}
	return lastErr
}

// genLocked starts a new data generation if the nodes written to change
// (or the groups are formed again): it records it, with its members and
// which of them are not current, on every member before any write of it,
// so that a node left out can tell it missed writes. A node that does not
// take it is left out. Caller holds form.
func (v *Volume) genLocked(ctx context.Context, live []uint16, states map[uint16]leaseResp) error {
	cur := map[uint16]bool{}
	for _, id := range live {
		if v.current(id, states[id]) {
			cur[id] = true
		}
	}
	if v.gen != 0 && !v.reform && slices.Equal(live, v.genMembers) && maps.Equal(cur, v.cur) {
		return nil
	}
	if len(cur) == 0 {
		// Recording a generation in which no copy is current would
		// outdate every copy for good.
		return fmt.Errorf("%w: volume %s: none of the nodes up (%v) holds a current copy", ErrNotCurrent, v.d.Name, live)
	}
	for len(live) > 0 {
		gen := v.gen
		for _, st := range states {
			gen = max(gen, st.Gen)
		}
		gen++
		errs := make([]error, len(live))
		forEach(len(live), func(i int) {
			b, _ := json.Marshal(genReq{Name: v.d.Name, Holder: v.holder, Gen: gen, Members: live, Outdated: !cur[live[i]], Direct: v.ctrl != ""})
			_, errs[i] = v.c.call(ctx, live[i], "generation", append([]byte{opGen}, b...))
		})
		var failed []uint16
		for i, err := range errs {
			if errors.Is(err, ErrLeaseHeld) {
				return err
			}
			if err != nil {
				failed = append(failed, live[i])
			}
		}
		// A generation some member did not take is not used: the next
		// one, without it, is above it.
		v.gen = gen
		if len(failed) == 0 {
			v.genMembers, v.cur, v.curGen = live, cur, gen
			// The nodes stopped their groups on taking it: form every
			// one anew.
			v.reform = true
			return nil
		}
		// A node that failed to take it is left out only once the switch
		// no longer lists it (it died meanwhile): one still up would
		// serve reads of what it then misses.
		listed, err := v.liveNodes(ctx)
		if err != nil {
			return err
		}
		for _, id := range failed {
			if slices.Contains(listed, id) {
				return fmt.Errorf("%w: volume %s: node %d did not take generation %d: %v", ErrNoReplica, v.d.Name, id, gen, errors.Join(errs...))
			}
		}
		live = slices.DeleteFunc(slices.Clone(live), func(id uint16) bool { return slices.Contains(failed, id) })
		for _, id := range failed {
			delete(cur, id)
		}
		if len(cur) == 0 {
			// Every current copy died while taking it: the next
			// generation, of the copies left, would have none, and
			// would outdate the copies that died, which hold every
			// write, for good.
			return fmt.Errorf("%w: volume %s: the nodes holding a current copy (%v) died while taking generation %d", ErrNotCurrent, v.d.Name, failed, gen)
		}
	}
	return fmt.Errorf("%w: no node of volume %s took the write generation", ErrNoReplica, v.d.Name)
}

// note tells the live nodes that node id misses the writes from now on.
func (v *Volume) note(ctx context.Context, live []uint16, id uint16) {
	v.verMu.Lock()
	since := v.epoch<<32 | (v.ctr + 1)
	v.verMu.Unlock()
	b, _ := json.Marshal(missingReq{Name: v.d.Name, Node: id, Since: since})
	req := append([]byte{opMissing}, b...)
	forEach(len(live), func(i int) { _, _ = v.c.call(ctx, live[i], "missing", req) })
}

func (v *Volume) formOnce(ctx context.Context, live []uint16) error {
	for _, s := range v.d.Sets() {
		name := setName(v.c.opts.Service, s)
		members := slices.DeleteFunc(slices.Clone(s), func(id uint16) bool { return !slices.Contains(live, id) })
		if !slices.ContainsFunc(members, func(id uint16) bool { return v.cur[id] }) {
			// No current copy of the set's extents is up: its writes
			// fail until one is.
			members = nil
		}
		v.mu.Lock()
		old := v.groups[name]
		if old != nil && slices.Equal(old.members, members) && !v.reform {
			v.mu.Unlock()
			continue
		}
		delete(v.groups, name)
		v.mu.Unlock()
		if old != nil {
			lctx, cancel := context.WithTimeout(ctx, time.Second)
			_ = old.g.Leave(lctx)
			cancel()
		}
		if len(members) == 0 {
			continue // every replica of the set is down: its writes fail
		}
		v.jobSeq++
		h := fnv.New64a()
		fmt.Fprintf(h, "%s/%d/%d/%s/%d", v.d.Name, v.d.Created, v.holder, name, v.jobSeq)
		job := fmt.Sprintf("%s.w%016x", v.c.opts.Service, h.Sum64())
		if id := v.c.ep.Identity(); id != nil {
			// On a sealed switch a member joins only the groups of its
			// credential's scope, and of those the groups that name the
			// scope as their guest: the group is the writer's, and the
			// storage service's scope is its guest (fabric.RankMay).
			owner, _ := secure.NameScopes(v.c.opts.Service)
			job = secure.SubGroupName(id.Cert.Name, job, owner)
		}
		errs := make([]error, len(members))
		forEach(len(members), func(i int) {
			b, _ := json.Marshal(joinReq{Name: v.d.Name, Holder: v.holder, Epoch: v.epoch, Set: name, Job: job, Size: len(members) + 1, Rank: i + 1})
			_, errs[i] = v.c.call(ctx, members[i], "join", append([]byte{opJoin}, b...))
		})
		if err := errors.Join(errs...); err != nil {
			return err
		}
		jctx, cancel := context.WithTimeout(ctx, joinWait)
		g, err := v.c.ep.JoinJob(jctx, v.c.sw, job, len(members)+1, 0, v.c.opts.Fabric)
		cancel()
		if err != nil {
			return fmt.Errorf("stor: volume %s: write group for nodes %v: %w", v.d.Name, members, err)
		}
		v.mu.Lock()
		v.groups[name] = &wgroup{set: s, members: members, g: g}
		v.mu.Unlock()
	}
	return nil
}

// joinWait bounds the forming of one write group.
const joinWait = 5 * time.Second

// pieces splits [off, off+n) at extent boundaries and MaxIO.
func (v *Volume) pieces(off int64, n int, f func(e int, off uint64, lo, hi int)) {
	pos := 0
	for pos < n {
		o := uint64(off) + uint64(pos)
		e := int(o / v.d.Extent)
		end := min(uint64(e+1)*v.d.Extent, o+uint64(n-pos), o+MaxIO)
		l := int(end - o)
		f(e, o, pos, pos+l)
		pos += l
	}
}

func (v *Volume) checkRange(off int64, n int) error {
	if off < 0 || uint64(off) > v.d.Size || uint64(n) > v.d.Size-uint64(off) {
		return fmt.Errorf("%w: %d bytes at %d of volume %s (%d bytes)", ErrOutOfRange, n, off, v.d.Name, v.d.Size)
	}
	return nil
}

// WriteAt writes p at off: each piece (within one extent, at most MaxIO)
// is one multicast to the extent's replica group. A write that fails
// because the groups changed under it (a replica died, the switch
// restarted) is sent again, after the groups are formed anew, for up to
// RetryFor.
func (v *Volume) WriteAt(p []byte, off int64) (int, error) {
	if !v.write {
		return 0, ErrReadOnly
	}
	if err := v.checkRange(off, len(p)); err != nil {
		return 0, err
	}
	return retryIO(v, "write", func() (int, error) { return v.writeOnce(p, off) })
}

// RetryFor bounds how long a read, write or flush is retried while the
// fabric recovers from a failure (a storage node or the switch
// restarting), as a disk's driver retries a command before it fails it.
const RetryFor = 30 * time.Second

// retryable reports whether err may pass once the groups are formed again
// or a replica returns: a group member (or this writer) counted dead, a
// group or service the switch forgot, no current replica up, a timeout.
func retryable(err error) bool {
	var me *endpoint.MemberError
	return errors.As(err, &me) || errors.Is(err, wire.StatusNotMember) || errors.Is(err, wire.StatusMemberDead) ||
		errors.Is(err, ErrNoReplica) || errors.Is(err, ErrNotCurrent) || errors.Is(err, ErrNotReady) ||
		errors.Is(err, endpoint.ErrTimeout) || errors.Is(err, errReform) || errors.Is(err, ErrWrongNode) ||
		errors.Is(err, transport.ErrPeerDead)
}

// retryIO runs f until it succeeds, fails for good, or RetryFor passes;
// between tries of a writer, the groups are formed again.
func retryIO(v *Volume, what string, f func() (int, error)) (int, error) {
	deadline := time.Now().Add(RetryFor)
	wait := 50 * time.Millisecond
	for try := 0; ; try++ {
		n, err := f()
		if err == nil || !retryable(err) || time.Now().After(deadline) {
			if err != nil && try > 0 {
				v.log.Warn("stor: I/O failed", "volume", v.d.Name, "op", what, "tries", try+1, "err", err)
			}
			return n, err
		}
		if try == 0 {
			v.log.Info("stor: I/O failed, retrying", "volume", v.d.Name, "op", what, "err", err)
		}
		time.Sleep(wait)
		wait = min(2*wait, time.Second)
		if v.ctrl != "" && (staleService(err) || silentService(err)) {
			// The switch restarted: look the gateway up again.
			ctx, cancel := context.WithTimeout(context.Background(), nodeCallTimeout)
			_, _ = v.c.ep.ServiceMembers(ctx, v.c.sw, v.ctrl, v.c.opts.Fabric)
			cancel()
		}
		if v.write && v.ctrl == "" {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			v.lockForm()
			v.reform = true
			if ferr := v.formLocked(ctx); ferr != nil {
				v.log.Debug("stor: forming the write groups", "volume", v.d.Name, "err", ferr)
			}
			v.unlockForm()
			cancel()
		}
	}
}

func (v *Volume) writeOnce(p []byte, off int64) (int, error) {
	v.verMu.Lock()
	lost := v.lost
	v.verMu.Unlock()
	if lost != nil {
		return 0, lost
	}
	v.io.enter()
	defer v.io.leave()
	type piece struct {
		op  *endpoint.Op
		e   int
		ver uint64
		req []byte // controller mode: the request, to send again
		n   int    // controller mode: its data bytes, held in Client.inflight
	}
	var (
		inflight []piece
		firstErr error
	)
	wait := func(pc piece) {
		<-pc.op.Done()
		err := pc.op.Err
		if (errors.Is(err, wire.StatusBusy) || errors.Is(err, wire.StatusMemberDead)) && v.ctrl != "" {
			// The gateway or the switch is out of room: again, with
			// backoff.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			pc.op.Resp, err = retryBusy(ctx, true, func() ([]byte, error) {
				return v.c.ep.Anycast(ctx, v.c.sw, v.ctrl, gatewayKey, pc.req, v.c.opts.Fabric)
			})
			cancel()
		}
		if v.ctrl != "" {
			v.c.inflight.Release(int64(pc.n))
			if err == nil {
				_, err = replyBody(-1, "write", pc.op.Resp)
			}
		}
		if err != nil {
			firstErr = cmpErr(firstErr, fmt.Errorf("stor: volume %s: write: %w", v.d.Name, err))
			return
		}
		v.verMu.Lock()
		v.lastVer[pc.e] = max(v.lastVer[pc.e], pc.ver)
		v.verMu.Unlock()
	}
	v.pieces(off, len(p), func(e int, o uint64, lo, hi int) {
		if firstErr != nil {
			return
		}
		v.verMu.Lock()
		v.ctr++
		pc := piece{e: e, ver: v.epoch<<32 | v.ctr}
		v.verMu.Unlock()
		var err error
		if v.ctrl != "" {
			pc.op, pc.req, pc.n, err = v.startGateway(pc.ver, o, p[lo:hi])
		} else {
			pc.op, err = v.startMulticast(e, pc.ver, o, p[lo:hi])
		}
		if err != nil {
			firstErr = err
			return
		}
		inflight = append(inflight, pc)
		if len(inflight) >= v.c.opts.Window {
			wait(inflight[0])
			inflight = inflight[1:]
		}
	})
	for _, pc := range inflight {
		wait(pc)
	}
	if firstErr != nil {
		return 0, firstErr
	}
	return len(p), nil
}

// startMulticast sends one write piece (version ver, at off) as one
// multicast to extent e's replica group.
func (v *Volume) startMulticast(e int, ver, off uint64, data []byte) (*endpoint.Op, error) {
	v.mu.Lock()
	g := v.groups[setName(v.c.opts.Service, v.d.SetOf(e))]
	v.mu.Unlock()
	if g == nil {
		return nil, fmt.Errorf("%w: every replica of extent %d (nodes %v) is down", ErrNoReplica, e, v.d.Replica(e))
	}
	if err := g.gone(); err != nil {
		return nil, fmt.Errorf("stor: volume %s: write: %w", v.d.Name, err)
	}
	msg := appendWrite(make([]byte, 0, writeHdr+len(data)), ver, off, data)
	// Not MulticastOptions.Continue: a write that a member of the group
	// died before taking fails, and is sent again once the groups are
	// formed anew (in a generation that counts that member out), so that
	// every member a generation counts current holds every write that
	// completed. (One that completed without a member that came back
	// unnoticed would be missing on a copy counted current.)
	return g.g.StartMulticast(msg, endpoint.MulticastOptions{})
}

// startGateway sends one write piece to the gateway (controller mode),
// holding its bytes in Client.inflight once per replica (what the
// gateway's link carries for it); it returns the request, to send again,
// and the bytes held.
func (v *Volume) startGateway(ver, off uint64, data []byte) (*endpoint.Op, []byte, int, error) {
	req := (&oneReq{Name: v.d.Name, Holder: v.holder, Ver: ver, Off: off, Data: data}).append(nil, opGwWrite)
	n := int(min(int64(len(data))*int64(max(v.d.Replicas, 1)), v.c.inflightLimit))
	if err := v.c.inflight.Acquire(context.Background(), int64(n)); err != nil {
		return nil, nil, 0, err
	}
	op, err := v.c.ep.StartAnycast(context.Background(), v.c.sw, v.ctrl, gatewayKey, req, v.c.opts.Fabric, nil)
	if err != nil {
		v.c.inflight.Release(int64(n))
		return nil, nil, 0, err
	}
	return op, req, n, nil
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// flushSlots is the aggregation a flush ends with: slot 0 counts the
// replicas that answered, slot c those that answered code c.
const flushSlots = 16

// Flush makes every completed write durable on every live replica (each
// fdatasyncs), and reports a write a replica could not apply (a full
// disk, an I/O error). A replica found dead is dropped from the groups
// (the volume is degraded) and the flush is retried on the others; so is
// a flush whose groups the switch forgot (it restarted), for up to
// RetryFor.
func (v *Volume) Flush() error {
	if !v.write {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := retryIO(v, "flush", func() (int, error) {
		if v.ctrl == "" {
			return 0, v.flushOnce(ctx)
		}
		req := (&oneReq{Name: v.d.Name, Holder: v.holder}).append(nil, opGwFlush)
		resp, err := retryBusy(ctx, true, func() ([]byte, error) { return v.c.ep.Anycast(ctx, v.c.sw, v.ctrl, gatewayKey, req, v.c.opts.Fabric) })
		if err == nil {
			_, err = replyBody(-1, "flush", resp)
		}
		return 0, err
	})
	return err
}

var errReform = errors.New("stor: write groups changed")

func (v *Volume) flushOnce(ctx context.Context) error {
	// One flush at a time: a node answers each flush message with its
	// part of one aggregation, and the switch pairs the aggregations in
	// order, so two flushes at once could each take the other's answer,
	// given before the node applied the writes it was meant to cover.
	select {
	case v.flushing <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-v.flushing }()
	v.io.enter()
	defer v.io.leave()
	gs := v.groupList()
	if len(gs) < len(v.d.Sets()) {
		return fmt.Errorf("%w: some extents of volume %s have every replica down", ErrNoReplica, v.d.Name)
	}
	errs := make([]error, len(gs))
	forEach(len(gs), func(i int) {
		g := gs[i]
		if err := g.gone(); err != nil {
			errs[i] = err
			return
		}
		if err := g.g.Multicast(ctx, []byte{opFlush}, endpoint.MulticastOptions{}); err != nil {
			errs[i] = err
			return
		}
		var send, res [8 * flushSlots]byte
		if err := g.g.Allreduce(ctx, send[:], res[:], wire.DtypeI64, wire.AluAdd, endpoint.ReduceOptions{}); err != nil {
			errs[i] = err
			return
		}
		n := binary.LittleEndian.Uint64(res[:])
		if n < uint64(len(g.members)) {
			errs[i] = errReform
			return
		}
		for c := 1; c < flushSlots; c++ {
			if k := binary.LittleEndian.Uint64(res[8*c:]); k > 0 {
				errs[i] = &NodeError{Node: -1, Op: "flush", Code: Code(c), Msg: fmt.Sprintf("%d of %d replicas of nodes %v failed a write", k, n, g.members)}
				return
			}
		}
	})
	return errors.Join(errs...)
}

// ReadAt reads len(p) bytes at off: each piece from one replica, as the
// switch picks among the live ones; a replica that cannot serve it (being
// resynced, or behind this client's own writes) is skipped for another.
func (v *Volume) ReadAt(p []byte, off int64) (int, error) {
	if err := v.checkRange(off, len(p)); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type piece struct {
		e      int
		off    uint64
		lo, hi int
	}
	var ps []piece
	v.pieces(off, len(p), func(e int, o uint64, lo, hi int) { ps = append(ps, piece{e, o, lo, hi}) })
	if len(ps) == 1 {
		return len(p), v.readPiece(ctx, ps[0].e, ps[0].off, p)
	}
	errs := make([]error, len(ps))
	sem := make(chan struct{}, v.c.opts.Window)
	var wg sync.WaitGroup
	for i, pc := range ps {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = v.readPiece(ctx, pc.e, pc.off, p[pc.lo:pc.hi])
			<-sem
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return len(p), nil
}

// readPiece reads one piece, retrying for up to RetryFor while no replica
// can serve it (every one down, resyncing or behind, the switch
// restarting).
func (v *Volume) readPiece(ctx context.Context, e int, off uint64, buf []byte) error {
	_, err := retryIO(v, "read", func() (int, error) { return 0, v.readPieceOnce(ctx, e, off, buf) })
	return err
}

func (v *Volume) readPieceOnce(ctx context.Context, e int, off uint64, buf []byte) error {
	if err := v.c.inflight.Acquire(ctx, int64(len(buf))); err != nil {
		return err
	}
	defer v.c.inflight.Release(int64(len(buf)))
	v.verMu.Lock()
	minVer := v.lastVer[e]
	v.verMu.Unlock()
	req := (&readReq{Name: v.d.Name, Off: off, Len: uint32(len(buf)), MinVer: minVer}).append(nil)
	var resp []byte
	var err error
	if v.ctrl != "" {
		resp, err = retryBusy(ctx, true, func() ([]byte, error) { return v.c.ep.Anycast(ctx, v.c.sw, v.ctrl, gatewayKey, req, v.c.opts.Fabric) })
	} else {
		resp, err = readExtent(ctx, v.c, v.d, e, req)
	}
	if err != nil {
		return err
	}
	body, err := replyBody(-1, "read", resp)
	if err != nil {
		return err
	}
	return copyRead(buf, body)
}

// readExtent sends read request req for extent e of volume d to one of its
// replicas, as the switch picks (anycast to the replica set); if that one
// cannot serve it (being resynced, or behind the writer), to each replica
// in turn. It returns the reply, code first.
func readExtent(ctx context.Context, c *Client, d Descriptor, e int, req []byte) ([]byte, error) {
	set := setName(c.opts.Service, d.SetOf(e))
	anycast := func() ([]byte, error) {
		// A try is bounded, so that a request a restarted switch drops
		// (a cached group id that names no service now) is looked up
		// again in time.
		actx, cancel := context.WithTimeout(ctx, nodeCopyTimeout)
		defer cancel()
		return retryBusy(actx, true, func() ([]byte, error) { return c.ep.Anycast(actx, c.sw, set, 0, req, c.opts.Fabric) })
	}
	resp, err := anycast()
	if (errors.Is(err, wire.StatusNotMember) || silentService(err)) && ctx.Err() == nil {
		// The switch restarted: look the set up again.
		if _, lerr := c.ep.ServiceMembers(ctx, c.sw, set, c.opts.Fabric); lerr == nil {
			resp, err = anycast()
		}
	}
	if err == nil {
		_, err = replyBody(-1, "read", resp)
		if err == nil || !errors.Is(err, ErrNotReady) && !errors.Is(err, ErrNoVolume) {
			return resp, nil
		}
	}
	// The replica the switch chose could not serve it: ask each in turn.
	for _, id := range d.Replica(e) {
		body, rerr := c.call(ctx, id, "read", req)
		if rerr == nil {
			return append([]byte{byte(CodeOK)}, body...), nil
		}
		err = rerr
	}
	return nil, fmt.Errorf("%w: volume %s extent %d: %v", ErrNoReplica, d.Name, e, err)
}

func copyRead(buf, body []byte) error {
	if len(body) != 8+len(buf) {
		return fmt.Errorf("%w: read answered %d bytes, want %d", ErrIO, len(body)-8, len(buf))
	}
	copy(buf, body[8:])
	return nil
}

// Degraded lists the volume's nodes this writer found down and writes
// without.
func (v *Volume) Degraded() []uint16 {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []uint16
	for id := range v.missing {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// Close flushes a writable volume, leaves its groups and gives the lease
// back.
func (v *Volume) Close() error {
	var err error
	v.once.Do(func() {
		if !v.write {
			return
		}
		err = v.Flush()
		close(v.stop)
		<-v.done
		v.lockForm()
		v.mu.Lock()
		gs := v.groups
		v.groups = map[string]*wgroup{}
		v.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		for _, g := range gs {
			_ = g.g.Leave(ctx)
		}
		cancel()
		v.unlockForm()
		v.release()
	})
	return err
}
