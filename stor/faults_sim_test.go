package stor

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
)

// waitHealth waits (up to a minute of virtual time) until volume name's
// health is want.
func (s *simStor) waitHealth(c *Client, name, want string) *VolumeStat {
	s.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := c.Stat(ctx, name)
		cancel()
		if err == nil && st.Health == want {
			return st
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("seed %d: volume %s not %s after a minute: %+v, %v", s.seed, name, want, st, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// fill writes one byte pattern over the whole volume, flushes and closes.
func (s *simStor) fill(c *Client, name string, size int, b byte) []byte {
	s.t.Helper()
	v, err := c.Open(s.ctx(), name, OpenOptions{Write: true})
	if err != nil {
		s.t.Fatalf("seed %d: open %s: %v", s.seed, name, err)
	}
	p := bytes.Repeat([]byte{b}, size)
	if _, err := v.WriteAt(p, 0); err != nil {
		s.t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		s.t.Fatal(err)
	}
	return p
}

// TestSimOutdatedNodeAlone: a node that missed writes while it was down,
// and comes back while every node that took them is down, serves nothing
// and takes no writer, instead of serving its old copy; when the others
// return it copies what it missed from them, and every replica ends equal
// with the acknowledged writes.
func TestSimOutdatedNodeAlone(t *testing.T) {
	simStorage(t, 3, 21, func(t *testing.T, s *simStor) {
		c := s.client()
		ctx := s.ctx()
		d, err := c.Create(ctx, VolumeSpec{Name: "t", Size: 4 * MinExtent, Extent: MinExtent, Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		s.fill(c, "t", int(d.Size), 'A')
		s.crashNode(2)
		b := s.fill(c, "t", int(d.Size), 'B') // acknowledged: flushed on nodes 0 and 1
		s.crashNode(0)
		s.crashNode(1)
		s.startNode(2)
		for {
			st := s.waitHealth(c, "t", "unavailable")
			if len(st.Nodes) != 1 || st.Nodes[0].Ready {
				t.Fatalf("node 2 alone: %+v, want it not ready", st.Nodes)
			}
			if st.Nodes[0].State == stateWaiting {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		r, err := c.Open(ctx, "t", OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, d.Size)
		if _, err := r.ReadAt(got, 0); err == nil || !errors.Is(err, ErrNoReplica) {
			t.Fatalf("read from the node that missed writes: %v (first byte %q), want ErrNoReplica", err, got[0])
		}
		if _, err := c.Open(ctx, "t", OpenOptions{Write: true}); !errors.Is(err, ErrNotCurrent) {
			t.Fatalf("writer on the node that missed writes: %v, want ErrNotCurrent", err)
		}
		s.startNode(0)
		s.startNode(1)
		s.readsBack(c, r, "t", d, b)
	})
}

// TestSimForceCurrent: an operator declares the one copy that is up
// current, accepting the loss of the writes it missed: it serves again,
// and the nodes that return take its copy instead of their newer one, so
// that the replicas agree.
func TestSimForceCurrent(t *testing.T) {
	simStorage(t, 3, 22, func(t *testing.T, s *simStor) {
		c := s.client()
		ctx := s.ctx()
		d, err := c.Create(ctx, VolumeSpec{Name: "f", Size: 2 * MinExtent, Extent: MinExtent, Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		a := s.fill(c, "f", int(d.Size), 'A')
		s.crashNode(2)
		s.fill(c, "f", int(d.Size), 'B')
		s.crashNode(0)
		s.crashNode(1)
		s.startNode(2)
		s.waitHealth(c, "f", "unavailable")
		if _, err := c.ForceCurrent(ctx, "f", 2); err != nil {
			t.Fatal(err)
		}
		s.waitHealth(c, "f", "degraded")
		r, err := c.Open(ctx, "f", OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, d.Size)
		if _, err := r.ReadAt(got, 0); err != nil || !bytes.Equal(got, a) {
			t.Fatalf("read after forcing node 2: %v, first byte %q, want %q", err, got[0], 'A')
		}
		s.startNode(0)
		s.startNode(1)
		s.waitHealth(c, "f", "healthy")
		s.checkFiles(d, &model{b: a})
	})
}

// TestSimLastReplica: a three-copy volume stays readable, and writable,
// through the writer that has it open, with two of its nodes down, also
// after one of them was resynced.
func TestSimLastReplica(t *testing.T) {
	simStorage(t, 3, 23, func(t *testing.T, s *simStor) {
		c := s.client()
		d, v, m, rng := s.writtenVolume(c, VolumeSpec{Name: "l", Size: 8 * MinExtent, Extent: MinExtent, Replicas: 3})
		if err := v.Flush(); err != nil {
			t.Fatal(err)
		}
		s.crashNode(1)
		for range 20 {
			n := 1 + rng.IntN(MinExtent)
			m.write(t, v, rng, rng.IntN(int(d.Size)-n), n)
		}
		if err := v.Flush(); err != nil {
			t.Fatal(err)
		}
		s.startNode(1)
		s.waitHealth(c, "l", "healthy")
		s.crashNode(0)
		s.crashNode(2)
		m.verify(t, v)
		for range 10 {
			n := 1 + rng.IntN(MinExtent)
			m.write(t, v, rng, rng.IntN(int(d.Size)-n), n)
		}
		if err := v.Flush(); err != nil {
			t.Fatalf("flush on the last replica: %v", err)
		}
		m.verify(t, v)
		r, err := s.client().Open(s.ctx(), "l", OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		m.verify(t, r)
		if err := v.Close(); err != nil {
			t.Fatal(err)
		}
		s.startNode(0)
		s.startNode(2)
		s.waitHealth(c, "l", "healthy")
		s.checkFiles(d, m)
	})
}

// TestSimSwitchRestartWhileOpen: the switch restarts while a writer has
// the volume open and writes: the writer forms its groups again with the
// new switch and goes on; every write it acknowledged is read back, from
// every replica.
func TestSimSwitchRestartWhileOpen(t *testing.T) {
	for _, seed := range []int64{24, 25} {
		simStorage(t, 3, seed, func(t *testing.T, s *simStor) {
			c := s.client()
			d, v, m, rng := s.writtenVolume(c, VolumeSpec{Name: "w", Size: 6 * MinExtent, Extent: MinExtent, Replicas: 2})
			if err := v.Flush(); err != nil {
				t.Fatal(err)
			}
			restarted := make(chan struct{})
			go func() {
				defer close(restarted)
				time.Sleep(time.Duration(rand.N(5000)) * time.Microsecond)
				s.srv.Close()
				time.Sleep(2 * time.Second)
				s.startSwitch()
			}()
			for i := 0; ; i++ {
				n := 1 + rng.IntN(2*MinExtent)
				m.write(t, v, rng, rng.IntN(int(d.Size)-n), n)
				if i%5 == 4 {
					if err := v.Flush(); err != nil {
						t.Fatalf("flush %d: %v", i, err)
					}
				}
				if i > 40 {
					select {
					case <-restarted:
					default:
						continue
					}
					break
				}
			}
			if err := v.Flush(); err != nil {
				t.Fatal(err)
			}
			m.verify(t, v)
			s.waitHealth(c, "w", "healthy")
			s.checkFiles(d, m)
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSimNamesWhileDown: a volume whose only node is down stays listed
// (unavailable) and its name taken; a volume removed while one of its
// nodes was down does not come back with it.
func TestSimNamesWhileDown(t *testing.T) {
	simStorage(t, 3, 26, func(t *testing.T, s *simStor) {
		c := s.client()
		ctx := s.ctx()
		solo, err := c.Create(ctx, VolumeSpec{Name: "solo", Size: MinExtent, Extent: MinExtent, Replicas: 1, Nodes: 1})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(solo.Nodes, []uint16{0}) {
			t.Fatalf("solo on nodes %v, want [0]", solo.Nodes)
		}
		s.fill(c, "solo", MinExtent, 'S')
		s.crashNode(0)
		var vs []VolumeInfo
		deadline := time.Now().Add(30 * time.Second)
		for {
			vs, err = c.List(ctx)
			if err == nil && len(vs) == 1 && vs[0].Unavailable {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("list with node 0 down: %+v, %v: want solo, unavailable", vs, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if vs[0].Name != "solo" || vs[0].Created != solo.Created {
			t.Fatalf("list: %+v", vs)
		}
		if _, err := c.Create(ctx, VolumeSpec{Name: "solo", Size: MinExtent, Extent: MinExtent, Replicas: 2}); !errors.Is(err, ErrExists) {
			t.Fatalf("create of a name whose node is down: %v, want ErrExists", err)
		}
		if _, err := c.Open(ctx, "solo", OpenOptions{}); !errors.Is(err, ErrNoReplica) {
			t.Fatalf("open of a volume whose nodes are all down: %v, want ErrNoReplica", err)
		}
		s.startNode(0)
		r, err := c.Open(ctx, "solo", OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, MinExtent)
		if _, err := r.ReadAt(got, 0); err != nil || got[0] != 'S' {
			t.Fatalf("solo after its node returned: %v, %q", err, got[0])
		}

		// Removed while node 2 is down: it does not come back with node 2.
		if _, err := c.Create(ctx, VolumeSpec{Name: "gone", Size: 3 * MinExtent, Extent: MinExtent, Replicas: 2}); err != nil {
			t.Fatal(err)
		}
		s.crashNode(2)
		if _, err := c.Remove(ctx, "gone", false); err == nil {
			t.Fatal("remove with a node down succeeded without force")
		}
		rm, err := c.Remove(ctx, "gone", true)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(rm.From, []uint16{0, 1}) || !slices.Equal(rm.Down, []uint16{2}) {
			t.Fatalf("removed from %v, down %v: want [0 1], [2]", rm.From, rm.Down)
		}
		s.startNode(2)
		vs, err = c.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			if v.Name == "gone" {
				t.Fatalf("a removed volume came back with a node that was down: %+v", v)
			}
		}
		if s.nodes[2].st.get("gone") != nil {
			t.Fatal("the node that was down keeps the removed volume's copy")
		}
		// The name is free again.
		if _, err := c.Create(ctx, VolumeSpec{Name: "gone", Size: 3 * MinExtent, Extent: MinExtent, Replicas: 3}); err != nil {
			t.Fatalf("create of a removed name: %v", err)
		}
	})
}

// waitNode waits (up to a minute of virtual time) until node id's state
// of volume name satisfies ok.
func (s *simStor) waitNode(c *Client, name string, id int, what string, ok func(NodeVolume) bool) {
	s.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := c.Stat(ctx, name)
		cancel()
		if err == nil {
			for _, nv := range st.Nodes {
				if nv.Node == id && ok(nv) {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("seed %d: node %d of volume %s not %s after a minute: %+v, %v", s.seed, id, name, what, st, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitListed waits until the switch lists exactly the nodes want of v.
func (s *simStor) waitListed(v *Volume, want ...uint16) {
	s.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ids, err := v.liveNodes(s.ctx())
		if err == nil && slices.Equal(ids, want) {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("seed %d: the switch lists nodes %v (%v), want %v", s.seed, ids, err, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSimCurrentCopiesDieTakingGeneration: the nodes holding the only
// current copies die while the writer records a new generation on them
// and on a node that missed writes. The writer must not go on with the
// outdated copy alone: a generation of it alone would outdate the copies
// that died, which hold every acknowledged write, for good (no copy
// current, the volume unavailable even once they return). When they
// return, the volume is whole again with the acknowledged writes.
func TestSimCurrentCopiesDieTakingGeneration(t *testing.T) {
	simStorage(t, 3, 27, func(t *testing.T, s *simStor) {
		c := s.client()
		ctx := s.ctx()
		d, err := c.Create(ctx, VolumeSpec{Name: "g", Size: 2 * MinExtent, Extent: MinExtent, Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		s.fill(c, "g", int(d.Size), 'A')
		s.crashNode(2)
		// A lease renewed every 30 s: the writer takes node 2 back only
		// when the test lets it.
		v, err := c.Open(ctx, "g", OpenOptions{Write: true, Lease: 90 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		b := bytes.Repeat([]byte{'B'}, int(d.Size))
		if _, err := v.WriteAt(b, 0); err != nil {
			t.Fatal(err)
		}
		if err := v.Flush(); err != nil {
			t.Fatal(err)
		}
		s.startNode(2)
		s.waitNode(c, "g", 2, "outdated", func(nv NodeVolume) bool { return nv.Outdated })

		// The writer asks the nodes up for their state, then nodes 0 and 1
		// die before it records the new generation.
		v.lockForm()
		live, err := v.liveNodes(ctx)
		if err != nil || !slices.Equal(live, []uint16{0, 1, 2}) {
			t.Fatalf("nodes up %v, %v", live, err)
		}
		_, states, err := v.leaseAll(ctx, live, v.epoch, false)
		if err != nil {
			t.Fatal(err)
		}
		s.crashNode(0)
		s.crashNode(1)
		s.waitListed(v, 2)
		err = v.genLocked(ctx, live, states)
		v.unlockForm()
		if !errors.Is(err, ErrNotCurrent) {
			t.Fatalf("generation with every current copy dead: %v (members %v), want ErrNotCurrent", err, v.genMembers)
		}

		s.startNode(0)
		s.startNode(1)
		s.waitHealth(c, "g", "healthy")
		got := make([]byte, d.Size)
		if _, err := v.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		if i := firstDiff(got, b); i >= 0 {
			t.Fatalf("byte %d reads %q, want the acknowledged %q", i, got[i], b[i])
		}
		if err := v.Close(); err != nil {
			t.Fatal(err)
		}
		s.checkFiles(d, &model{b: b})
	})
}

// TestSimWritesWaitingAtNewGeneration: writes that reached every replica
// (complete at the writer) but still wait in the write groups to be
// applied when the writer starts a new generation are applied before
// the replicas take it, not dropped with the old groups: each replica
// is a current copy of the new generation and serves reads. The nodes
// are held up in a flush's aggregation the writer has not joined, as
// when a node's part of a flush's result is lost and sent again.
func TestSimWritesWaitingAtNewGeneration(t *testing.T) {
	simStorage(t, 3, 28, func(t *testing.T, s *simStor) {
		c := s.client()
		ctx := s.ctx()
		d, err := c.Create(ctx, VolumeSpec{Name: "n", Size: 3 * MinExtent, Extent: MinExtent, Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		m := &model{b: s.fill(c, "n", int(d.Size), 'A')}
		v, err := c.Open(ctx, "n", OpenOptions{Write: true, Lease: 90 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range v.groupList() {
			if err := g.g.Multicast(ctx, []byte{opFlush}, endpoint.MulticastOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		for e := range d.Extents() {
			off := e*int(d.Extent) + 4096
			p := bytes.Repeat([]byte{'B' + byte(e)}, 4096)
			if _, err := v.WriteAt(p, int64(off)); err != nil {
				t.Fatal(err)
			}
			copy(m.b[off:], p)
		}
		// A new generation (as when a node returns): the groups are
		// formed anew.
		v.lockForm()
		v.reform = true
		err = v.formLocked(ctx)
		v.unlockForm()
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.client().Open(ctx, "n", OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Each read goes to one replica: read every block a few times.
		got := make([]byte, 4096)
		for range 4 {
			for e := range d.Extents() {
				off := e*int(d.Extent) + 4096
				if _, err := r.ReadAt(got, int64(off)); err != nil {
					t.Fatal(err)
				}
				if i := firstDiff(got, m.b[off:off+4096]); i >= 0 {
					t.Fatalf("byte %d reads %q, want the acknowledged %q", off+i, got[i], m.b[off+i])
				}
			}
		}
		if err := v.Close(); err != nil {
			t.Fatal(err)
		}
		s.checkFiles(d, m)
	})
}

// TestSimCaughtUpCopiesJoinGeneration: nodes 0 and 1 copy what they
// missed from node 2, the only member of its generation; a writer then
// writes on them without node 2. Node 2, returning while they are down,
// must not count itself current because no other member of its own
// generation is listed (the copies that caught up from it joined that
// generation on record there): it waits, serving nothing, and once they
// return it copies the writes it missed.
func TestSimCaughtUpCopiesJoinGeneration(t *testing.T) {
	simStorage(t, 3, 29, func(t *testing.T, s *simStor) {
		c := s.client()
		ctx := s.ctx()
		d, err := c.Create(ctx, VolumeSpec{Name: "c", Size: 2 * MinExtent, Extent: MinExtent, Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		s.fill(c, "c", int(d.Size), 'A')
		s.crashNode(0)
		s.crashNode(1)
		b := s.fill(c, "c", int(d.Size), 'B') // node 2 alone
		s.startNode(0)
		s.startNode(1)
		s.waitHealth(c, "c", "healthy") // 0 and 1 copied from node 2
		s.crashNode(2)
		cc := s.fill(c, "c", int(d.Size), 'C') // nodes 0 and 1, without node 2
		s.crashNode(0)
		s.crashNode(1)
		s.startNode(2)
		for {
			st := s.waitHealth(c, "c", "unavailable")
			if len(st.Nodes) != 1 || st.Nodes[0].Ready {
				t.Fatalf("node 2 alone: %+v, want it not ready (it holds %q, %q was acknowledged since)", st.Nodes, b[0], cc[0])
			}
			if st.Nodes[0].State == stateWaiting {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		r, err := c.Open(ctx, "c", OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, d.Size)
		if _, err := r.ReadAt(got, 0); !errors.Is(err, ErrNoReplica) {
			t.Fatalf("read from node 2 alone: %v (first byte %q), want ErrNoReplica", err, got[0])
		}
		s.startNode(0)
		s.startNode(1)
		s.readsBack(c, r, "c", d, cc)
	})
}

// TestSimNoWriteWithoutCrashedMember: once the writer has heard that a
// node of a write group crashed, it writes to that group no more. The
// switch would complete the write with the other members, and the
// crashed node, which the writer still counted current in its
// generation, would come back current without it. The write fails and
// is sent again in a generation without the node, which returns as an
// outdated copy and copies what it missed.
func TestSimNoWriteWithoutCrashedMember(t *testing.T) {
	simStorage(t, 3, 30, func(t *testing.T, s *simStor) {
		c := s.client()
		ctx := s.ctx()
		d, err := c.Create(ctx, VolumeSpec{Name: "x", Size: 2 * MinExtent, Extent: MinExtent, Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		m := &model{b: s.fill(c, "x", int(d.Size), 'A')}
		v, err := c.Open(ctx, "x", OpenOptions{Write: true, Lease: 90 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		gs := v.groupList()
		if len(gs) != 1 {
			t.Fatalf("%d write groups, want 1", len(gs))
		}
		rank := slices.Index(gs[0].members, 2) + 1
		s.crashNode(2)
		deadline := time.Now().Add(time.Minute)
		for gs[0].g.Gone(rank) == nil {
			if time.Now().After(deadline) {
				t.Fatal("the writer never heard that node 2 crashed")
			}
			time.Sleep(50 * time.Millisecond)
		}
		p := bytes.Repeat([]byte{'B'}, 4096)
		if _, err := v.writeOnce(context.Background(), p, 0); err == nil {
			t.Fatal("a write to a group whose member crashed completed")
		}
		if _, err := v.WriteAt(p, 0); err != nil {
			t.Fatal(err)
		}
		copy(m.b, p)
		if err := v.Flush(); err != nil {
			t.Fatal(err)
		}
		s.startNode(2)
		s.waitHealth(c, "x", "healthy")
		if err := v.Close(); err != nil {
			t.Fatal(err)
		}
		s.checkFiles(d, m)
	})
}

// TestSimReadAfterAckedWrite: a write completes at its writer once every
// replica's endpoint holds it, possibly before the replica applied it. A
// read another client starts after that must still see the write, from
// whichever replica serves it: a node serves a read only after it applied
// every write that had reached it whole when the read came.
func TestSimReadAfterAckedWrite(t *testing.T) {
	simStorage(t, 3, 4, func(t *testing.T, s *simStor) {
		ctx := s.ctx()
		d, w, m, rng := s.writtenVolume(s.client(), VolumeSpec{Name: "ack", Size: 4 * MinExtent, Extent: MinExtent, Replicas: 3})
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		r, err := s.clientAs("reader").Open(ctx, "ack", OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		for _, n := range s.nodes {
			n.applyDelay = 20 * time.Millisecond // slow disks: writes wait to be applied
		}
		buf := make([]byte, 4096)
		for i := range 12 {
			off := (i % int(d.Size/4096)) * 4096
			m.write(t, w, rng, off, len(buf))
			if _, err := r.ReadAt(buf, int64(off)); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf, m.b[off:off+len(buf)]) {
				t.Fatalf("seed %d: read %d at %d after its write completed: stale data (first difference at byte %d)",
					s.seed, len(buf), off, firstDiff(buf, m.b[off:off+len(buf)]))
			}
		}
	})
}

// TestSimAllNodesDownIsNotNoVolume: with every storage node down (the
// switch counted them dead; their service remains), a volume is not
// "no such volume", which a writer takes as final, but unreachable
// (ErrNoReplica, which it retries); once the nodes are back it is found.
func TestSimAllNodesDownIsNotNoVolume(t *testing.T) {
	simStorage(t, 3, 5, func(t *testing.T, s *simStor) {
		c := s.client()
		ctx := s.ctx()
		if _, err := c.Create(ctx, VolumeSpec{Name: "gone", Size: MinExtent, Extent: MinExtent, Replicas: 3}); err != nil {
			t.Fatal(err)
		}
		for i := range s.nodes {
			s.crashNode(i)
		}
		time.Sleep(5 * time.Second) // the switch counts them dead
		if _, err := c.Stat(ctx, "gone"); !errors.Is(err, ErrNoReplica) || errors.Is(err, ErrNoVolume) {
			t.Fatalf("seed %d: stat with every node down: %v, want ErrNoReplica", s.seed, err)
		}
		for i := range s.nodes {
			s.startNode(i)
		}
		if _, err := c.Stat(ctx, "gone"); err != nil {
			t.Fatalf("seed %d: stat with the nodes back: %v", s.seed, err)
		}
	})
}
