package kv

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ndma/ndma/pool"
)

// clientWith is a client of the simulated store with its configuration
// changed by f.
func (s *simKV) clientWith(f func(*ClientConfig)) *Client {
	ep := s.Endpoint()
	cfg := ClientConfig{Switch: s.Switch.String(), Fabric: s.Fab, Space: simSpace}
	f(&cfg)
	c, err := Open(s.Ctx(), ep, s.PoolClient(ep), cfg)
	if err != nil {
		s.t.Fatalf("seed %d: open: %v", s.seed, err)
	}
	return c
}

// ownerStats sums the owners' counters that one-sided values move.
func (s *simKV) ownerStats() (st OwnerStats) {
	for _, o := range s.owners {
		if o == nil {
			continue
		}
		x := o.Stats()
		st.Reserved += x.Reserved
		st.OneSided += x.OneSided
		st.ReservationsExpired += x.ReservationsExpired
		st.Keys += x.Keys
		st.Heap.UsedSlots += x.Heap.UsedSlots
	}
	return st
}

// bigValue is n bytes that tell i apart.
func bigValue(i, n int) []byte {
	return bytes.Repeat(fmt.Appendf(nil, "<%d>", i), n)[:n]
}

// TestSimOneSided writes values from OneSidedFrom on one-sidedly, in
// key spaces of one and two copies: each reads back with the version
// Set returned, a value's expiry holds, smaller values go inline, a
// client writing values of one size class asks for one slot only (each
// publish brings the next), and once the spares' time ran out the
// owners hold a slot per key. An erasure-coded key space takes every
// value inline.
func TestSimOneSided(t *testing.T) {
	for _, copies := range []int{1, 2} {
		t.Run(fmt.Sprint(copies, " copies"), func(t *testing.T) {
			simStoreWith(t, 41, 3, testLayout(), pool.AllocOptions{Replicas: copies}, func(t *testing.T, s *simKV) {
				c := s.clientWith(func(cfg *ClientConfig) { cfg.OneSidedFrom = 256 })
				ctx := s.Ctx()
				for i := range 10 {
					val := bigValue(i, 300+15*i) // one size class
					ver, err := c.Set(ctx, []byte("big"), val)
					if err != nil {
						t.Fatalf("one-sided set %d: %v", i, err)
					}
					got, gv, err := c.Get(ctx, []byte("big"))
					if err != nil || !bytes.Equal(got, val) || gv != ver {
						t.Fatalf("get after one-sided set %d: %d bytes, version %d (want %d), %v", i, len(got), gv, ver, err)
					}
				}
				if _, err := c.Set(ctx, []byte("small"), []byte("inline")); err != nil {
					t.Fatal(err)
				}
				if _, err := c.SetWith(ctx, []byte("ttl"), bigValue(9, 1500), SetOptions{TTL: time.Second, Flags: 7}); err != nil {
					t.Fatal(err)
				}
				if got, _, err := c.Get(ctx, []byte("ttl")); err != nil || !bytes.Equal(got, bigValue(9, 1500)) {
					t.Fatalf("a one-sided value with an expiry: %d bytes, %v", len(got), err)
				}
				if cs := c.Stats(); cs.OneSided != 11 || cs.Reservations != 2 {
					t.Errorf("the client wrote %d values one-sidedly (want 11) and asked for %d slots (want 2: one per size class)", cs.OneSided, cs.Reservations)
				}
				if st := s.ownerStats(); st.Reserved != 13 || st.OneSided != 11 {
					t.Errorf("owners: %d slots reserved (want 13: 2 asked for, 11 spares), %d published (want 11)", st.Reserved, st.OneSided)
				}
				// Four writers on one client, one shard, one class: each
				// publish brings the spare the next value takes, so the
				// client asks for a slot only while it has too few.
				before := c.Stats()
				var wg sync.WaitGroup
				for w := range 4 {
					wg.Go(func() {
						for i := range 25 {
							if _, err := c.Set(ctx, []byte("big"), bigValue(100*w+i, 400)); err != nil {
								t.Errorf("writer %d: %v", w, err)
								return
							}
						}
					})
				}
				wg.Wait()
				if cs := c.Stats(); cs.OneSided-before.OneSided != 100 || cs.Reservations-before.Reservations > 4 {
					t.Errorf("4 writers: %d of 100 values one-sided, %d slots asked for (at most 4)", cs.OneSided-before.OneSided, cs.Reservations-before.Reservations)
				}
				time.Sleep(DefaultWriteTimeout + FenceMargin + 2*time.Second)
				// ("ttl" expired and was freed meanwhile.)
				if st := s.ownerStats(); st.Keys != 2 || st.Heap.UsedSlots != 2 || st.Reserved-st.OneSided != st.ReservationsExpired {
					t.Errorf("owners after the spares' time: %d keys, %d slots used (want 2, 2); %d reserved, %d published, %d expired", st.Keys, st.Heap.UsedSlots, st.Reserved, st.OneSided, st.ReservationsExpired)
				}
				if _, _, err := c.Get(ctx, []byte("ttl")); !errors.Is(err, ErrNotFound) {
					t.Errorf("the one-sided value after its expiry: %v", err)
				}
			})
		})
	}
	t.Run("coded", func(t *testing.T) {
		simStore(t, 42, 6, codedLayout(), func(t *testing.T, s *simKV) {
			c := s.clientWith(func(cfg *ClientConfig) { cfg.OneSidedFrom = 256 })
			ctx := s.Ctx()
			if _, err := c.Set(ctx, []byte("big"), bigValue(1, 1000)); err != nil {
				t.Fatal(err)
			}
			if got, _, err := c.Get(ctx, []byte("big")); err != nil || !bytes.Equal(got, bigValue(1, 1000)) {
				t.Fatalf("get: %d bytes, %v", len(got), err)
			}
			if n, st := c.Stats().OneSided, s.ownerStats(); n != 0 || st.Reserved != 0 {
				t.Errorf("coded: %d one-sided, %d reserved; want none", n, st.Reserved)
			}
		})
	})
}

// reserveFor asks key's owner for a slot for a record of n bytes, as
// Set does.
func reserveFor(s *simKV, c *Client, key string, n int) (grant, uint64, error) {
	body, ver, err := c.writeShard(s.Ctx(), c.l.place([]byte(key)).shard,
		&request{op: opReserve, key: []byte(key), val: binary.LittleEndian.AppendUint32(nil, uint32(n))})
	if err != nil {
		return grant{}, 0, err
	}
	g, err := parseGrant(body)
	return g, ver, err
}

// publishFor asks key's owner to publish reservation g, a record of
// recordLen(len(key), 300) bytes.
func publishFor(s *simKV, c *Client, key string, g grant) error {
	val := binary.LittleEndian.AppendUint64(nil, g.id)
	val = binary.LittleEndian.AppendUint32(val, uint32(recordLen(len(key), 300)))
	val = binary.LittleEndian.AppendUint64(val, 0)
	_, _, err := c.writeShard(s.Ctx(), c.l.place([]byte(key)).shard, &request{op: opPublish, key: []byte(key), val: val})
	return err
}

// TestSimOneSidedRefused checks what an owner refuses of one-sided
// values, and that no refusal loses a slot or a write: a publish after
// the reservation's time ran out, of another client's or another key's
// reservation; reservations past a client's bound; a client's write
// after the owner that reserved it lost the rank (the new holder's
// fence refuses it, and Set sends the value inline). Slots of
// reservations that end unpublished are freed. A publish of a key
// written since its reservation takes effect. Reservations are bounded
// per client and per shard.
func TestSimOneSidedRefused(t *testing.T) {
	l := testLayout()
	l.HeapBytes = 64 * l.PageBytes // room for a client's bound of reservations
	simStoreProcs(t, 43, 3, l, pool.AllocOptions{}, 2, nil, func(t *testing.T, s *simKV) {
		c := s.clientWith(func(cfg *ClientConfig) { cfg.OneSidedFrom = 256 })
		other := s.client()
		ctx := s.Ctx()
		recN := recordLen(1, 300)

		// Too late.
		ga, _, err := reserveFor(s, c, "a", recN)
		if err != nil || ga.fence.Token == 0 {
			t.Fatalf("reserve: %+v, %v", ga, err)
		}
		time.Sleep(ga.ttl + time.Millisecond)
		if err := publishFor(s, c, "a", ga); !errors.Is(err, errInline) {
			t.Errorf("a publish after the reservation's time: %v, want it refused", err)
		}
		// The key written between the reservation and the publish: the
		// publish takes effect after that write, with the version fixed
		// at the reservation (lower than the one it replaces).
		g, ver, err := reserveFor(s, c, "b", recN)
		if err != nil {
			t.Fatal(err)
		}
		other2, err := other.Set(ctx, []byte("b"), []byte("inline, between"))
		if err != nil || other2 <= ver {
			t.Fatalf("the write between: version %d (the reservation's %d), %v", other2, ver, err)
		}
		rec := appendRecord(nil, ver, meta{}, []byte("b"), bigValue(3, 300))
		if _, err := c.reg.Fenced(g.fence).WriteAtContext(ctx, rec, int64(g.addr)); err != nil {
			t.Fatal(err)
		}
		if err := publishFor(s, c, "b", g); err != nil {
			t.Fatalf("publish after a write between: %v", err)
		}
		if v, gv, err := other.Get(ctx, []byte("b")); err != nil || !bytes.Equal(v, bigValue(3, 300)) || gv != ver {
			t.Errorf("after the publish: %d bytes, version %d (want %d), %v", len(v), gv, ver, err)
		}
		// Another client's, another key's.
		if g, _, err = reserveFor(s, c, "c", recN); err != nil {
			t.Fatal(err)
		}
		if err := publishFor(s, other, "c", g); !errors.Is(err, errInline) {
			t.Errorf("another client's publish: %v", err)
		}
		// A reservation is a shard's: published under a key of another
		// shard, it is not found.
		g2, _, err := reserveFor(s, c, "c", recN)
		if err != nil {
			t.Fatal(err)
		}
		elsewhere := "d"
		for i := 0; c.l.place([]byte(elsewhere)).shard == c.l.place([]byte("c")).shard; i++ {
			elsewhere = fmt.Sprint("d", i)
		}
		if err := publishFor(s, c, elsewhere, g2); !errors.Is(err, errInline) {
			t.Errorf("a publish under a key of another shard: %v", err)
		}
		// A record of another size class than the slot's is refused.
		val := binary.LittleEndian.AppendUint64(nil, g2.id)
		val = binary.LittleEndian.AppendUint32(val, uint32(4*recN))
		val = binary.LittleEndian.AppendUint64(val, 0)
		if _, _, err := c.writeShard(ctx, c.l.place([]byte("c")).shard, &request{op: opPublish, key: []byte("c"), val: val}); !errors.Is(err, ErrBadRequest) {
			t.Errorf("a publish of a record larger than its slot: %v", err)
		}

		// A client's bound: one owner's reservations of one client.
		key := func(i int) string {
			for j := i; ; j++ {
				if k := fmt.Sprint("r", j); c.l.owner(c.l.place([]byte(k)).shard) == 0 {
					return k
				}
			}
		}
		refused := 0
		fresh := s.client()
		for i := range MaxClientReservations + 1 {
			if _, _, err := reserveFor(s, fresh, key(i*1000), recN); errors.Is(err, errInline) {
				refused++
			} else if err != nil {
				t.Fatal(err)
			}
		}
		if refused != 1 {
			t.Errorf("%d of %d reservations of one client refused, want 1", refused, MaxClientReservations+1)
		}
		// A shard's bound: reservations hold at most an eighth of its heap.
		most := int(l.HeapBytes) / reservedShare / recN
		held := 0
		for ; held <= most; held++ {
			if _, _, err := reserveFor(s, other, "x", recN); errors.Is(err, errInline) {
				break
			} else if err != nil {
				t.Fatal(err)
			}
		}
		if held == 0 || held > most {
			t.Errorf("one shard held %d reservations of %d bytes, want 1 to %d", held, recN, most)
		}
		// Every reservation ends, and every slot is freed.
		time.Sleep(g.ttl + FenceMargin + 2*time.Second)
		if st := s.ownerStats(); st.Heap.UsedSlots != st.Keys || st.ReservationsExpired < MaxClientReservations {
			t.Errorf("after the reservations' time: %d slots used for %d keys, %d expired", st.Heap.UsedSlots, st.Keys, st.ReservationsExpired)
		}

		// The owner loses its rank between the reservation and the write:
		// Set's write is refused for its fence, and the value goes inline.
		kk := key(0)
		if g, _, err = reserveFor(s, c, kk, recN); err != nil {
			t.Fatal(err)
		}
		s.crashOwner(0)
		deadline := time.Now().Add(30 * time.Second)
		for s.owners[2].Stats().FenceToken == 0 && time.Now().Before(deadline) {
			if _, err := other.Set(ctx, []byte(kk), []byte("x")); err != nil {
				time.Sleep(100 * time.Millisecond)
			}
		}
		rec = appendRecord(nil, 1, meta{}, []byte(kk), bigValue(5, 300))
		if _, err := c.reg.Fenced(g.fence).WriteAtContext(ctx, rec, int64(g.addr)); !errors.Is(err, pool.ErrFenced) {
			t.Errorf("a write of the old holder's reservation: %v, want it fenced", err)
		}
		if _, err := c.Set(ctx, []byte(kk), bigValue(6, 300)); err != nil {
			t.Fatal(err)
		}
		if v, _, err := c.Get(ctx, []byte(kk)); err != nil || !bytes.Equal(v, bigValue(6, 300)) {
			t.Errorf("after the takeover: %d bytes, %v", len(v), err)
		}
	})
}

// TestSimOneSidedUnwritten: a client publishes a slot it reserved but
// never wrote (or wrote wrong). A GET of the key does not take the
// value that fails to check for a write racing it, retrying up to
// maxTorn times: it answers ErrCorrupt once the same entry pointed at a
// bad value for corruptReads reads over corruptAfter, and a later GET
// answers it at its first read while corruptHold lasts, then checks
// again. The key reads once it is written anew.
func TestSimOneSidedUnwritten(t *testing.T) {
	simStoreWith(t, 45, 3, testLayout(), pool.AllocOptions{Replicas: 2}, func(t *testing.T, s *simKV) {
		c := s.clientWith(func(cfg *ClientConfig) { cfg.OneSidedFrom = 256 })
		reader := s.client()
		ctx := s.Ctx()
		g, _, err := reserveFor(s, c, "u", recordLen(1, 300))
		if err != nil {
			t.Fatal(err)
		}
		if err := publishFor(s, c, "u", g); err != nil {
			t.Fatalf("publish of the unwritten slot: %v", err)
		}
		get := func(what string) uint64 {
			t.Helper()
			before := reader.Stats().Reads
			if _, _, err := reader.Get(ctx, []byte("u")); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%s: %v, want ErrCorrupt", what, err)
			}
			return reader.Stats().Reads - before
		}
		// Each try reads the entry and the value (or the probe window
		// and the value): at most maxTorn/4 tries before it gives up.
		if n := get("the first GET"); n < 2*corruptReads || n > maxTorn/2 {
			t.Errorf("the first GET read %d times, want %d to %d", n, 2*corruptReads, maxTorn/2)
		}
		if n := get("the next GET"); n > 3 {
			t.Errorf("the next GET read %d times, want at most 3: the entry is known corrupt", n)
		}
		time.Sleep(corruptHold)
		if n := get("a GET after the hold"); n < 2*corruptReads {
			t.Errorf("a GET after the hold read %d times, want it to check again (at least %d)", n, 2*corruptReads)
		}
		if st := reader.Stats(); st.Corrupt != 3 {
			t.Errorf("the reader counted %d corrupt GETs, want 3", st.Corrupt)
		}
		val := bigValue(1, 300)
		if _, err := c.Set(ctx, []byte("u"), val); err != nil {
			t.Fatal(err)
		}
		if got, _, err := reader.Get(ctx, []byte("u")); err != nil || !bytes.Equal(got, val) {
			t.Errorf("after the key was written anew: %d bytes, %v", len(got), err)
		}
	})
}
