package kv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ndma/ndma/internal/simpool"
	"github.com/ndma/ndma/pool/ec"
)

// codedLayout is a 4+2 key space of shards of 4 KiB: rows of 16 KiB, a
// shard's buckets one row, its heap 8.
func codedLayout() Layout {
	return Layout{Shards: 4, Buckets: 64, PageBytes: 16 << 10, HeapBytes: 8 * 16 << 10, Owners: 2,
		Code: Coding{K: 4, M: 2, Shard: 4096}}
}

// codedVolume is the key space's volume as s's creator opened it.
func codedVolume(t *testing.T, s *simKV) *ec.Volume {
	t.Helper()
	_, st, err := openStore(s.Ctx(), s.reg)
	if err != nil || st.vol == nil {
		t.Fatalf("seed %d: opening the coded key space: %v (volume %v)", s.seed, err, st.vol)
	}
	return st.vol
}

// columnMems is the memory node of each column of v's region.
func columnMems(s *simKV, v *ec.Volume) []*simpool.Mem {
	k, m := v.Shards()
	mems := make([]*simpool.Mem, k+m)
	for c := range mems {
		mems[c] = s.Holder(v.Region(), int64(v.ShardAddr(0, c, 0)))
	}
	return mems
}

// codedFill sets n keys with values of 1 to max bytes drawn by rng, and
// returns them.
func codedFill(t *testing.T, s *simKV, c *Client, rng *rand.Rand, n, max int, prefix string) map[string][]byte {
	t.Helper()
	model := make(map[string][]byte)
	for i := range n {
		k := fmt.Sprintf("%s%d", prefix, i)
		v := make([]byte, 1+rng.IntN(max))
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		if _, err := c.Set(s.Ctx(), []byte(k), v); err != nil {
			t.Fatalf("seed %d: set %s: %v", s.seed, k, err)
		}
		model[k] = v
	}
	return model
}

// codedCheck reads every key of model with c and wants its value.
func codedCheck(t *testing.T, s *simKV, c *Client, model map[string][]byte, what string) {
	t.Helper()
	for k, want := range model {
		got, _, err := c.Get(s.Ctx(), []byte(k))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("seed %d: %s: get %s: %d bytes, %v (want its %d bytes)", s.seed, what, k, len(got), err, len(want))
		}
	}
}

// codedRestore restarts the memory nodes of columns cols (empty) and
// rebuilds their shards; the key space is whole again.
func codedRestore(t *testing.T, s *simKV, v *ec.Volume, mems []*simpool.Mem, cols []int) {
	t.Helper()
	for _, c := range cols {
		if err := s.StartMem(mems[c], 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cols {
		if err := v.Rebuild(s.Ctx(), c); err != nil {
			t.Fatalf("seed %d: rebuild of shard %d: %v", s.seed, c, err)
		}
	}
	if err := s.Whole(s.Endpoint()); err != nil {
		t.Fatalf("seed %d: after rebuilding shards %v: %v", s.seed, cols, err)
	}
}

// TestSimCodedLosses stores keys in a 4+2 key space and loses every set
// of one and of two of its six memory nodes in turn (6 + 15): with each,
// a fresh client and one with a warm location cache read every value
// back exactly; the nodes then restart empty and their shards are
// rebuilt. Three nodes lost are more than the code takes: every GET
// either reads its value exactly (its bytes on data shards still there)
// or fails with ec.ErrUnreadable, never another value.
func TestSimCodedLosses(t *testing.T) {
	simStore(t, 91, 6, codedLayout(), func(t *testing.T, s *simKV) {
		rng := rand.New(rand.NewPCG(91, 1))
		warm := s.client()
		model := codedFill(t, s, warm, rng, 32, 6000, "k")
		v := codedVolume(t, s)
		mems := columnMems(s, v)
		var sets [][]int
		for a := range 6 {
			sets = append(sets, []int{a})
			for b := a + 1; b < 6; b++ {
				sets = append(sets, []int{a, b})
			}
		}
		for _, lost := range sets {
			for _, c := range lost {
				s.CrashMem(mems[c])
			}
			time.Sleep(10 * time.Second) // the switch counts them dead
			what := fmt.Sprint("shards ", lost, " lost")
			codedCheck(t, s, warm, model, what)
			codedCheck(t, s, s.client(), model, what+", fresh client")
			codedRestore(t, s, v, mems, lost)
		}
		// (Column 0 holds the buckets: every shard's fit in the first
		// shard of its row.)
		for _, c := range []int{1, 3, 5} {
			s.CrashMem(mems[c])
		}
		time.Sleep(10 * time.Second)
		c := s.client()
		failed := 0
		for k, want := range model {
			got, _, err := c.Get(s.Ctx(), []byte(k))
			switch {
			case errors.Is(err, ec.ErrUnreadable):
				failed++
			case err != nil || !bytes.Equal(got, want):
				t.Fatalf("seed %d: three shards lost: get %s: %d bytes, %v (want its value or %v)", s.seed, k, len(got), err, ec.ErrUnreadable)
			}
		}
		t.Logf("seed %d: three shards lost: %d of %d keys unreadable, the others read exactly", s.seed, failed, len(model))
		if failed == 0 {
			t.Fatalf("seed %d: every key read with three shards of 4+2 lost", s.seed)
		}
	})
}

// TestSimCodedDegradedWrites writes while the memory node of a data
// shard is down (the owners write around it, counted degraded), reads
// everything back, loses a parity shard's node too and reads everything
// again (the degraded writes' parity is right), then restarts both
// nodes, rebuilds their shards with RebuildShards with the owners
// stopped (refused while one of two ranks serves) and writes without
// degradation again.
func TestSimCodedDegradedWrites(t *testing.T) {
	simStore(t, 92, 6, codedLayout(), func(t *testing.T, s *simKV) {
		rng := rand.New(rand.NewPCG(92, 1))
		c := s.client()
		model := codedFill(t, s, c, rng, 24, 6000, "k")
		v := codedVolume(t, s)
		mems := columnMems(s, v)
		s.CrashMem(mems[1])
		time.Sleep(10 * time.Second)
		for k, val := range codedFill(t, s, c, rng, 24, 6000, "k") { // overwrites
			model[k] = val
		}
		for k, val := range codedFill(t, s, c, rng, 8, 6000, "new") {
			model[k] = val
		}
		if err := c.Delete(s.Ctx(), []byte("k3")); err != nil {
			t.Fatal(err)
		}
		delete(model, "k3")
		var degraded uint64
		for _, o := range s.owners {
			degraded += o.Stats().Degraded
		}
		if degraded == 0 {
			t.Fatalf("seed %d: no write counted degraded with a data shard down", s.seed)
		}
		codedCheck(t, s, s.client(), model, "a data shard lost")
		s.CrashMem(mems[5])
		time.Sleep(10 * time.Second)
		codedCheck(t, s, s.client(), model, "a data and a parity shard lost")
		if _, _, err := s.client().Get(s.Ctx(), []byte("k3")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("seed %d: deleted key: %v", s.seed, err)
		}
		// The nodes restart empty; RebuildShards refuses while some ranks
		// serve and others not, rebuilds both shards with the owners
		// stopped, and the owners start again.
		for _, col := range []int{1, 5} {
			if err := s.StartMem(mems[col], 10*time.Second); err != nil {
				t.Fatal(err)
			}
		}
		ep := s.Endpoint()
		cfg := ClientConfig{Switch: s.Switch.String(), Fabric: s.Fab, Space: simSpace}
		s.crashOwner(0)
		time.Sleep(5 * time.Second) // the switch counts it dead
		if _, _, err := RebuildShards(s.Ctx(), ep, v.Region(), cfg); !errors.Is(err, ErrOwnersServing) {
			t.Fatalf("seed %d: rebuild with one of two owner ranks serving: %v, want %v", s.seed, err, ErrOwnersServing)
		}
		for r := range s.owners {
			s.crashOwner(r)
		}
		time.Sleep(5 * time.Second) // the switch counts them dead
		rebuilt, unreachable, err := RebuildShards(s.Ctx(), ep, v.Region(), cfg)
		if err != nil || fmt.Sprint(rebuilt) != "[1 5]" || len(unreachable) != 0 {
			t.Fatalf("seed %d: rebuild: shards %v rebuilt, %v unreachable, %v; want [1 5]", s.seed, rebuilt, unreachable, err)
		}
		if err := s.Whole(ep); err != nil {
			t.Fatalf("seed %d: after the rebuild: %v", s.seed, err)
		}
		for r := range s.owners {
			s.startOwner(r)
		}
		codedCheck(t, s, s.client(), model, "rebuilt, owners restarted")
		for k, val := range codedFill(t, s, c, rng, 8, 6000, "k") {
			model[k] = val
		}
		var after uint64
		for _, o := range s.owners { // (restarted: counting from zero)
			after += o.Stats().Degraded
		}
		if after != 0 {
			t.Fatalf("seed %d: %d writes degraded after the rebuild", s.seed, after)
		}
		codedCheck(t, s, s.client(), model, "rebuilt")
	})
}

// TestSimCodedPutBytes measures what the owner sends per PUT of large
// values into a 4+2 key space (the value once, in chains whose memory
// nodes build the parity: at most 1.05 times the value, headers
// included) and what the pool stores (1.5 times the key space).
func TestSimCodedPutBytes(t *testing.T) {
	l := Layout{Shards: 2, Buckets: 64, PageBytes: 64 << 10, HeapBytes: 8 * 64 << 10, Owners: 1,
		Code: Coding{K: 4, M: 2, Shard: DefaultShard}}
	simStore(t, 93, 6, l, func(t *testing.T, s *simKV) {
		c := s.client()
		ctx := s.Ctx()
		const n, size = 20, 60000
		val := make([]byte, size)
		// The owner's first write to each shard scrubs the shard's rows
		// (9 each: a row of buckets, 8 of heap), which is not a PUT's
		// cost: a write to each shard first.
		for i := 0; s.owners[0].Stats().Scrubbed < 18 && i < 64; i++ {
			if _, err := c.Set(ctx, fmt.Appendf(nil, "warm%d", i), []byte("w")); err != nil {
				t.Fatal(err)
			}
		}
		if got := s.owners[0].Stats().Scrubbed; got != 18 {
			t.Fatalf("seed %d: the owner scrubbed %d rows taking its two shards, want 18", s.seed, got)
		}
		before := s.oeps[0].Stats().Pool
		for i := range n {
			val[0] = byte(i)
			if _, err := c.Set(ctx, fmt.Appendf(nil, "big%d", i%8), val); err != nil {
				t.Fatal(err)
			}
		}
		after := s.oeps[0].Stats().Pool
		sent, resent := after.RequestBytes-before.RequestBytes, after.Retransmits-before.Retransmits
		per := float64(sent) / n
		t.Logf("seed %d: %d PUTs of %d bytes: the owner sent %d bytes in %d pool requests, %.0f per PUT (%.4f times the value; %d resent)",
			s.seed, n, size, sent, after.Requests-before.Requests, per, per/size, resent)
		if resent != 0 || per > 1.05*size || per < size {
			t.Fatalf("seed %d: %.0f bytes sent per PUT of %d (%d resent): want the value once, at most 1.05 times it", s.seed, per, size, resent)
		}
		v := codedVolume(t, s)
		stored := uint64(s.reg.Size())
		t.Logf("seed %d: the key space's %d bytes are stored in %d bytes of pool memory (%.3f times; two copies: 2)", s.seed, v.Size(), stored, float64(stored)/float64(v.Size()))
		if stored*4 != uint64(v.Size())*6 || uint64(v.Size()) < l.Size() {
			t.Fatalf("seed %d: %d bytes stored for a volume of %d (layout %d): want 1.5 times", s.seed, stored, v.Size(), l.Size())
		}
	})
}

// TestSimCodedTornReads rewrites one key with values of many sizes while
// readers (one with a location cache, one without) read it: every read
// is one of the values written, whole, and no reader sees versions go
// back. It runs with every node up, and again with the node of a data
// shard down (reads reconstruct from parity that degraded writes
// rewrite).
func TestSimCodedTornReads(t *testing.T) {
	l := codedLayout()
	l.HeapBytes = 32 * 16 << 10 // a page for each size class
	simStore(t, 94, 6, l, func(t *testing.T, s *simKV) {
		w := s.client()
		mems := columnMems(s, codedVolume(t, s))
		for round, down := range []bool{false, true} {
			if down {
				s.CrashMem(mems[0])
				time.Sleep(10 * time.Second)
			}
			readers := []*Client{s.client(), s.clientWith(func(cfg *ClientConfig) { cfg.CacheEntries = -1 })}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			reads := make([]int, len(readers))
			for i, r := range readers {
				wg.Go(func() { reads[i] = tornReader(t, s, r, stop) })
			}
			for i := range 60 {
				b := byte(round*60 + i)
				if _, err := w.Set(s.Ctx(), []byte("t"), tornValue(b)); err != nil {
					t.Errorf("seed %d: set %d: %v", s.seed, i, err)
					break
				}
			}
			close(stop)
			wg.Wait()
			t.Logf("seed %d: node down %v: %v reads", s.seed, down, reads)
			for i, n := range reads {
				if n < 10 {
					t.Fatalf("seed %d: reader %d read %d times", s.seed, i, n)
				}
			}
		}
	})
}

// tornValue is the value numbered b: its length and every byte tell b.
func tornValue(b byte) []byte { return bytes.Repeat([]byte{b}, 1+int(b)*47%9000) }

// tornReader reads key "t" until stop and checks each value whole; it
// returns the reads that found a value.
func tornReader(t *testing.T, s *simKV, c *Client, stop <-chan struct{}) int {
	n := 0
	var last uint64
	for {
		select {
		case <-stop:
			return n
		default:
		}
		val, ver, err := c.Get(s.Ctx(), []byte("t"))
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			t.Errorf("seed %d: get: %v", s.seed, err)
			return n
		case len(val) == 0 || !bytes.Equal(val, tornValue(val[0])):
			t.Errorf("seed %d: read a value of %d bytes that no write wrote", s.seed, len(val))
			return n
		case ver < last:
			t.Errorf("seed %d: version %d read after %d", s.seed, ver, last)
			return n
		default:
			last = ver
			n++
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// TestSimCodedRebuildWhileWriting rebuilds two lost shards of a 4+2 key
// space (a data and a parity shard, their nodes restarted empty) with
// RebuildShards while two writers keep setting keys: each owner
// rebuilds its own shards' rows, so no write between a row's reads and
// its rebuilt shard's write is lost from the rebuilt shard. Then two
// other nodes are lost, so that every read goes through the rebuilt
// shards, and every key reads back the value last acknowledged.
func TestSimCodedRebuildWhileWriting(t *testing.T) {
	simStore(t, 95, 6, codedLayout(), func(t *testing.T, s *simKV) {
		rng := rand.New(rand.NewPCG(95, 1))
		c := s.client()
		model := codedFill(t, s, c, rng, 32, 1500, "k")
		v := codedVolume(t, s)
		mems := columnMems(s, v)
		for _, col := range []int{2, 4} {
			s.CrashMem(mems[col])
		}
		time.Sleep(10 * time.Second)
		for k, val := range codedFill(t, s, c, rng, 32, 1500, "k") { // around them
			model[k] = val
		}
		for _, col := range []int{2, 4} {
			if err := s.StartMem(mems[col], 10*time.Second); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 2 {
			wc := s.client()
			wrng := rand.New(rand.NewPCG(95, uint64(10+w)))
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					k := fmt.Sprintf("k%d", w+2*wrng.IntN(16))
					val := make([]byte, 1+wrng.IntN(1500))
					for j := range val {
						val[j] = byte(wrng.Uint32())
					}
					if _, err := wc.Set(s.Ctx(), []byte(k), val); err != nil {
						t.Errorf("seed %d: writer %d: set %s: %v", s.seed, w, k, err)
						return
					}
					mu.Lock()
					model[k] = val
					mu.Unlock()
					time.Sleep(time.Duration(wrng.IntN(500)) * time.Microsecond)
				}
			})
		}
		ep := s.Endpoint()
		cfg := ClientConfig{Switch: s.Switch.String(), Fabric: s.Fab, Space: simSpace}
		writes := func() (n uint64) {
			for _, o := range s.owners {
				n += o.Stats().Writes
			}
			return n
		}
		time.Sleep(20 * time.Millisecond)
		before := writes()
		rebuilt, unreachable, err := RebuildShards(s.Ctx(), ep, v.Region(), cfg)
		during := writes() - before
		time.Sleep(20 * time.Millisecond)
		close(stop)
		wg.Wait()
		if err != nil || fmt.Sprint(rebuilt) != "[2 4]" || len(unreachable) != 0 {
			t.Fatalf("seed %d: rebuild while writing: shards %v rebuilt, %v unreachable, %v; want [2 4]", s.seed, rebuilt, unreachable, err)
		}
		var rows, deferred uint64
		for _, o := range s.owners {
			rows += o.Stats().Rebuilt
			deferred += o.Stats().RebuildsDeferred
		}
		// Each of 4 shards has a row of buckets and 8 of heap, for each
		// of the two columns.
		if rows < 2*4*9 {
			t.Fatalf("seed %d: the owners rebuilt %d rows, want at least %d", s.seed, rows, 2*4*9)
		}
		// The rebuild's requests come one after the other: an owner
		// takes the next only once it has been free as long as the last
		// one took.
		if deferred == 0 {
			t.Errorf("seed %d: no rebuild request was deferred", s.seed)
		}
		t.Logf("seed %d: %d rows rebuilt by the owners (%d requests deferred), %d writes acknowledged meanwhile", s.seed, rows, deferred, during)
		if during == 0 {
			t.Fatalf("seed %d: no write while the shards were rebuilt", s.seed)
		}
		if err := s.Whole(ep); err != nil {
			t.Fatalf("seed %d: after the rebuild: %v", s.seed, err)
		}
		codedCheck(t, s, s.client(), model, "rebuilt while writing")
		for _, col := range []int{0, 5} {
			s.CrashMem(mems[col])
		}
		time.Sleep(10 * time.Second)
		codedCheck(t, s, s.client(), model, "rebuilt while writing, two other shards lost")
	})
}

// TestSimRebuildRequestRefused sends an owner rebuild requests it must
// refuse, without touching the key space: a body of the wrong length, a
// column past K+M, rows outside the shard's own (the key space's header,
// rows straddling two shards' spans, another shard's), no rows, a column
// that serves reads (not being rebuilt), one sent while another rebuild
// runs on the owner (busy), and any rebuild in a key space that is not
// coded.
func TestSimRebuildRequestRefused(t *testing.T) {
	send := func(t *testing.T, c *Client, shard int, body []byte) error {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _, err := c.writeShard(ctx, shard, &request{op: opRebuild, val: body})
		return err
	}
	simStore(t, 96, 6, codedLayout(), func(t *testing.T, s *simKV) {
		c := s.client()
		model := codedFill(t, s, c, rand.New(rand.NewPCG(96, 1)), 8, 1000, "k")
		l := codedLayout()
		sp := l.shardSpans(1)
		row := l.Code.row()
		for _, r := range []struct {
			name string
			body []byte
		}{
			{"a short body", appendRebuild(0, sp[1][0], row)[:10]},
			{"a column past K+M", appendRebuild(l.Code.K+l.Code.M, sp[1][0], row)},
			{"the header's rows", appendRebuild(0, 0, row)},
			{"rows of two shards", appendRebuild(0, sp[1][0]+sp[1][1]-row, 2*row)},
			{"another shard's rows", appendRebuild(0, l.shardSpans(2)[1][0], row)},
			{"no rows", appendRebuild(0, sp[1][0], 0)},
			{"a column serving reads", appendRebuild(0, sp[1][0], row)},
		} {
			if err := send(t, c, 1, r.body); !errors.Is(err, ErrBadRequest) {
				t.Errorf("seed %d: %s: %v, want %v", s.seed, r.name, err, ErrBadRequest)
			}
		}
		// One rebuild at a time per owner: while one runs, another is
		// answered busy (its client sends it again until its context
		// ends), not queued on the shard's lock.
		o := s.owners[l.owner(1)]
		o.rebuilding <- struct{}{}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, _, err := c.writeShard(ctx, 1, &request{op: opRebuild, val: appendRebuild(0, sp[1][0], row)})
		cancel()
		<-o.rebuilding
		if err == nil || errors.Is(err, ErrBadRequest) {
			t.Errorf("seed %d: a rebuild request while another runs: %v, want no answer but busy", s.seed, err)
		}
		var rows uint64
		for _, o := range s.owners {
			rows += o.Stats().Rebuilt
		}
		if rows != 0 {
			t.Fatalf("seed %d: %d rows rebuilt by refused requests", s.seed, rows)
		}
		codedCheck(t, s, c, model, "after the refused rebuilds")
	})
	simStore(t, 97, 2, testLayout(), func(t *testing.T, s *simKV) {
		c := s.client()
		if err := send(t, c, 0, appendRebuild(0, testLayout().shardSpans(0)[1][0], 4096)); !errors.Is(err, ErrBadRequest) {
			t.Fatalf("seed %d: a rebuild in a key space that is not coded: %v", s.seed, err)
		}
	})
}

// TestSimCodedWrongParityReadsAsErrors: what a row whose parity no
// longer matches its data costs at worst (an owner that died in the
// middle of a write while one of the row's data shards was lost: the
// shard is then rebuilt from parity that took part of the write). Here
// every row's parity is overwritten with noise, a data shard's node
// restarts empty and the owners rebuild it from that parity: every
// bucket and value rebuilt wrong fails its checksum, so a GET of its
// key answers ErrCorrupt or ErrContended, never a value it was not
// given and never "not found"; keys wholly on the other shards read as
// written.
func TestSimCodedWrongParityReadsAsErrors(t *testing.T) {
	l := codedLayout()
	simStore(t, 97, 6, l, func(t *testing.T, s *simKV) {
		rng := rand.New(rand.NewPCG(97, 1))
		model := codedFill(t, s, s.client(), rng, 24, 3000, "k")
		v := codedVolume(t, s)
		k, m := v.Shards()
		mems := columnMems(s, v)
		noise := make([]byte, l.Code.Shard)
		for row := range uint64(v.Size()) / (uint64(k) * l.Code.Shard) {
			for col := k; col < k+m; col++ {
				for i := range noise {
					noise[i] = byte(rng.Uint32())
				}
				if _, err := s.reg.WriteAtContext(s.Ctx(), noise, int64(v.ShardAddr(row, col, 0))); err != nil {
					t.Fatalf("seed %d: row %d, parity column %d: %v", s.seed, row, col, err)
				}
			}
		}
		s.CrashMem(mems[1])
		time.Sleep(10 * time.Second)
		if err := s.StartMem(mems[1], 10*time.Second); err != nil {
			t.Fatal(err)
		}
		cfg := ClientConfig{Switch: s.Switch.String(), Fabric: s.Fab, Space: simSpace}
		rebuilt, unreachable, err := RebuildShards(s.Ctx(), s.Endpoint(), v.Region(), cfg)
		if err != nil || fmt.Sprint(rebuilt) != "[1]" || len(unreachable) != 0 {
			t.Fatalf("seed %d: rebuild: shards %v rebuilt, %v unreachable, %v; want [1]", s.seed, rebuilt, unreachable, err)
		}
		c := s.client()
		lost := 0
		for key, want := range model {
			got, _, err := c.Get(s.Ctx(), []byte(key))
			switch {
			case err == nil && !bytes.Equal(got, want):
				t.Errorf("seed %d: %s: %d bytes that are not its value", s.seed, key, len(got))
			case errors.Is(err, ErrCorrupt) || errors.Is(err, ErrContended):
				lost++
			case err != nil:
				t.Errorf("seed %d: %s: %v, want its value, ErrCorrupt or ErrContended", s.seed, key, err)
			}
		}
		t.Logf("seed %d: %d of %d keys read as errors after the shard was rebuilt from wrong parity", s.seed, lost, len(model))
		if lost == 0 || lost == len(model) {
			t.Errorf("seed %d: %d of %d keys lost: want some (on the rebuilt shard) and not all", s.seed, lost, len(model))
		}
	})
}
