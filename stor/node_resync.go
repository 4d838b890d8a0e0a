package stor

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ndma/ndma/endpoint"
)

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
	gate := n.ep.NewGate()
	go func() {
		defer n.wg.Done()
		gate.Pass()
		err := n.resync(gate, v, grouped)
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
//
// Its goroutine passes gate after each wait (passGate).
func (n *Node) resync(gate *endpoint.Gate, v *vol, grouped bool) error {
	ctx, cancel := context.WithTimeout(context.WithValue(n.ctx, gateKey{}, gate), time.Minute)
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
	peers, leased, maxGen, newer := n.resyncPeers(ctx, d, gen)
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
	from, err := n.resyncSources(v, peers, gen, members, outdated)
	if err != nil {
		return err
	}
	jobs, err := n.resyncPlan(v, d, peers, from, outdated)
	if err != nil {
		return err
	}
	if err := n.resyncCopy(ctx, v, jobs, outdated); err != nil {
		return err
	}
	var top *NodeVolume // an outdated copy's source of the latest generation
	if outdated {
		if top, err = n.resyncAdopt(ctx, v, d, peers, from); err != nil {
			return err
		}
	}
	return n.resyncFinish(ctx, v, d, peers, jobs, top, outdated)
}

// resyncPeer is what resync learned of another node's copy: its state
// and its extents' versions.
type resyncPeer struct {
	nv NodeVolume
	vs []uint64
}

// resyncPeers asks every other node of volume d for its state and its
// extents' versions (those that do not answer, or hold another volume of
// the name, are left out), and reports whether a writer writes, the
// latest generation of a node it leases, and the node of the latest
// generation later than gen that does not list this one, if any.
func (n *Node) resyncPeers(ctx context.Context, d Descriptor, gen uint64) (map[uint16]*resyncPeer, bool, uint64, *NodeVolume) {
	peers := map[uint16]*resyncPeer{}
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
		peers[p] = &resyncPeer{nv: nv, vs: vs}
	}
	return peers, leased, maxGen, newer
}

// resyncSources returns the peers resync copies from, in order of id, or
// why the copy cannot tell yet whether it is current.
func (n *Node) resyncSources(v *vol, peers map[uint16]*resyncPeer, gen uint64, members []uint16, outdated bool) ([]uint16, error) {
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
			return nil, fmt.Errorf("nodes %v of generation %d are down: this copy may have missed writes they took", missing, gen)
		}
		for p, pr := range peers {
			if !pr.nv.Outdated {
				from = append(from, p)
			}
		}
	}
	slices.Sort(from)
	return from, nil
}

// resyncJob is an extent resync copies.
type resyncJob struct {
	e    int
	from []uint16 // replicas to copy from, the newest first
}

// resyncPlan decides which extents of v resync copies, and from whom,
// and marks them stale: an outdated copy takes every extent it holds, a
// current one those a source holds in a newer version.
func (n *Node) resyncPlan(v *vol, d Descriptor, peers map[uint16]*resyncPeer, from []uint16, outdated bool) ([]resyncJob, error) {
	var jobs []resyncJob
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
			jobs = append(jobs, resyncJob{e, src})
			todo = append(todo, e)
		}
	}
	if len(lacking) > 0 {
		v.setState(stateOutdated, nil)
		v.mu.Unlock()
		return nil, fmt.Errorf("outdated, and no current replica of extents %v answers to copy from", lacking)
	}
	if len(jobs) > 0 {
		v.setState(stateResyncing, nil)
	}
	err := v.markStale(todo)
	v.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return jobs, nil
}

// resyncCopy copies each job's extent from the first of its sources that
// answers.
func (n *Node) resyncCopy(ctx context.Context, v *vol, jobs []resyncJob, outdated bool) error {
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
	return nil
}

// resyncAdopt returns the source of the latest generation an outdated
// copy copied from, and if that generation is later than the copy's,
// enrolls the copy in it at the source (its Members become the source's
// answer).
func (n *Node) resyncAdopt(ctx context.Context, v *vol, d Descriptor, peers map[uint16]*resyncPeer, from []uint16) (*NodeVolume, error) {
	top := &peers[from[0]].nv
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
			return nil, fmt.Errorf("joining generation %d at node %d: %w", top.Gen, top.Node, err)
		}
		top.Members = ms
	}
	return top, nil
}

// resyncFinish makes v current once its extents are copied (of top's
// generation, for an outdated copy) and ready, unless a writer took the
// lease or left this node out meanwhile, and tells the other replicas.
func (n *Node) resyncFinish(ctx context.Context, v *vol, d Descriptor, peers map[uint16]*resyncPeer, jobs []resyncJob, top *NodeVolume, outdated bool) error {
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
