package stor

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/ndma/ndma/endpoint"
)

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

func (n *Node) lease(who endpoint.Caller, b []byte) []byte {
	var r leaseReq
	if err := json.Unmarshal(b, &r); err != nil || r.Holder == 0 || r.TTLMs <= 0 || time.Duration(r.TTLMs)*time.Millisecond > MaxLease {
		return n.refuse(CodeBadRequest, "lease: want a holder and a TTL up to "+MaxLease.String())
	}
	v, refused := n.volume(who, r.Name)
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
