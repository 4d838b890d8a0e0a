package stor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ndma/ndma/endpoint"
)

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
	v.c.forEach(ctx, len(ids), func(ctx context.Context, i int) {
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
	defer passGate(ctx)
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
// switch forgot a group (it restarted). It passes gate after each wait
// (passGate).
func (v *Volume) renew(gate *endpoint.Gate) {
	defer close(v.done)
	t := time.NewTicker(v.ttl / 3)
	defer t.Stop()
	gctx := context.WithValue(context.Background(), gateKey{}, gate)
	for {
		select {
		case <-v.stop:
			return
		case <-t.C:
		}
		gate.Pass()
		ctx, cancel := context.WithTimeout(gctx, v.ttl/3)
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
			gate.Pass()
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
