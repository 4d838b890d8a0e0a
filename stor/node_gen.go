package stor

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/ndma/ndma/endpoint"
)

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

func (n *Node) setGen(who endpoint.Caller, b []byte) []byte {
	var r genReq
	if err := json.Unmarshal(b, &r); err != nil || r.Gen == 0 || !slices.IsSorted(r.Members) || !slices.Contains(r.Members, n.st.id) {
		return n.refuse(CodeBadRequest, "generation: want a generation above 0 and sorted members that include this node")
	}
	v, refused := n.leasedVolume(who, r.Name, r.Holder)
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

func (n *Node) force(who endpoint.Caller, b []byte) []byte {
	var r forceReq
	if err := json.Unmarshal(b, &r); err != nil || r.Gen == 0 {
		return n.refuse(CodeBadRequest, "force: want a volume and a generation")
	}
	v, refused := n.volume(who, r.Name)
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
func (n *Node) enroll(who endpoint.Caller, b []byte) []byte {
	var r enrollReq
	if err := json.Unmarshal(b, &r); err != nil || r.Gen == 0 {
		return n.refuse(CodeBadRequest, "enroll: want a volume, a generation and a node")
	}
	v, refused := n.volume(who, r.Name)
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

// missingReq records that Node missed writes to a volume from version
// Since on (Since 0: it caught up).
type missingReq struct {
	Name  string `json:"name"`
	Node  uint16 `json:"node"`
	Since uint64 `json:"since"`
}

func (n *Node) missing(who endpoint.Caller, b []byte) []byte {
	var r missingReq
	if err := json.Unmarshal(b, &r); err != nil {
		return n.refuse(CodeBadRequest, "missing: "+err.Error())
	}
	v, refused := n.volume(who, r.Name)
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
