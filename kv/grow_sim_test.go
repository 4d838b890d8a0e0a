package kv

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ndma/ndma/pool"
)

// growLayout starts each shard's table at 8 buckets and lets it grow to
// 64 (three growths).
func growLayout() Layout {
	return Layout{Shards: 2, Buckets: 8, MaxBuckets: 64, PageBytes: 4096, HeapBytes: 8 * 4096, Owners: 1}
}

// TestSimTableGrows inserts keys far past the tables' first buckets
// while readers read every acknowledged key all along, on a key space
// with one copy, one with two, and an erasure-coded one. A read must
// find each key it was told of, with the version acknowledged before
// the read began or a newer one (never an older value, never absent),
// and at the end every key reads back exactly, in tables that grew.
func TestSimTableGrows(t *testing.T) {
	smallGrowChunks(t)
	t.Run("plain", func(t *testing.T) {
		simStore(t, 61, 2, growLayout(), func(t *testing.T, s *simKV) { growWithReaders(t, s, 80) })
	})
	t.Run("copies", func(t *testing.T) {
		simStoreWith(t, 62, 3, growLayout(), pool.AllocOptions{Replicas: 2}, func(t *testing.T, s *simKV) { growWithReaders(t, s, 80) })
	})
	t.Run("coded", func(t *testing.T) {
		l := growLayout()
		l.HeapBytes, l.Code = 4*4096, Coding{K: 4, M: 2, Shard: 4096}
		simStore(t, 63, 6, l, func(t *testing.T, s *simKV) { growWithReaders(t, s, 80) })
	})
}

// smallGrowChunks makes bigger tables be written 4 buckets at a time
// during t, so that writes fall between the chunks of a growth.
func smallGrowChunks(t *testing.T) {
	saved := growChunk
	growChunk = 4
	t.Cleanup(func() { growChunk = saved })
}

// ackedKV is what the writer was told: each key's last acknowledged
// value and version.
type ackedKV struct {
	mu   sync.Mutex
	val  map[string]string
	ver  map[string]uint64
	keys []string
}

func (a *ackedKV) put(k, v string, ver uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.val[k]; !ok {
		a.keys = append(a.keys, k)
	}
	a.val[k], a.ver[k] = v, ver
}

func (a *ackedKV) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.keys)
}

// pick returns the i-th key known (mod their number) and its
// acknowledged value and version.
func (a *ackedKV) pick(i int) (k, v string, ver uint64, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.keys) == 0 {
		return "", "", 0, false
	}
	k = a.keys[i%len(a.keys)]
	return k, a.val[k], a.ver[k], true
}

// growWithReaders sets n keys (and overwrites every third one set
// before) while two readers, one with a location cache and one without,
// check every acknowledged key; then it checks them all and that the
// tables grew.
func growWithReaders(t *testing.T, s *simKV, n int) {
	ctx := s.Ctx()
	c := s.client()
	a := &ackedKV{val: map[string]string{}, ver: map[string]uint64{}}
	set := func(k, v string) {
		t.Helper()
		ver, err := c.Set(ctx, []byte(k), []byte(v))
		if err != nil {
			t.Fatalf("seed %d: set %s: %v", s.seed, k, err)
		}
		a.put(k, v, ver)
	}
	stop := startReaders(t, s, a, 0)
	for i := range n {
		set(fmt.Sprint("key", i), fmt.Sprintf("value %d", i))
		if i%3 == 2 {
			j := i / 2
			set(fmt.Sprint("key", j), fmt.Sprintf("value %d, again at %d", j, i))
		}
	}
	reads := stop()
	checkAcked(t, s, c, a)
	var st OwnerStats
	for _, o := range s.owners {
		ost := o.Stats()
		st.Growths, st.Buckets, st.Keys = st.Growths+ost.Growths, st.Buckets+ost.Buckets, st.Keys+ost.Keys
	}
	if st.Keys != n || st.Growths < 4 || st.Buckets <= s.layout.Shards*s.layout.Buckets*4 {
		t.Fatalf("seed %d: %d keys in %d buckets after %d growths; want %d keys, tables grown", s.seed, st.Keys, st.Buckets, st.Growths, n)
	}
	t.Logf("seed %d: %d keys in %d buckets after %d growths; %v reads during them", s.seed, st.Keys, st.Buckets, st.Growths, reads)
}

// tableGens reads each shard's table descriptor: the generation of the
// table in use (-1: unreadable).
func (s *simKV) tableGens(t *testing.T) []int {
	t.Helper()
	_, st, err := openStore(s.Ctx(), s.reg)
	gens := make([]int, s.layout.Shards)
	for sh := range gens {
		var p [BucketBytes]byte
		var d tableDesc
		if err == nil {
			if err = st.readAt(s.Ctx(), p[:], s.layout.descAddr(sh)); err == nil {
				d, err = s.layout.parseDesc(p[:])
			}
		}
		if gens[sh] = d.gen; err != nil {
			gens[sh] = -1
		}
	}
	return gens
}

// startReaders starts two readers, one with a location cache and one
// without, reading the keys of a in turn: each must find the key with
// the version acknowledged before its read began or a newer one. stop
// ends them and returns how many keys each read; it fails the test if
// either read none. Each reader sleeps pause after each read (a
// test that waits for a takeover spares the CPU that way).
func startReaders(t *testing.T, s *simKV, a *ackedKV, pause time.Duration) (stop func() []int) {
	ctx := s.Ctx()
	done := make(chan struct{})
	var wg sync.WaitGroup
	reads := make([]int, 2)
	for r := range 2 {
		rc := s.client()
		if r == 1 {
			ep := s.Endpoint()
			var err error
			if rc, err = Open(ctx, ep, s.PoolClient(ep), ClientConfig{Switch: s.Switch.String(), Fabric: s.Fab, Space: simSpace, CacheEntries: -1}); err != nil {
				t.Fatal(err)
			}
		}
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				k, v, ver, ok := a.pick(i)
				if !ok {
					time.Sleep(time.Millisecond)
					continue
				}
				got, gver, err := rc.Get(ctx, []byte(k))
				if err != nil || gver < ver || (gver == ver && string(got) != v) {
					t.Errorf("seed %d: reader %d: %s = %q version %d, %v; acknowledged before the read: %q version %d", s.seed, r, k, got, gver, err, v, ver)
					return
				}
				reads[r]++
				if pause > 0 {
					time.Sleep(pause)
				}
			}
		})
	}
	return func() []int {
		close(done)
		wg.Wait()
		if reads[0] == 0 || reads[1] == 0 {
			t.Fatalf("seed %d: the readers read %v keys", s.seed, reads)
		}
		return reads
	}
}

// checkAcked reads every acknowledged key back: its value and version.
func checkAcked(t *testing.T, s *simKV, c *Client, a *ackedKV) {
	t.Helper()
	// (Not under a.mu while reading: readers wait on it, and a bubble
	// whose goroutines wait on a mutex never moves its clock on.)
	for i := range a.count() {
		k, v, wver, _ := a.pick(i)
		got, ver, err := c.Get(s.Ctx(), []byte(k))
		if err != nil || string(got) != v || ver != wver {
			t.Fatalf("seed %d: %s = %q version %d, %v; want %q version %d", s.seed, k, got, ver, err, v, wver)
		}
	}
}

// TestSimTableFull fills a shard's table to its largest: the next new
// key is refused as full, and the others still read back. With GrowAt
// 1 the table grows only when full, within the write of the key that
// found it so.
func TestSimTableFull(t *testing.T) {
	l := Layout{Shards: 1, Buckets: 8, MaxBuckets: 32, PageBytes: 4096, HeapBytes: 8 * 4096, Owners: 1}
	for i, at := range []float64{0, 1} {
		t.Run(fmt.Sprint("grow at ", at), func(t *testing.T) {
			saved := simGrowAt
			simGrowAt = at
			defer func() { simGrowAt = saved }()
			simStore(t, 64+int64(10*i), 2, l, func(t *testing.T, s *simKV) { fillTable(t, s, at == 1) })
		})
	}
}

// fillTable sets keys until the only shard's table is at its largest
// and full; whenFull: each growth must come when the table is full.
func fillTable(t *testing.T, s *simKV, whenFull bool) {
	c := s.client()
	a := &ackedKV{val: map[string]string{}, ver: map[string]uint64{}}
	for i := range 32 {
		k := fmt.Sprint("key", i)
		before := s.owners[0].Stats()
		ver, err := c.Set(s.Ctx(), []byte(k), []byte(k))
		if err != nil {
			t.Fatalf("set %s: %v", k, err)
		}
		a.put(k, k, ver)
		if after := s.owners[0].Stats(); whenFull && after.Buckets != before.Buckets && before.Keys != before.Buckets {
			t.Fatalf("the table grew from %d buckets with %d keys: GrowAt 1 grows only full tables", before.Buckets, before.Keys)
		}
	}
	if _, err := c.Set(s.Ctx(), []byte("one more"), []byte("x")); !errors.Is(err, ErrFull) {
		t.Fatalf("a key past the largest table: %v, want ErrFull", err)
	}
	if st := s.owners[0].Stats(); st.Buckets != 32 || st.Keys != 32 || st.Growths != 2 {
		t.Fatalf("owner: %+v", st)
	}
	checkAcked(t, s, c, a)
}

// TestSimOwnerCrashWhileGrowing pauses the holder of a rank as it is
// about to switch a shard to its bigger table (the table written, the
// descriptor not yet) and cuts it off: the standby takes the rank over,
// loads the table in use, builds the bigger one again and switches to
// it. Then the paused holder's switch goes out, and is refused for its
// fence (else the descriptor would name a table since written over
// under another tag). Readers check every acknowledged key all along,
// and every key reads back after each step.
func TestSimOwnerCrashWhileGrowing(t *testing.T) {
	l := Layout{Shards: 1, Buckets: 8, MaxBuckets: 64, PageBytes: 4096, HeapBytes: 8 * 4096, Owners: 1}
	simStoreProcs(t, 65, 3, l, pool.AllocOptions{}, 2, nil, func(t *testing.T, s *simKV) {
		ctx := s.Ctx()
		c := s.client()
		a := &ackedKV{val: map[string]string{}, ver: map[string]uint64{}}
		set := func(k, v string) {
			t.Helper()
			ver, err := c.Set(ctx, []byte(k), []byte(v))
			if err != nil {
				t.Fatalf("set %s: %v", k, err)
			}
			a.put(k, v, ver)
		}
		for i := range 6 { // 6 of 8 buckets: at the load, not past it
			set(fmt.Sprint("key", i), "first")
		}
		stop := startReaders(t, s, a, 5*time.Millisecond) // all along
		h, sb := 0, 1
		if !s.owners[h].Stats().Serving {
			h, sb = 1, 0
		}
		old := s.owners[h]
		paused, release := make(chan struct{}), make(chan struct{})
		armed := true
		setBeforeWrite(old, func(ctx context.Context, off uint64, n int) context.Context {
			if !armed || off != l.descAddr(0) {
				return ctx
			}
			armed = false
			close(paused)
			<-release
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			s.T.Cleanup(cancel)
			return ctx
		})
		// The 7th key passes the load: its write is applied, then the
		// owner builds the bigger table (before it answers) and pauses
		// at the switch. The write's client hears of another owner: the
		// outcome is unknown to it, but the key was written.
		setDone := make(chan error, 1)
		go func() {
			_, err := s.client().Set(ctx, []byte("key6"), []byte("first"))
			setDone <- err
		}()
		<-paused
		s.SetLoss(s.oeps[h].LocalAddr(), 1)
		for deadline := time.Now().Add(20 * time.Second); !s.owners[sb].Stats().Serving; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the standby did not take the rank over")
			}
		}
		checkAcked(t, s, c, a)
		if err := <-setDone; err != nil && !errors.Is(err, ErrUnknownOutcome) {
			t.Fatalf("the write that started the growth: %v", err)
		}
		if v, ver, err := c.Get(ctx, []byte("key6")); err != nil || string(v) != "first" {
			t.Fatalf("the key whose write started the growth: %q, %v", v, err)
		} else {
			a.put("key6", "first", ver)
		}
		for i := range 7 {
			set(fmt.Sprint("key", i), "second")
		}
		set("key7", "second") // past the load again: the standby grows the table
		if st := s.owners[sb].Stats(); st.Growths != 1 || st.Buckets != 16 {
			t.Fatalf("the new holder did not grow the table: %+v", st)
		}
		checkAcked(t, s, c, a)
		s.SetLoss(s.oeps[h].LocalAddr(), 0)
		close(release)
		for deadline := time.Now().Add(10 * time.Second); old.Stats().Fenced == 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the paused holder's switch was not refused for its fence: %+v", old.Stats())
			}
		}
		time.Sleep(time.Second)
		checkAcked(t, s, c, a)
		for i := 8; i < 40; i++ { // and on to the largest table
			set(fmt.Sprint("key", i), "third")
		}
		stop()
		checkAcked(t, s, c, a)
		if st := s.owners[sb].Stats(); st.Buckets != 64 || st.Keys != 40 {
			t.Fatalf("the new holder: %+v", st)
		}
	})
}

// TestSimTables checks Client.Tables against the owner's counts, on a
// key space whose tables grew and one whose tables do not grow.
func TestSimTables(t *testing.T) {
	for i, l := range []Layout{growLayout(), testLayout()} {
		simStore(t, 66+int64(i), 2, l, func(t *testing.T, s *simKV) {
			c := s.client()
			for k := range 30 {
				if _, err := c.Set(s.Ctx(), fmt.Appendf(nil, "key%d", k), []byte("v")); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Delete(s.Ctx(), []byte("key3")); err != nil {
				t.Fatal(err)
			}
			tabs, err := c.Tables(s.Ctx())
			if err != nil {
				t.Fatal(err)
			}
			var keys, buckets, deleted, grown int
			for _, tb := range tabs {
				keys, buckets, deleted = keys+tb.Keys, buckets+tb.Buckets, deleted+tb.Deleted
				grown += tb.Generation
				if tb.MaxBuckets != max(l.MaxBuckets, l.Buckets) || tb.Buckets != l.Buckets<<tb.Generation {
					t.Errorf("%+v", tb)
				}
			}
			var st OwnerStats
			for _, o := range s.owners {
				ost := o.Stats()
				st.Keys, st.Buckets = st.Keys+ost.Keys, st.Buckets+ost.Buckets
			}
			if keys != 29 || deleted != 1 || keys != st.Keys || buckets != st.Buckets || (grown > 0) != l.growable() {
				t.Fatalf("tables %+v; owners' keys %d, buckets %d", tabs, st.Keys, st.Buckets)
			}
		})
	}
}
