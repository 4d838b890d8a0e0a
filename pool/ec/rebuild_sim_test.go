package ec_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ndma/ndma/internal/simpool"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/pool/ec"
	"github.com/ndma/ndma/wire"
)

// TestSimDegradedWriteAndRebuild writes a 4+2 volume with the memory
// node of a data shard crashed (the writes go around it, reported
// degraded), reads everything back, restarts that node with empty
// memory and rebuilds its shard, checks every row's parity and the
// region whole again, and reads everything back with two other nodes
// crashed (the rebuilt shard among those read).
func TestSimDegradedWriteAndRebuild(t *testing.T) {
	const seed, shard, rows = 81, 4096, 8
	synctest.Test(t, func(t *testing.T) {
		t.Logf("seed %d", seed)
		rng := rand.New(rand.NewPCG(seed, 3))
		f := ecFabric(t, seed)
		defer f.Close()
		ctx := f.Ctx()
		ep := f.Endpoint()
		v, err := ec.Create(ctx, f.PoolClient(ep), k, m, shard, rows*k*shard)
		if err != nil {
			t.Fatal(err)
		}
		model := make([]byte, v.Size())
		write := func(off, n int, wantDegraded bool) {
			t.Helper()
			p := randBytes(rng, n)
			err := v.WriteAt(ctx, p, int64(off))
			if degraded := errors.Is(err, pool.ErrDegraded); (err != nil && !degraded) || degraded != wantDegraded {
				t.Fatalf("seed %d: write of %d at %d: %v (want degraded: %v)", seed, n, off, err, wantDegraded)
			}
			copy(model[off:], p)
		}
		write(0, len(model), false)
		lost := 1 + rng.IntN(k-1)
		node := columnNode(t, f, v, lost)
		f.CrashMem(node)
		time.Sleep(10 * time.Second) // the switch declares it dead
		// Writes across the lost shard, and inside one row's other shards
		// (the chain needs no lost shard: not degraded).
		write(lost*shard-100, 3*shard, true)
		write(3*k*shard+(lost+1)%k*shard+7, 100, (lost+1)%k == lost)
		write(5*k*shard, 2*k*shard, true)
		readAll(t, v, model, seed)
		// Written around: lost, and not rebuilt while its node is down.
		if l, u, err := v.Lost(ctx); err != nil || len(l) != 1 || l[0] != lost || len(u) != 0 {
			t.Fatalf("seed %d: shard %d written around: lost %v, unreachable %v, %v", seed, lost, l, u, err)
		}
		if err := v.Rebuild(ctx, lost); !errors.Is(err, wire.StatusMemberDead) {
			t.Fatalf("seed %d: rebuild onto a dead node: %v, want %v", seed, err, wire.StatusMemberDead)
		}
		if err := f.StartMem(node, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if l, u, err := v.Lost(ctx); err != nil || len(l) != 1 || l[0] != lost || len(u) != 0 {
			t.Fatalf("seed %d: shard %d's node restarted: lost %v, unreachable %v, %v", seed, lost, l, u, err)
		}
		if err := v.Rebuild(ctx, lost); err != nil {
			t.Fatalf("seed %d: rebuild of shard %d: %v", seed, lost, err)
		}
		if err := f.Whole(ep); err != nil {
			t.Fatalf("seed %d: after the rebuild: %v", seed, err)
		}
		if l, u, err := v.Lost(ctx); err != nil || len(l)+len(u) != 0 {
			t.Fatalf("seed %d: rebuilt: lost %v, unreachable %v, %v", seed, l, u, err)
		}
		checkParity(t, v, shard, model)
		// The rebuilt shard carries the data: lose two others.
		for _, c := range []int{(lost + 1) % k, k} {
			f.CrashMem(columnNode(t, f, v, c))
		}
		time.Sleep(10 * time.Second)
		readAll(t, v, model, seed)
	})
}

// TestSimWriteAroundUnreachable cuts the link of a parity shard's memory
// node until the switch counts it dead, writes around it, and heals the
// link: the node is back with memory that missed the writes, and the
// switch must not serve it (the writer reported its column lost) until
// Rebuild rewrote it.
func TestSimWriteAroundUnreachable(t *testing.T) {
	const seed, shard, rows = 82, 4096, 4
	synctest.Test(t, func(t *testing.T) {
		t.Logf("seed %d", seed)
		rng := rand.New(rand.NewPCG(seed, 5))
		f := ecFabric(t, seed)
		defer f.Close()
		ctx := f.Ctx()
		ep := f.Endpoint()
		v, err := ec.Create(ctx, f.PoolClient(ep), k, m, shard, rows*k*shard)
		if err != nil {
			t.Fatal(err)
		}
		model := randBytes(rng, int(v.Size()))
		if err := v.WriteAt(ctx, model, 0); err != nil {
			t.Fatal(err)
		}
		par := columnNode(t, f, v, k+1)
		f.SetLoss(par.Addr, 1)
		time.Sleep(10 * time.Second)
		if l, u, err := v.Lost(ctx); err != nil || len(l) != 0 || len(u) != 1 || u[0] != k+1 {
			t.Fatalf("seed %d: parity shard cut off: lost %v, unreachable %v, %v", seed, l, u, err)
		}
		p := randBytes(rng, 2*k*shard)
		if err := v.WriteAt(ctx, p, int64(k*shard)); !errors.Is(err, pool.ErrDegraded) {
			t.Fatalf("seed %d: write around an unreachable parity shard: %v, want degraded", seed, err)
		}
		copy(model[k*shard:], p)
		f.SetLoss(par.Addr, 0)
		time.Sleep(5 * time.Second) // its heartbeats reach the switch again
		_, err = v.Region().ReadAtContext(ctx, make([]byte, 8), int64(v.ShardAddr(1, k+1, 0)))
		if !errors.Is(err, wire.StatusLost) {
			t.Fatalf("seed %d: read of the shard written around: %v, want %v", seed, err, wire.StatusLost)
		}
		if err := f.Whole(ep); err == nil {
			t.Fatalf("seed %d: the region is whole with a stale column", seed)
		}
		if err := v.Rebuild(ctx, k+1); err != nil {
			t.Fatalf("seed %d: rebuild: %v", seed, err)
		}
		if err := f.Whole(ep); err != nil {
			t.Fatalf("seed %d: after the rebuild: %v", seed, err)
		}
		checkParity(t, v, shard, model)
	})
}

// randBytes is n bytes drawn from rng.
func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// readAll reads the whole volume and compares it with model.
func readAll(t *testing.T, v *ec.Volume, model []byte, seed int64) {
	t.Helper()
	got := make([]byte, v.Size())
	if _, err := v.ReadAt(t.Context(), got, 0); err != nil {
		t.Fatalf("seed %d: read: %v", seed, err)
	}
	if !bytes.Equal(got, model) {
		t.Fatalf("seed %d: the volume read back differs from what was written", seed)
	}
}

// TestSimRepairUnsure garbles a parity shard's bytes under a piece (as a
// chain cut short after its parity hop would) and records the piece
// unsure: a write elsewhere leaves it, the next write to its row
// recomputes its parity from the data first.
func TestSimRepairUnsure(t *testing.T) {
	const seed, shard, rows = 83, 4096, 4
	synctest.Test(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(seed, 9))
		f := ecFabric(t, seed)
		defer f.Close()
		ctx := f.Ctx()
		v, model := writtenVolume(t, f, rng, shard, rows)
		// Row 2, data shard 1, bytes 100 to 399: parity 0 took a change
		// that the data shard did not.
		garble := randBytes(rng, 300)
		if _, err := v.Region().WriteAtContext(ctx, garble, int64(v.ShardAddr(2, k, 100))); err != nil {
			t.Fatal(err)
		}
		v.MarkUnsure(int64(2*k*shard+shard+100), 300)
		if _, err := v.ReadAt(ctx, make([]byte, 10), 0); err != nil || v.Unsure() != 1 {
			t.Fatalf("seed %d: %d unsure pieces, %v", seed, v.Unsure(), err)
		}
		if err := v.WriteAt(ctx, model[3*k*shard:3*k*shard+10], 3*k*shard); err != nil || v.Unsure() != 1 {
			t.Fatalf("seed %d: a write to another row: %d unsure pieces, %v", seed, v.Unsure(), err)
		}
		if err := v.WriteAt(ctx, model[2*k*shard+3*shard:2*k*shard+3*shard+10], 2*k*shard+3*shard); err != nil || v.Unsure() != 0 {
			t.Fatalf("seed %d: a write to its row: %d unsure pieces, %v", seed, v.Unsure(), err)
		}
		checkParity(t, v, shard, model)
	})
}

// TestSimCutWrite leaves writes as a chain cut short after its first
// parity hop would (that parity shard took the change, the data shard
// did not) with a data shard's node down, so that the rewrite must take
// the change back out of the parity before it rebuilds the lost shard:
// once with five shards answering (each outcome tried against the
// others), once with four (a parity shard's node down too: the chain
// stopped there).
func TestSimCutWrite(t *testing.T) {
	const seed, shard, rows = 84, 4096, 4
	synctest.Test(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(seed, 11))
		f := ecFabric(t, seed)
		defer f.Close()
		ctx := f.Ctx()
		v, model := writtenVolume(t, f, rng, shard, rows)
		cut := func(row, i int) {
			t.Helper()
			p := randBytes(rng, 1000)
			off := row*k*shard + i*shard + 300
			if err := v.CutWrite(ctx, p, int64(off), 1); err != nil {
				t.Fatalf("seed %d: cut write in row %d shard %d: %v", seed, row, i, err)
			}
			copy(model[off:], p)
		}
		mems := []*simpool.Mem{columnNode(t, f, v, 0), columnNode(t, f, v, k+1)}
		f.CrashMem(mems[0])
		time.Sleep(10 * time.Second)
		cut(1, 1)
		readAll(t, v, model, seed)
		f.CrashMem(mems[1])
		time.Sleep(10 * time.Second)
		cut(2, 3)
		readAll(t, v, model, seed)
	})
}

// TestSimScrubAfterWriterDied: a writer dies in the middle of a chain
// (its first parity shard took the change, the data shard did not) and
// its list of unsure pieces dies with it. Without a scrub by the next
// writer, losing another data shard of that row reconstructs that
// shard's bytes wrong: bytes written and acknowledged before are lost.
// After the next writer's Scrub the row's parity matches its data again
// and the same loss reads back every byte.
func TestSimScrubAfterWriterDied(t *testing.T) {
	const seed, shard, rows = 85, 4096, 3
	for _, scrub := range []bool{false, true} {
		t.Run(fmt.Sprintf("scrub=%v", scrub), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 12))
				f := ecFabric(t, seed)
				defer f.Close()
				ctx := f.Ctx()
				v, model := writtenVolume(t, f, rng, shard, rows)
				// The writer dies in a chain writing row 1, data shard 1.
				p := randBytes(rng, 1000)
				if err := v.DiedWrite(ctx, p, int64(1*k*shard+1*shard+300), 1); err != nil {
					t.Fatal(err)
				}
				next, err := ec.Open(v.Region(), k, m)
				if err != nil {
					t.Fatal(err)
				}
				if scrub {
					n, err := next.Scrub(ctx, 0, next.Size(), nil)
					if err != nil || n != rows {
						t.Fatalf("seed %d: scrub: %d rows, %v; want %d", seed, n, err, rows)
					}
				}
				// Data shard 2's node is lost: row 1's shard 2 is rebuilt
				// from the others on every read.
				f.CrashMem(columnNode(t, f, next, 2))
				time.Sleep(10 * time.Second)
				got := make([]byte, next.Size())
				_, rerr := next.ReadAt(ctx, got, 0)
				switch {
				case scrub && (rerr != nil || !bytes.Equal(got, model)):
					t.Fatalf("seed %d: after the scrub, the volume reads back differently (%v)", seed, rerr)
				case !scrub && rerr == nil && bytes.Equal(got, model):
					t.Fatalf("seed %d: without a scrub the lost shard still read back right: the test does not reach the hole", seed)
				}
			})
		})
	}
}

// writtenVolume creates a coded volume of rows rows of shards of shard
// bytes on f and writes it whole with bytes drawn from rng, which it
// returns as the model.
func writtenVolume(t *testing.T, f *simpool.Fabric, rng *rand.Rand, shard, rows uint64) (*ec.Volume, []byte) {
	t.Helper()
	ctx := f.Ctx()
	v, err := ec.Create(ctx, f.PoolClient(f.Endpoint()), k, m, shard, rows*k*shard)
	if err != nil {
		t.Fatal(err)
	}
	model := randBytes(rng, int(v.Size()))
	if err := v.WriteAt(ctx, model, 0); err != nil {
		t.Fatal(err)
	}
	return v, model
}

// TestSimRebuildRowsWhileWriting rebuilds a lost shard of a 4+2 volume
// row by row (RebuildRows, as the rows' writer does) while writes go on:
// before a row is rebuilt, after it is, and in rows not yet reached. A
// chain through the column being rebuilt is refused, so every write
// goes the degraded way, and that way must write the column too: a
// write after its row was rebuilt would otherwise be missing from it.
// Then the column serves reads, every row's parity checks, and the
// volume reads back with two other nodes crashed.
func TestSimRebuildRowsWhileWriting(t *testing.T) {
	for _, lost := range []int{1, k + 1} { // a data shard, a parity shard
		t.Run(fmt.Sprint("shard", lost), func(t *testing.T) {
			const seed, shard, rows = 87, 4096, 6
			synctest.Test(t, func(t *testing.T) {
				t.Logf("seed %d", seed)
				rng := rand.New(rand.NewPCG(seed, uint64(lost)))
				f := ecFabric(t, seed)
				defer f.Close()
				ctx := f.Ctx()
				ep := f.Endpoint()
				v, err := ec.Create(ctx, f.PoolClient(ep), k, m, shard, rows*k*shard)
				if err != nil {
					t.Fatal(err)
				}
				model := make([]byte, v.Size())
				write := func(off, n int) {
					t.Helper()
					p := randBytes(rng, n)
					if err := v.WriteAt(ctx, p, int64(off)); err != nil && !errors.Is(err, pool.ErrDegraded) {
						t.Fatalf("seed %d: write of %d at %d: %v", seed, n, off, err)
					}
					copy(model[off:], p)
				}
				write(0, len(model))
				node := columnNode(t, f, v, lost)
				f.CrashMem(node)
				time.Sleep(10 * time.Second)
				if err := f.StartMem(node, 10*time.Second); err != nil {
					t.Fatal(err)
				}
				if l, _, err := v.Lost(ctx); err != nil || len(l) != 1 || l[0] != lost {
					t.Fatalf("seed %d: shard %d's node restarted empty: lost %v, %v", seed, lost, l, err)
				}
				if err := v.Region().RegrantColumn(ctx, lost); err != nil {
					t.Fatal(err)
				}
				row := k * shard
				for r := range rows {
					// Before the row's rebuild, in a row not reached yet,
					// and after the rebuild: pieces of every shard of the
					// row, the lost one's included.
					write(r*row+rng.IntN(row-300), 300)
					if r+1 < rows {
						write((r+1)*row+lost%k*shard+rng.IntN(shard-50), 50)
					}
					if n, err := v.RebuildRows(ctx, lost, int64(r*row), int64(row), nil); err != nil || n != 1 {
						t.Fatalf("seed %d: rebuilding row %d: %d, %v", seed, r, n, err)
					}
					write(r*row+lost%k*shard+rng.IntN(shard-200), 200)
					write(r*row+rng.IntN(row-2*shard), 2*shard)
				}
				if err := v.Region().RestoreColumn(ctx, lost); err != nil {
					t.Fatal(err)
				}
				if _, err := v.RebuildRows(ctx, lost, 0, int64(row), nil); !errors.Is(err, ec.ErrNotRebuilding) {
					t.Fatalf("seed %d: rebuilding a column that serves reads: %v, want %v", seed, err, ec.ErrNotRebuilding)
				}
				if err := f.Whole(ep); err != nil {
					t.Fatalf("seed %d: after the rebuild: %v", seed, err)
				}
				checkParity(t, v, shard, model)
				for _, c := range []int{(lost + 1) % k, (lost + 2) % k} {
					f.CrashMem(columnNode(t, f, v, c))
				}
				time.Sleep(10 * time.Second)
				readAll(t, v, model, seed)
			})
		})
	}
}

// TestSimCutChainDroppedByWrite: a chain cut short that the next write
// to its row cannot finish (the parity shard's link still dark) is
// dropped, not finished later: its older bytes would land over what
// that write (or one after it) put there.
func TestSimCutChainDroppedByWrite(t *testing.T) {
	const seed, shard, rows = 89, 4096, 3
	synctest.Test(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(seed, 14))
		f := ecFabric(t, seed)
		defer f.Close()
		ctx := f.Ctx()
		v, _ := writtenVolume(t, f, rng, shard, rows)
		par := columnNode(t, f, v, k+1)
		f.SetLoss(par.Addr, 1)
		for _, i := range []int{0, 3} { // two pieces of row 1
			wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			err := v.WriteAt(wctx, make([]byte, 100), int64(1*k*shard+i*shard+300))
			cancel()
			if err == nil {
				t.Fatalf("seed %d: a write through a dark link succeeded", seed)
			}
		}
		f.SetLoss(par.Addr, 0)
		time.Sleep(100 * time.Millisecond)
		v.Repair(ctx, 0, v.Size())
		if v.Finished() != 1 || v.Unsure() != 0 {
			t.Fatalf("seed %d: %d chains finished (want 1: the second write's; the first's was dropped by it), %d pieces unsure", seed, v.Finished(), v.Unsure())
		}
	})
}

// TestSimFinishCutChain cuts a write's chain short for real: a data
// shard's node is down (the row has k+m-1 shards), the second parity
// shard's link goes dark just as the write starts, and the writer gives
// up while the chain waits at that hop (the first parity shard took the
// change, the data shard did not). The link back, the row's parity
// cannot be recomputed from the data (a data shard is gone), so without
// finishing the chain the gone shard's bytes are rebuilt wrong on every
// read. Repair sends the same chain again: the first parity shard
// answers from its reply cache, the second and the data shard apply it,
// and the volume reads back whole, the write included.
func TestSimFinishCutChain(t *testing.T) {
	const seed, shard, rows = 88, 4096, 3
	for _, finish := range []bool{false, true} {
		t.Run(fmt.Sprintf("finish=%v", finish), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 13))
				f := ecFabric(t, seed)
				defer f.Close()
				ctx := f.Ctx()
				v, model := writtenVolume(t, f, rng, shard, rows)
				f.CrashMem(columnNode(t, f, v, 2))
				time.Sleep(10 * time.Second)
				p := randBytes(rng, 1000)
				off := int64(1*k*shard + 0*shard + 300) // row 1, data shard 0
				par := columnNode(t, f, v, k+1)
				f.SetLoss(par.Addr, 1)
				wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				err := v.WriteAt(wctx, p, off)
				cancel()
				if err == nil || v.Unsure() != 1 {
					t.Fatalf("seed %d: the cut write: %v, %d unsure pieces; want it failed and one unsure", seed, err, v.Unsure())
				}
				f.SetLoss(par.Addr, 0)
				time.Sleep(100 * time.Millisecond)
				if !finish {
					got := make([]byte, v.Size())
					_, rerr := v.ReadAt(ctx, got, 0)
					if rerr == nil && bytes.Equal(got, model) {
						t.Fatalf("seed %d: the lost shard read back right without finishing the chain: the test does not reach the hole", seed)
					}
					return
				}
				v.Repair(ctx, off, int64(len(p)))
				if v.Finished() != 1 || v.Unsure() != 0 {
					t.Fatalf("seed %d: repair: %d chains finished, %d pieces unsure; want 1 and 0", seed, v.Finished(), v.Unsure())
				}
				copy(model[off:], p)
				readAll(t, v, model, seed)
			})
		})
	}
}
