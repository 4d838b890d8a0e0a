package stor

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndma/ndma/internal/jepsen"
)

// The workload of the Jepsen runs on a replicated volume, the same on
// simnet (TestSimJepsenVolume) and on real processes
// (TestProcJepsenVolume): what they differ in is the fabric and the
// faults.

// jSeeds are the seeds the environment variable env asks for (FIRST-LAST),
// or def.
func jSeeds(t *testing.T, env string, def int64) []int64 {
	seeds, err := jepsen.SeedsFromEnv(env, def)
	if err != nil {
		t.Fatal(err)
	}
	return seeds
}

// jHotBlocks are the blocks the clients write and read: jHot of each
// extent, spread over it.
func jHotBlocks() []int {
	perExtent := MinExtent / jBlock
	var hot []int
	for e := range jExtents {
		for b := range jHot {
			hot = append(hot, e*perExtent+b*perExtent/jHot)
		}
	}
	return hot
}

// jWork is a running workload: jWriters goroutines writing through one
// Volume (each write followed by a flush before it counts as done), and
// jReaderGors goroutines reading through each reader Volume, every
// operation in the history.
type jWork struct {
	stop      chan struct{}
	wg        sync.WaitGroup
	lastWrite atomic.Int64 // Unix ns of the return of the latest write that was OK
	leaseLost atomic.Int64 // writes refused for a lease the one writer should hold
	halted    bool
}

// jStartWork starts the workload on the volume w writes and readers read.
func jStartWork(seed int64, h *jepsen.History, vals *jValues, errs *jErrors, w *Volume, readers []*Volume) *jWork {
	k := &jWork{stop: make(chan struct{})}
	hot := jHotBlocks()
	// Each goroutine passes a gate of its volume's endpoint before each
	// operation: on the simulated network, goroutines that start one at
	// one instant (as all do at first) go on in the order of their
	// gates, and the run replays from its seed.
	worker := func(client int, v *Volume, f func(rng *rand.Rand)) {
		gate := v.c.ep.NewGate()
		k.wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(client)))
			for {
				gate.Pass()
				select {
				case <-k.stop:
					return
				default:
				}
				f(rng)
				time.Sleep(time.Duration(rng.Int64N(int64(jPause))))
			}
		})
	}
	var nextID atomic.Uint64
	for g := range jWriters {
		worker(g, w, func(rng *rand.Rand) {
			id := nextID.Add(1)
			blk := hot[rng.IntN(len(hot))]
			p, dig := vals.block(id)
			call := h.Invoke(g, jepsen.Write, jKey(blk), dig)
			// A failed write may have reached some replicas before it
			// failed (it is retried while the fabric recovers): its
			// outcome is unknown.
			if _, err := w.WriteAt(p, int64(blk*jBlock)); err != nil {
				if errors.Is(err, ErrLeaseHeld) {
					k.leaseLost.Add(1) // no other writer exists: it never should
				}
				errs.add("write", err)
				call.Unknown(err)
				return
			}
			if err := w.Flush(); err != nil {
				errs.add("flush", err)
				call.Unknown(err)
				return
			}
			call.OK(0)
			k.lastWrite.Store(time.Now().UnixNano())
		})
	}
	for i, r := range readers {
		for g := range jReaderGors {
			client := jWriters + i*jReaderGors + g
			worker(client, r, func(rng *rand.Rand) {
				blk := hot[rng.IntN(len(hot))]
				buf := make([]byte, jBlock)
				call := h.Invoke(client, jepsen.Read, jKey(blk), 0)
				if _, err := r.ReadAt(buf, int64(blk*jBlock)); err != nil {
					// A read that failed returned nothing: no evidence
					// either way.
					errs.add("read", err)
					call.Fail(err)
					return
				}
				call.OK(vals.read(buf))
			})
		}
	}
	return k
}

// halt stops the workload and waits for its operations to end.
func (k *jWork) halt() {
	if !k.halted {
		k.halted = true
		close(k.stop)
		k.wg.Wait()
	}
}

// jAwaitWhole waits, up to jRecover after healed, for the volume to be
// whole again (Stat not degraded) and written to since the heal.
func jAwaitWhole(ctx context.Context, t *testing.T, seed int64, c *Client, k *jWork, healed time.Time) {
	t.Helper()
	deadline := healed.Add(jRecover)
	for {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := c.Stat(sctx, jVolume)
		cancel()
		wrote := k.lastWrite.Load() > healed.UnixNano()
		if err == nil && !st.Degraded && wrote {
			t.Logf("seed %d: whole again %v after the heal", seed, time.Since(healed))
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("seed %d: %v after the heal: no write done %v, stat %+v, %v", seed, jRecover, !wrote, st, err)
			if os.Getenv("STOR_DEBUG") != "" || os.Getenv("STOR_TRACE") != "" {
				// Where the nodes and the writer wait.
				buf := make([]byte, 8<<20)
				t.Logf("seed %d: goroutines:\n%s", seed, buf[:runtime.Stack(buf, true)])
			}
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// jHeal follows the heal of every fault: the volume must be whole again
// and written to (jAwaitWhole), the one writer must never have lost its
// lease and closes, and a fresh reader through reader reads every block
// as part of the history.
func jHeal(ctx context.Context, t *testing.T, seed int64, c *Client, k *jWork, w *Volume, reader *Client,
	h *jepsen.History, vals *jValues, d Descriptor) {
	t.Helper()
	healed := time.Now()
	time.Sleep(jQuiet)
	jAwaitWhole(ctx, t, seed, c, k, healed)
	k.halt()
	if n := k.leaseLost.Load(); n > 0 {
		t.Errorf("seed %d: the only writer lost its lease (%d times)", seed, n)
	}
	if err := w.Close(); err != nil {
		t.Errorf("seed %d: closing the writer after the heal: %v", seed, err)
	}
	fresh, err := reader.Open(ctx, jVolume, OpenOptions{})
	if err != nil {
		t.Fatalf("seed %d: opening a reader after the heal: %v", seed, err)
	}
	jReadAll(t, seed, h, vals, fresh, d)
}

// jReadAll reads every block of the volume through r, each read part of
// the history; after three failures it stops (the volume is not whole).
func jReadAll(t *testing.T, seed int64, h *jepsen.History, vals *jValues, r *Volume, d Descriptor) {
	t.Helper()
	client := jWriters + jReaders*jReaderGors
	failed := 0
	for blk := 0; blk < int(d.Size)/jBlock && failed < 3; blk++ {
		buf := make([]byte, jBlock)
		call := h.Invoke(client, jepsen.Read, jKey(blk), 0)
		if _, err := r.ReadAt(buf, int64(blk*jBlock)); err != nil {
			call.Fail(err)
			failed++
			t.Errorf("seed %d: reading block %d after the heal: %v", seed, blk, err)
			continue
		}
		call.OK(vals.read(buf))
	}
}

// jSnapshot is the blocks node i's backing file under dir holds of the
// volume, for the comparison of replicas.
func jSnapshot(t *testing.T, seed int64, i int, dir string, d Descriptor) jepsen.Snapshot {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "vols", jVolume, "data"))
	if err != nil {
		t.Fatalf("seed %d: node %d: %v", seed, i, err)
	}
	snap := jepsen.Snapshot{Replica: fmt.Sprint(jReplicaSet, i), Keys: map[string][]byte{}}
	for blk := range int(d.Size) / jBlock {
		if d.Holds(uint16(i), blk*jBlock/int(d.Extent)) {
			snap.Keys[jKey(blk)] = data[blk*jBlock : (blk+1)*jBlock]
		}
	}
	return snap
}

// jReport checks the history (each block a regular register, as a disk's
// reads are: one that overlaps a write in flight may see the new bytes on
// one replica and the old on another; once a write completed, every read
// sees it) with the replicas' comparison, and fails t if it finds an
// anomaly.
func jReport(t *testing.T, seed int64, h *jepsen.History, vals *jValues, divergent []jepsen.Divergence) {
	rep := jepsen.Check(h, jepsen.CheckOptions{Init: jepsen.Digest(make([]byte, jBlock)), Describe: vals.describe, Regular: true})
	rep.Divergent = divergent
	t.Logf("seed %d:\n%v", seed, rep)
	if !rep.OK() {
		path, err := rep.WriteVisualization(os.Getenv("STOR_JEPSEN_DIR"))
		if err != nil {
			t.Errorf("seed %d: visualization: %v", seed, err)
		}
		t.Errorf("seed %d: the history is not linearizable or replicas differ (visualization: %s)", seed, path)
	}
}
