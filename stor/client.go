package stor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/secure"
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
	// Seed, when not zero, seeds the client's random draws (each
	// writer's lease holder id, the jitter of the retries the switch
	// refused BUSY), so that a run on the simulated network replays from
	// its seed. Zero draws from the system's generator.
	Seed uint64
}

// Client manages volumes and opens them, through the switch at sw.
type Client struct {
	ep       *endpoint.Endpoint
	sw       string
	opts     ClientOptions
	inflight *semaphore.Weighted
	// inflightLimit is inflight's size.
	inflightLimit int64
	draws         *draws
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
	return &Client{ep: ep, sw: sw, opts: opts, inflight: semaphore.NewWeighted(limit), inflightLimit: limit, draws: newDraws(opts.Seed)}
}

func (c *Client) call(ctx context.Context, id uint16, what string, req []byte) ([]byte, error) {
	return callNode(ctx, c.ep, c.draws, c.sw, c.opts.Service, c.opts.Fabric, id, what, req)
}

// live returns the ids of the storage nodes the switch lists as alive.
func (c *Client) live(ctx context.Context) ([]uint16, error) {
	ms, err := c.ep.ServiceMembers(ctx, c.sw, c.opts.Service, c.opts.Fabric)
	passGate(ctx)
	if errors.Is(err, wire.StatusNotMember) {
		return nil, fmt.Errorf("%w: no storage node is registered with the switch %s as service %q (start them with ndma stord --switch)", ErrNoReplica, c.sw, c.opts.Service)
	}
	if err != nil {
		return nil, fmt.Errorf("stor: asking the switch for the storage nodes: %w", err)
	}
	if len(ms) == 0 {
		// The service is known but none of its nodes is up: nothing can
		// be said of any volume (an empty list would read as "no such
		// volume", which a writer takes as final).
		return nil, fmt.Errorf("%w: no storage node of service %q is up at the switch %s", ErrNoReplica, c.opts.Service, c.sw)
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
	c.forEach(ctx, len(ids), func(ctx context.Context, i int) {
		body, err := c.call(ctx, ids[i], "info", []byte{opInfo})
		if err == nil {
			err = json.Unmarshal(body, &out[i])
		}
		errs[i] = err
	})
	return out, errors.Join(errs...)
}

// forEach runs f(0..n-1) in parallel and waits. Each f has a gate of
// c's endpoint (made in index order) in its ctx, which it passes after
// each wait for the network (passGate; callNode does): on the simulated
// network the goroutines woken at one instant then go on in index
// order, and what they send reaches the network in an order fixed by
// the run's seed rather than by the Go scheduler.
func (c *Client) forEach(ctx context.Context, n int, f func(ctx context.Context, i int)) {
	gates := make([]*endpoint.Gate, n)
	for i := range gates {
		gates[i] = c.ep.NewGate()
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			gates[i].Pass()
			f(context.WithValue(ctx, gateKey{}, gates[i]), i)
		})
	}
	wg.Wait()
	passGate(ctx)
}

// gated returns ctx carrying a new gate of c's endpoint, for one
// goroutine to pass after each of its waits (passGate): on the simulated
// network the goroutines woken at one instant then go on in the order
// their gates were made.
func (c *Client) gated(ctx context.Context) context.Context {
	return context.WithValue(ctx, gateKey{}, c.ep.NewGate())
}

// gateKey is the context key of a goroutine's endpoint.Gate (forEach).
type gateKey struct{}

// passGate passes ctx's gate, if it carries one (forEach).
func passGate(ctx context.Context) {
	if g, ok := ctx.Value(gateKey{}).(*endpoint.Gate); ok {
		g.Pass()
	}
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

// scope is the scope of the client's credential (secure.ParseName), or ""
// without one: the owner of the volumes it creates.
func (c *Client) scope() string {
	id := c.ep.Identity()
	if id == nil {
		return ""
	}
	n, err := secure.ParseName(id.Cert.Role, id.Cert.Name)
	if err != nil {
		return ""
	}
	return n.Scope
}

// Create makes a volume on the live storage nodes. On a sealed fabric the
// volume belongs to the scope of the client's credential (Descriptor.Owner):
// only that scope's credentials and the storage service's reach it.
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
	d := Descriptor{Name: spec.Name, Size: spec.Size, Extent: spec.Extent, Replicas: spec.Replicas, Nodes: ids, Created: time.Now().UnixNano(),
		Owner: c.scope()}
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
	c.forEach(ctx, len(ids), func(ctx context.Context, i int) { _, errs[i] = c.call(ctx, ids[i], "create", req) })
	if err := errors.Join(errs...); err != nil {
		// Undo what was made.
		var e enc
		e.u8(opRemove)
		e.str(d.Name)
		e.u8(1)
		c.forEach(ctx, len(ids), func(ctx context.Context, i int) {
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
	c.forEach(ctx, len(ids), func(ctx context.Context, i int) { _, _ = c.call(ctx, ids[i], "catalog", req) })
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
	c.forEach(ctx, len(ids), func(ctx context.Context, i int) {
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
	c.forEach(ctx, len(d.Nodes), func(ctx context.Context, i int) {
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
	c.forEach(ctx, len(st.Nodes), func(ctx context.Context, i int) {
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
