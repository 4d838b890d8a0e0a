package stor

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
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
	if _, err := c.find(ctx, spec.Name); err == nil {
		return Descriptor{}, fmt.Errorf("%w: %s", ErrExists, spec.Name)
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
	return d, nil
}

// VolumeInfo is a volume as the live nodes report it.
type VolumeInfo struct {
	Descriptor
	Live int `json:"live"` // nodes of the volume that answered
}

// List returns every volume a live node holds, by name.
func (c *Client) List(ctx context.Context) ([]VolumeInfo, error) {
	ids, err := c.live(ctx)
	if err != nil {
		return nil, err
	}
	lists := make([][]Descriptor, len(ids))
	errs := make([]error, len(ids))
	forEach(len(ids), func(i int) {
		body, err := c.call(ctx, ids[i], "list", []byte{opList})
		if err == nil {
			err = json.Unmarshal(body, &lists[i])
		}
		errs[i] = err
	})
	by := map[string]*VolumeInfo{}
	for _, l := range lists {
		for _, d := range l {
			v := by[d.Name]
			if v == nil || v.Created < d.Created {
				v = &VolumeInfo{Descriptor: d}
				by[d.Name] = v
			}
			if v.Created == d.Created {
				v.Live++
			}
		}
	}
	out := make([]VolumeInfo, 0, len(by))
	for _, v := range by {
		out = append(out, *v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, errors.Join(errs...)
}

// find returns volume name's descriptor from the live nodes.
func (c *Client) find(ctx context.Context, name string) (Descriptor, error) {
	if err := checkName(name); err != nil {
		return Descriptor{}, err
	}
	vs, err := c.List(ctx)
	for _, v := range vs {
		if v.Name == name {
			return v.Descriptor, nil
		}
	}
	if err != nil {
		return Descriptor{}, err
	}
	return Descriptor{}, fmt.Errorf("%w: %s", ErrNoVolume, name)
}

// VolumeStat is a volume's state over its nodes.
type VolumeStat struct {
	Desc     Descriptor   `json:"desc"`
	Nodes    []NodeVolume `json:"nodes"` // the nodes that answered
	Down     []uint16     `json:"down"`  // the volume's nodes that did not
	Degraded bool         `json:"degraded"`
	Leased   bool         `json:"leased"`
}

// Stat reports volume name on each of its nodes.
func (c *Client) Stat(ctx context.Context, name string) (*VolumeStat, error) {
	d, err := c.find(ctx, name)
	if err != nil {
		return nil, err
	}
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
	for i, nv := range nvs {
		if nv == nil {
			st.Down = append(st.Down, d.Nodes[i])
			st.Degraded = true
			continue
		}
		st.Nodes = append(st.Nodes, *nv)
		st.Leased = st.Leased || nv.Leased
		if len(nv.Missing) > 0 || !nv.Ready || nv.Stale > 0 {
			st.Degraded = true
		}
	}
	return st, nil
}

// Remove deletes volume name from its nodes. A volume open for writing,
// or with a node down (which would keep its copy), is refused unless
// force.
func (c *Client) Remove(ctx context.Context, name string, force bool) error {
	st, err := c.Stat(ctx, name)
	if err != nil {
		return err
	}
	if len(st.Down) > 0 && !force {
		return fmt.Errorf("stor: remove %s: nodes %v are down and would keep their copies (force to remove anyway)", name, st.Down)
	}
	var e enc
	e.u8(opRemove)
	e.str(name)
	e.u8(boolByte(force))
	errs := make([]error, len(st.Nodes))
	forEach(len(st.Nodes), func(i int) {
		_, errs[i] = c.call(ctx, uint16(st.Nodes[i].Node), "remove", e.b)
	})
	return errors.Join(errs...)
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

	mu      sync.RWMutex // writes and flushes hold it shared, reform exclusively
	groups  map[string]*wgroup
	gen     uint64
	ctr     uint64 // last version counter used (under verMu)
	verMu   sync.Mutex
	lastVer []uint64 // per extent: the version of the last write completed (under verMu)
	missing map[uint16]bool
	reform  bool  // the groups must be formed again (under mu or verMu... see needReform)
	lost    error // the lease was lost

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

// Open opens volume name; with Write it takes the write lease.
func (c *Client) Open(ctx context.Context, name string, o OpenOptions) (*Volume, error) {
	d, err := c.find(ctx, name)
	if err != nil {
		return nil, err
	}
	if o.Lease <= 0 {
		o.Lease = DefaultLease
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	v := &Volume{c: c, d: d, write: o.Write, ttl: o.Lease, ctrl: o.Controller, log: o.Logger, groups: map[string]*wgroup{}, missing: map[uint16]bool{},
		lastVer: make([]uint64, d.Extents()), stop: make(chan struct{}), done: make(chan struct{})}
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
	v.mu.Lock()
	err = v.formLocked(ctx)
	v.mu.Unlock()
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
// highest epoch granted, or the refusal.
func (v *Volume) leaseAll(ctx context.Context, ids []uint16, epoch uint64, release bool) (uint64, error) {
	b, _ := json.Marshal(leaseReq{Name: v.d.Name, Holder: v.holder, TTLMs: v.ttl.Milliseconds(), Epoch: epoch, Release: release})
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
	for i, err := range errs {
		if errors.Is(err, ErrLeaseHeld) {
			return 0, fmt.Errorf("%w: volume %s is open for writing by another client (node %d: %v left)", ErrLeaseHeld, v.d.Name, ids[i], time.Duration(resps[i].LeaseMs)*time.Millisecond)
		}
		top = max(top, resps[i].Epoch)
	}
	return top, errors.Join(errs...)
}

// acquire takes the lease on every live node of the volume, then sets an
// epoch above every one they had.
func (v *Volume) acquire(ctx context.Context) error {
	ids, err := v.liveNodes(ctx)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return fmt.Errorf("%w: no node of volume %s is up", ErrNoReplica, v.d.Name)
	}
	top, err := v.leaseAll(ctx, ids, 0, false)
	if err != nil {
		v.release()
		return err
	}
	v.epoch = top + 1
	if _, err := v.leaseAll(ctx, ids, v.epoch, false); err != nil {
		v.release()
		return err
	}
	return nil
}

// release gives the lease back (best effort).
func (v *Volume) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if ids, err := v.liveNodes(ctx); err == nil {
		_, _ = v.leaseAll(ctx, ids, 0, true)
	}
}

// renew keeps the lease and takes nodes that came back into the groups.
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
			_, err = v.leaseAll(ctx, ids, v.epoch, false)
			if errors.Is(err, ErrLeaseHeld) {
				v.verMu.Lock()
				v.lost = err
				v.verMu.Unlock()
			}
			back := false
			if v.ctrl != "" {
				cancel()
				continue
			}
			v.mu.RLock()
			for _, id := range ids {
				if !v.inGroups(id) {
					back = true
				}
			}
			v.mu.RUnlock()
			if back {
				v.mu.Lock()
				_ = v.formLocked(ctx) // on failure, again at the next tick
				v.mu.Unlock()
			}
		}
		cancel()
	}
}

// inGroups reports whether node id is a member of the groups of the sets
// that include it. Caller holds mu.
func (v *Volume) inGroups(id uint16) bool {
	for _, s := range v.d.Sets() {
		if !slices.Contains(s, id) {
			continue
		}
		g := v.groups[setName(v.c.opts.Service, s)]
		if g == nil || !slices.Contains(g.members, id) {
			return false
		}
	}
	return true
}

// formLocked forms the groups again for the nodes alive now: a set whose
// members changed gets a new group (the old one is left). Caller holds mu
// exclusively.
func (v *Volume) formLocked(ctx context.Context) error {
	var lastErr error
	for try := 0; try < 3; try++ {
		if try > 0 {
			time.Sleep(time.Second) // a node that died while joining drops off the switch's list
		}
		live, err := v.liveNodes(ctx)
		if err != nil {
			lastErr = err
			continue
		}
		if lastErr = v.formOnce(ctx, live); lastErr == nil {
			for _, id := range v.d.Nodes {
				if !slices.Contains(live, id) && !v.missing[id] {
					v.missing[id] = true
					v.note(ctx, live, id)
				}
				if slices.Contains(live, id) {
					delete(v.missing, id)
				}
			}
			v.reform = false
			return nil
		}
	}
	return lastErr
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
		old := v.groups[name]
		if old != nil && slices.Equal(old.members, members) && !v.reform {
			continue
		}
		if old != nil {
			lctx, cancel := context.WithTimeout(ctx, time.Second)
			_ = old.g.Leave(lctx)
			cancel()
			delete(v.groups, name)
		}
		if len(members) == 0 {
			continue // every replica of the set is down: its writes fail
		}
		v.gen++
		h := fnv.New64a()
		fmt.Fprintf(h, "%s/%d/%d/%s/%d", v.d.Name, v.d.Created, v.holder, name, v.gen)
		job := fmt.Sprintf("%s.w%016x", v.c.opts.Service, h.Sum64())
		if id := v.c.ep.Identity(); id != nil {
			if bound, _, ok := fabric.BoundRank(id.Cert.Name); ok {
				// A credential bound to a job's rank joins only that
				// job's own groups.
				job = bound + "." + job
			}
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
		v.groups[name] = &wgroup{set: s, members: members, g: g}
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
// is one multicast to the extent's replica group.
func (v *Volume) WriteAt(p []byte, off int64) (int, error) {
	if !v.write {
		return 0, ErrReadOnly
	}
	if err := v.checkRange(off, len(p)); err != nil {
		return 0, err
	}
	v.verMu.Lock()
	lost := v.lost
	v.verMu.Unlock()
	if lost != nil {
		return 0, lost
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
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
			pc.op.Resp, err = retryBusy(ctx, true, func() ([]byte, error) { return v.c.ep.Anycast(ctx, v.c.sw, v.ctrl, 0, pc.req, v.c.opts.Fabric) })
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
// multicast to extent e's replica group. Caller holds v.mu shared.
func (v *Volume) startMulticast(e int, ver, off uint64, data []byte) (*endpoint.Op, error) {
	g := v.groups[setName(v.c.opts.Service, v.d.SetOf(e))]
	if g == nil {
		return nil, fmt.Errorf("%w: every replica of extent %d (nodes %v) is down", ErrNoReplica, e, v.d.Replica(e))
	}
	msg := appendWrite(make([]byte, 0, writeHdr+len(data)), ver, off, data)
	return g.g.StartMulticast(msg, endpoint.MulticastOptions{Continue: true})
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
	op, err := v.c.ep.StartAnycast(context.Background(), v.c.sw, v.ctrl, 0, req, v.c.opts.Fabric, nil)
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
// (the volume is degraded) and the flush is retried on the others.
func (v *Volume) Flush() error {
	if !v.write {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if v.ctrl != "" {
		req := (&oneReq{Name: v.d.Name, Holder: v.holder}).append(nil, opGwFlush)
		resp, err := retryBusy(ctx, true, func() ([]byte, error) { return v.c.ep.Anycast(ctx, v.c.sw, v.ctrl, 0, req, v.c.opts.Fabric) })
		if err == nil {
			_, err = replyBody(-1, "flush", resp)
		}
		return err
	}
	for try := 0; ; try++ {
		err := v.flushOnce(ctx)
		var me *endpoint.MemberError
		if err == nil || !errors.As(err, &me) && !errors.Is(err, errReform) || try == 3 {
			return err
		}
		v.mu.Lock()
		v.reform = true
		ferr := v.formLocked(ctx)
		v.mu.Unlock()
		if ferr != nil {
			return ferr
		}
	}
}

var errReform = errors.New("stor: write groups changed")

func (v *Volume) flushOnce(ctx context.Context) error {
	v.mu.RLock()
	defer v.mu.RUnlock()
	gs := make([]*wgroup, 0, len(v.groups))
	for _, g := range v.groups {
		gs = append(gs, g)
	}
	if len(gs) < len(v.d.Sets()) {
		return fmt.Errorf("%w: some extents of volume %s have every replica down", ErrNoReplica, v.d.Name)
	}
	errs := make([]error, len(gs))
	forEach(len(gs), func(i int) {
		g := gs[i]
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

func (v *Volume) readPiece(ctx context.Context, e int, off uint64, buf []byte) error {
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
		resp, err = retryBusy(ctx, true, func() ([]byte, error) { return v.c.ep.Anycast(ctx, v.c.sw, v.ctrl, 0, req, v.c.opts.Fabric) })
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
	anycast := func() ([]byte, error) { return c.ep.Anycast(ctx, c.sw, set, 0, req, c.opts.Fabric) }
	resp, err := retryBusy(ctx, true, anycast)
	if errors.Is(err, wire.StatusNotMember) {
		// The switch restarted: look the set up again.
		if _, lerr := c.ep.ServiceMembers(ctx, c.sw, set, c.opts.Fabric); lerr == nil {
			resp, err = retryBusy(ctx, true, anycast)
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
	v.mu.RLock()
	defer v.mu.RUnlock()
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
		v.mu.Lock()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		for name, g := range v.groups {
			_ = g.g.Leave(ctx)
			delete(v.groups, name)
		}
		cancel()
		v.mu.Unlock()
		v.release()
	})
	return err
}
