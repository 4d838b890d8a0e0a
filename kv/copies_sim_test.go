package kv

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/wire/ctrl"
)

// bucketAddr is the region address of key's bucket in o's shard.
func bucketAddr(o *Owner, key string) uint64 {
	p := o.l.place([]byte(key))
	sh := o.shards[p.shard-o.lo]
	sh.lock <- struct{}{}
	defer func() { <-sh.lock }()
	i, ok := sh.idx[key]
	if !ok {
		panic("bucketAddr: no key " + key)
	}
	return o.l.tableAddr(sh.id, sh.tab.gen, i)
}

// TestSimCopiesAgreeAfterTakeover opens the gap between the fence and a
// key space's two copies: the old holder's bucket write passes the
// switch before the new holder's raise, reaches one copy before the
// raise and the other after it. The second copy refuses it; the first
// applied it. The new holder reads the shard from the copy readers read
// (the one that refused) and must make the other agree, also when no
// write reaches the shard after the takeover: otherwise,
// when that copy's node drops out, readers see the never-acknowledged
// value, and see it vanish again when the node is back (a value
// flipping back is no linearizable history).
func TestSimCopiesAgreeAfterTakeover(t *testing.T) {
	l := Layout{Shards: 2, Buckets: 64, PageBytes: 4096, HeapBytes: 8 * 4096, Owners: 1}
	simStoreProcs(t, 33, 3, l, pool.AllocOptions{Replicas: 2}, 2, nil, func(t *testing.T, s *simKV) {
		ctx := s.Ctx()
		c := s.client()
		val := func(round int) string { return fmt.Sprintf("%-40.40s", fmt.Sprintf("round %d", round)) }
		if _, err := c.Set(ctx, []byte("key"), []byte(val(1))); err != nil {
			t.Fatal(err)
		}
		h, sb := 0, 1
		if !s.owners[h].Stats().Serving {
			h, sb = 1, 0
		}
		old := s.owners[h]
		addr := bucketAddr(old, "key")
		read := s.Holder(s.reg, int64(addr)) // the node of the copy reads go to

		// The old holder's bucket write: held on the link to the read
		// copy's node, delivered at once to the other copy's.
		held := s.Link
		held.Latency = 10 * time.Second
		sent := make(chan struct{})
		armed := true
		setBeforeWrite(old, func(ctx context.Context, off uint64, n int) context.Context {
			if armed && off == addr && n == BucketBytes {
				armed = false
				s.Net.Locked(func() { s.Net.SetLink(read.Addr, s.Link, held) })
				close(sent)
			}
			return ctx
		})
		sctx, cancel := context.WithCancel(ctx)
		staleDone := make(chan error, 1)
		go func() {
			_, err := s.client().Set(sctx, []byte("key"), []byte(val(9)))
			staleDone <- err
		}()
		<-sent
		time.Sleep(time.Millisecond) // the write is on its way
		s.SetLoss(s.oeps[h].LocalAddr(), 1)
		s.Net.Locked(func() { s.Net.SetLink(read.Addr, s.Link, s.Link) })
		cancel()
		if err := <-staleDone; err == nil {
			t.Fatal("the stale write was acknowledged")
		}
		for deadline := time.Now().Add(20 * time.Second); !s.owners[sb].Stats().Serving; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the standby did not take the rank over")
			}
		}
		// A write to the other shard makes the new holder raise its
		// fence. No write reaches the key's shard: the new holder reads
		// it (and makes its copies agree) at its next sweep.
		other := ""
		for i := 0; other == ""; i++ {
			if k := fmt.Sprint("other", i); old.l.place([]byte(k)).shard != old.l.place([]byte("key")).shard {
				other = k
			}
		}
		if _, err := c.Set(ctx, []byte(other), []byte(val(2))); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second) // the held datagram reaches its node
		if st := s.owners[sb].Stats(); st.Resynced == 0 {
			t.Errorf("the new holder wrote nothing back: %+v", st)
		}
		if n := read.Node.Stats().Server.Pool.Refused; n == 0 {
			t.Fatal("the read copy's node refused no write: the stale write did not straddle the raise")
		}
		get := func(when string) string {
			t.Helper()
			got, _, err := c.Get(ctx, []byte("key"))
			if err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			return string(got)
		}
		if got := get("both copies up"); got != val(1) {
			t.Fatalf("both copies up: %q, want %q", got, val(1))
		}
		s.SetLoss(read.Addr, 1)
		time.Sleep(5 * time.Second) // the switch counts the node dead: reads go to the other copy
		cut := get("the read copy's node cut")
		s.SetLoss(read.Addr, 0)
		time.Sleep(5 * time.Second)
		back := get("the node back")
		if cut != val(1) || back != val(1) {
			t.Errorf("the copies disagree: %q with the read copy's node cut, %q with it back; want %q", cut, back, val(1))
		}
		checkCopiesAgree(t, s) // the Jepsen runs' last check catches it too
	})
}

// liveSpans reads, through the switch, every span of the key space that
// readers read: each shard's descriptor, its current table and the
// values its live buckets point to, by address.
func liveSpans(ctx context.Context, s *simKV) (map[uint64][]byte, error) {
	_, st, err := openStore(ctx, s.reg)
	if err != nil {
		return nil, err
	}
	l := s.layout
	spans := make(map[uint64][]byte)
	read := func(off uint64, n int) ([]byte, error) {
		p := make([]byte, n)
		if err := st.readAt(ctx, p, off); err != nil {
			return nil, fmt.Errorf("reading %d bytes at %d: %w", n, off, err)
		}
		spans[off] = p
		return p, nil
	}
	for sh := range l.Shards {
		var d tableDesc
		if l.growable() {
			p, err := read(l.descAddr(sh), BucketBytes)
			if err != nil {
				return nil, err
			}
			if d, err = l.parseDesc(p); err != nil {
				return nil, fmt.Errorf("shard %d: %w", sh, err)
			}
		}
		n := l.tableBuckets(d.gen)
		tab, err := read(l.tableAddr(sh, d.gen, 0), n*BucketBytes)
		if err != nil {
			return nil, err
		}
		for j := range n {
			b, err := parseBucketTag(tab[j*BucketBytes:], d.tag)
			if err != nil || !b.live() {
				continue // compared as bytes with the table
			}
			if _, err := read(b.addr, int(b.len)); err != nil {
				return nil, err
			}
		}
	}
	return spans, nil
}

// checkCopiesAgree checks that both copies of a two-copy key space hold
// the same bytes wherever readers read, its owners stopped: it reads the
// live spans with every node up (from the copies reads go to), then
// again with each memory node in turn cut off (the spans whose first
// copy is on that node are read from their second), and compares.
func checkCopiesAgree(t *testing.T, s *simKV) {
	t.Helper()
	for r := range s.owners {
		s.crashOwner(r) // no write from here on
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stat := s.Endpoint()
	defer stat.Close()
	ref, err := liveSpans(ctx, s)
	if err != nil {
		t.Errorf("seed %d: reading the key space: %v", s.seed, err)
		return
	}
	addrs := slices.Sorted(maps.Keys(ref))
	waitFor := func(what string, ok func(endpoint.PoolState) bool) bool {
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			c, cancel := context.WithTimeout(ctx, time.Second)
			ps, err := stat.PoolStat(c, s.Switch.String(), s.Fab)
			cancel()
			if err == nil && len(ps.Regions) == 1 && ok(ps) {
				return true
			}
		}
		c, cancel := context.WithTimeout(ctx, time.Second)
		ps, err := stat.PoolStat(c, s.Switch.String(), s.Fab)
		cancel()
		t.Errorf("seed %d: the key space never %s: %+v %v", s.seed, what, ps, err)
		return false
	}
	for i, m := range s.Mems {
		s.SetLoss(m.Addr, 1)
		holds := false
		if !waitFor(fmt.Sprint("counted memory node ", i, " dead"), func(ps endpoint.PoolState) bool {
			holds = ps.Regions[0].Down > 0
			return slices.ContainsFunc(ps.Nodes, func(n ctrl.PoolNodeInfo) bool { return n.Addr == m.Addr && !n.Alive })
		}) {
			return
		}
		for _, a := range addrs {
			if !holds {
				break // the node holds no column of the key space
			}
			got := make([]byte, len(ref[a]))
			if _, err := s.reg.ReadAtContext(ctx, got, int64(a)); err != nil {
				t.Errorf("seed %d: memory node %d cut off: reading %d bytes at %d: %v", s.seed, i, len(got), a, err)
			} else if !bytes.Equal(got, ref[a]) {
				t.Errorf("seed %d: the copies disagree at %d (%d bytes): memory node %d cut off, reads find other bytes", s.seed, a, len(got), i)
			}
		}
		s.SetLoss(m.Addr, 0)
		if !waitFor("came back whole", func(ps endpoint.PoolState) bool {
			return ps.Regions[0].Down == 0 && ps.Regions[0].Health == ctrl.HealthOK
		}) {
			return
		}
	}
}
