package stor

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/wire"
)

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

func (n *Node) join(who endpoint.Caller, b []byte) []byte {
	var r joinReq
	if err := json.Unmarshal(b, &r); err != nil || r.Size < 2 || r.Rank < 1 || r.Rank >= r.Size || r.Job == "" {
		return n.refuse(CodeBadRequest, "join: want a job, a size of 2 or more and a rank from 1")
	}
	v, refused := n.leasedVolume(who, r.Name, r.Holder)
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
	go n.serveGroup(ctx, n.ep.NewGate(), v, r, g)
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
// the node closes. It passes gate after each wait: a flush reaches every
// group of a node at one instant, and their aggregations then go out in
// the order the groups were joined.
func (n *Node) serveGroup(ctx context.Context, gate *endpoint.Gate, v *vol, r joinReq, g *writeGroup) {
	gate.Pass()
	defer close(g.done)
	defer func() {
		v.mu.Lock()
		delete(v.live, g)
		v.mu.Unlock()
	}()
	jctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	grp, err := n.ep.JoinJob(jctx, n.cfg.Switch, r.Job, r.Size, r.Rank, n.cfg.Fabric)
	cancel()
	gate.Pass()
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
		gate.Pass()
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
			err := grp.Allreduce(ctx, sum[:], res[:], wire.DtypeI64, wire.AluAdd, endpoint.ReduceOptions{})
			gate.Pass()
			if err != nil {
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

// one serves the controller-forwarding mode's write of one replica's copy,
// or its flush: the writer (Holder) must hold the lease.
func (n *Node) one(who endpoint.Caller, b []byte) []byte {
	r, ok := parseOne(b)
	if !ok {
		return n.refuse(CodeBadRequest, "malformed")
	}
	v, refused := n.leasedVolume(who, r.Name, r.Holder)
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
