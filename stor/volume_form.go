package stor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/secure"
)

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
		v.c.forEach(ctx, len(live), func(ctx context.Context, i int) {
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
	v.c.forEach(ctx, len(live), func(ctx context.Context, i int) { _, _ = v.c.call(ctx, live[i], "missing", req) })
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
		v.c.forEach(ctx, len(members), func(ctx context.Context, i int) {
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
