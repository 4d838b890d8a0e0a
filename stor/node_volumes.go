package stor

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/ndma/ndma/endpoint"
)

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

func (n *Node) create(who endpoint.Caller, b []byte) []byte {
	var d Descriptor
	if err := json.Unmarshal(b, &d); err != nil {
		return n.refuse(CodeBadRequest, "descriptor: "+err.Error())
	}
	if !slices.Contains(d.Nodes, n.st.id) {
		return n.refuse(CodeBadRequest, fmt.Sprintf("volume %s is not placed on node %d", d.Name, n.st.id))
	}
	if !n.may(who, d.Owner) {
		return n.deny(d.Name, d.Owner)
	}
	if v := n.st.get(d.Name); v != nil {
		if _, refused := n.volume(who, d.Name); refused != nil {
			return refused
		}
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

func (n *Node) remove(who endpoint.Caller, b []byte) []byte {
	d := dec{b: b}
	name, force := d.str(), d.u8()
	if d.bad {
		return n.refuse(CodeBadRequest, "remove: short request")
	}
	v, refused := n.volume(who, name)
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
	passGate(ctx)
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
func (n *Node) catalogAdd(who endpoint.Caller, b []byte) []byte {
	var e CatalogEntry
	if err := json.Unmarshal(b, &e); err != nil {
		return n.refuse(CodeBadRequest, "catalog: "+err.Error())
	}
	if err := e.Desc.Check(); err != nil {
		return n.refuseErr(err)
	}
	if !n.may(who, e.Desc.Owner) {
		return n.deny(e.Desc.Name, e.Desc.Owner)
	}
	if _, refused := n.volume(who, e.Desc.Name); refused != nil && refused[0] == byte(CodeDenied) {
		return refused
	}
	n.st.mu.Lock()
	defer n.st.mu.Unlock()
	if old, ok := n.st.cat.entries[e.Desc.Name]; ok && !n.may(who, old.Desc.Owner) {
		return n.deny(e.Desc.Name, old.Desc.Owner)
	}
	if v := n.st.vols[e.Desc.Name]; v != nil && e.Removed == 0 && v.meta.Desc.Created != e.Desc.Created {
		return n.refuse(CodeExists, fmt.Sprintf("%s: this node holds another volume of that name", e.Desc.Name))
	}
	if _, err := n.st.cat.add(e, time.Now()); err != nil {
		return n.refuseErr(err)
	}
	return []byte{byte(CodeOK)}
}

func (n *Node) listVols(who endpoint.Caller) []byte {
	var ds []Descriptor
	for _, v := range n.st.list() {
		v.mu.Lock()
		if n.may(who, v.meta.Desc.Owner) {
			ds = append(ds, v.meta.Desc)
		}
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

func (n *Node) stat(who endpoint.Caller, b []byte) []byte {
	d := dec{b: b}
	name := d.str()
	v, refused := n.volume(who, name)
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
