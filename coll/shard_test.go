package coll

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// shardInput is rank r's deterministic input of e int32 elements.
func shardInput(r, e int) []int32 {
	v := make([]int32, e)
	for j := range v {
		v[j] = int32((r+1)*7919 + j*31 - 5000*(j%3))
	}
	return v
}

// shardBytes is rank r's deterministic input of n bytes.
func shardBytes(r, n int) []byte {
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(r*131 + j*7 + j>>8)
	}
	return b
}

// TestSimShardExact: with 2 and 3 switches (and lossy links), in-network
// Allreduce, Reduce, ReduceScatter (one aggregation and one per block),
// Bcast and Allgather give exactly the host computation's result for
// sizes that do not divide by the switch count, down to fewer elements
// than switches.
func TestSimShardExact(t *testing.T) {
	const n = 4
	innet := WithAlgo(AlgoInNet)
	for _, k := range []int{2, 3} {
		for _, loss := range []float64{0, 0.02} {
			link := figLink()
			link.Loss = loss
			t.Run(fmt.Sprintf("%s/loss=%v", shardName(k), loss), func(t *testing.T) {
				simShards(t, n, k, link, int64(10*k)+int64(loss*100), func(t *testing.T, w *shardWorld) {
					for _, e := range []int{1, 2, 5, 1001, 3*4096 + 1} {
						checkShardReductions(t, w.comms, e, innet)
					}
					for _, size := range []int{1, 2, 7, 10007, 200003} {
						checkShardReplication(t, w.comms, size, innet)
					}
					if loss == 0 {
						checkShardSplit(t, w.comms, k)
					}
				})
			})
		}
	}
}

// checkShardSplit splits the communicator in two (odd and even ranks):
// the halves stripe over the same k switches and reduce exactly.
func checkShardSplit(t *testing.T, comms []*Communicator, k int) {
	t.Helper()
	halves := make([]*Communicator, len(comms))
	errs, _ := runEach(comms, func(ctx context.Context, c *Communicator) error {
		h, err := c.Split(ctx, c.Rank()%2, c.Rank())
		halves[c.Rank()] = h
		return err
	})
	firstErr(t, "split", errs)
	for r, h := range halves {
		if len(h.Switches()) != k {
			t.Fatalf("rank %d's half stripes over %d switches, want %d", r, len(h.Switches()), k)
		}
	}
	checkShardReductions(t, []*Communicator{halves[0], halves[2]}, 7, WithAlgo(AlgoInNet))
	checkShardReductions(t, []*Communicator{halves[1], halves[3]}, 7, WithAlgo(AlgoInNet))
	runEach(halves, func(ctx context.Context, c *Communicator) error { return c.Close(ctx) })
}

// checkShardReductions runs Allreduce (Sum), Reduce (Max, root 1) and
// ReduceScatter (Sum, e elements per rank) of int32 and compares every
// rank's result with the sum, or maximum, computed here.
func checkShardReductions(t *testing.T, comms []*Communicator, e int, opts ...CallOption) {
	t.Helper()
	n := len(comms)
	sum, maxv := make([]int32, n*e), make([]int32, n*e)
	for r := range n {
		for j, v := range shardInput(r, n*e) {
			sum[j] += v
			if r == 0 || v > maxv[j] {
				maxv[j] = v
			}
		}
	}
	got := make([][]int32, n)
	errs, _ := runEach(comms, func(ctx context.Context, c *Communicator) error {
		got[c.Rank()] = make([]int32, n*e)
		return Allreduce(ctx, c, shardInput(c.Rank(), n*e), got[c.Rank()], Sum, opts...)
	})
	firstErr(t, fmt.Sprintf("allreduce of %d elements", n*e), errs)
	for r := range n {
		if !slicesEqual(got[r], sum) {
			t.Fatalf("allreduce of %d elements: rank %d differs from the sum", n*e, r)
		}
	}
	errs, _ = runEach(comms, func(ctx context.Context, c *Communicator) error {
		got[c.Rank()] = make([]int32, n*e)
		return Reduce(ctx, c, shardInput(c.Rank(), n*e), got[c.Rank()], Max, 1, opts...)
	})
	firstErr(t, fmt.Sprintf("reduce of %d elements", n*e), errs)
	if !slicesEqual(got[1], maxv) {
		t.Fatalf("reduce of %d elements: the root's result differs from the maximum", n*e)
	}
	errs, _ = runEach(comms, func(ctx context.Context, c *Communicator) error {
		got[c.Rank()] = make([]int32, e)
		return ReduceScatter(ctx, c, shardInput(c.Rank(), n*e), got[c.Rank()], Sum, opts...)
	})
	firstErr(t, fmt.Sprintf("reducescatter of %d elements per rank", e), errs)
	for r := range n {
		if !slicesEqual(got[r], sum[r*e:(r+1)*e]) {
			t.Fatalf("reducescatter of %d elements per rank: rank %d differs from its block of the sum", e, r)
		}
	}
}

// checkShardReplication runs Bcast (root 2) of size bytes and Allgather
// of size bytes per rank and compares every rank's buffer with the data
// sent.
func checkShardReplication(t *testing.T, comms []*Communicator, size int, opts ...CallOption) {
	t.Helper()
	n := len(comms)
	bufs := make([][]byte, n)
	errs, _ := runEach(comms, func(ctx context.Context, c *Communicator) error {
		bufs[c.Rank()] = make([]byte, size)
		if c.Rank() == 2 {
			bufs[2] = shardBytes(2, size)
		}
		return c.Bcast(ctx, bufs[c.Rank()], 2, opts...)
	})
	firstErr(t, fmt.Sprintf("bcast of %d bytes", size), errs)
	for r := range n {
		if !bytes.Equal(bufs[r], shardBytes(2, size)) {
			t.Fatalf("bcast of %d bytes: rank %d differs from the root's data", size, r)
		}
	}
	var want []byte
	for r := range n {
		want = append(want, shardBytes(r, size)...)
	}
	errs, _ = runEach(comms, func(ctx context.Context, c *Communicator) error {
		bufs[c.Rank()] = make([]byte, n*size)
		return c.Allgather(ctx, shardBytes(c.Rank(), size), bufs[c.Rank()], opts...)
	})
	firstErr(t, fmt.Sprintf("allgather of %d bytes per rank", size), errs)
	for r := range n {
		if !bytes.Equal(bufs[r], want) {
			t.Fatalf("allgather of %d bytes per rank: rank %d differs from the ranks' data", size, r)
		}
	}
}

// TestSimShardHierarchyAndOverlap: sharded over 2 switches, ranks in two
// levels (two hosts of two ranks: the leaders' communicator stripes over
// the same switches) reduce and replicate exactly; and overlapping
// non-blocking in-network calls, each striped, complete with the right
// results.
func TestSimShardHierarchyAndOverlap(t *testing.T) {
	const n = 4
	simShm(t)
	hosts := hierConfig(hierLayout{host: []int{0, 0, 1, 1}}, nil)
	simShardsConfig(t, n, 2, figLink(), 61, hosts, func(t *testing.T, w *shardWorld) {
		for r, c := range w.comms {
			if c.Hosts() != 2 || c.hier.leaders != nil && len(c.hier.leaders.Switches()) != 2 {
				t.Fatalf("rank %d: %d hosts; its leaders' communicator should stripe over both switches", r, c.Hosts())
			}
		}
		checkShardReductions(t, w.comms, 1001, WithAlgo(AlgoInNet))
		checkShardReplication(t, w.comms, 10007, WithAlgo(AlgoInNet))
	})
	simShards(t, n, 3, figLink(), 62, func(t *testing.T, w *shardWorld) {
		const e, size = 3001, 20011
		sum := make([]int32, e)
		for r := range n {
			for j, v := range shardInput(r, e) {
				sum[j] += v
			}
		}
		sums, bufs := make([][]int32, n), make([][]byte, n)
		errs, _ := runEach(w.comms, func(ctx context.Context, c *Communicator) error {
			r := c.Rank()
			sums[r], bufs[r] = make([]int32, e), make([]byte, size)
			if r == 1 {
				bufs[r] = shardBytes(1, size)
			}
			a := Iallreduce(ctx, c, shardInput(r, e), sums[r], Sum, WithAlgo(AlgoInNet))
			b := c.Ibcast(ctx, bufs[r], 1, WithAlgo(AlgoInNet))
			return errors.Join(b.Wait(ctx), a.Wait(ctx))
		})
		firstErr(t, "overlapping iallreduce and ibcast", errs)
		for r := range n {
			if !slicesEqual(sums[r], sum) || !bytes.Equal(bufs[r], shardBytes(1, size)) {
				t.Fatalf("rank %d: wrong results of overlapping calls", r)
			}
		}
	})
}

func slicesEqual[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// shardFloats is rank r's float input: magnitudes far apart, so the
// order of the additions shows in the result's bits.
func shardFloats(r, e int) []float32 {
	v := make([]float32, e)
	for j := range v {
		v[j] = float32(math.Pow(10, float64((r*3+j)%9-4))) * float32(1+j%7) * float32(1-2*(r&1))
	}
	return v
}

// TestSimShardDeterministic: a float Allreduce WithDeterministic over 3
// switches gives the same bits on every rank and in runs with different
// seeds (other loss and timing), and the bits of the member-order sum
// (((x0 + x1) + x2) + x3) the switches compute stripe by stripe.
func TestSimShardDeterministic(t *testing.T) {
	const n, e = 4, 3*1000 + 2
	want := make([]float32, e)
	for r := range n {
		for j, v := range shardFloats(r, e) {
			if r == 0 {
				want[j] = v
			} else {
				want[j] += v
			}
		}
	}
	link := figLink()
	link.Loss = 0.01
	var runs [][]float32
	for _, seed := range []int64{41, 42} {
		simShards(t, n, 3, link, seed, func(t *testing.T, w *shardWorld) {
			got := make([][]float32, n)
			errs, _ := runEach(w.comms, func(ctx context.Context, c *Communicator) error {
				got[c.Rank()] = make([]float32, e)
				return Allreduce(ctx, c, shardFloats(c.Rank(), e), got[c.Rank()], Sum, WithAlgo(AlgoInNet), WithDeterministic(true))
			})
			firstErr(t, "deterministic allreduce", errs)
			for r := range n {
				if !bitsEqual(got[r], got[0]) {
					t.Fatalf("seed %d: rank %d's bits differ from rank 0's", seed, r)
				}
			}
			runs = append(runs, got[0])
		})
	}
	if !bitsEqual(runs[0], runs[1]) {
		t.Fatal("two runs of a deterministic allreduce gave different bits")
	}
	if !bitsEqual(runs[0], want) {
		t.Fatal("the deterministic allreduce is not the member-order sum")
	}
}

func bitsEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// TestSimShardSwitchDies: while the ranks repeat an in-network Allreduce
// or Bcast, one switch crashes. Every rank's call fails within twice the
// switch's heartbeat timeout (1 s) of virtual time, never hangs: with one
// switch with its *endpoint.SwitchError or the transport's
// *transport.PeerError, sharded with a *StripeError naming the dead
// stripe's switch; and so does the rank's next call. The calls have no
// deadline of their own.
func TestSimShardSwitchDies(t *testing.T) {
	const n, size = 4, 256 << 10
	bound := 2 * time.Second // from the crash, for both calls: twice the switch's heartbeat timeout
	for _, k := range []int{1, 2, 3} {
		for _, op := range []string{"allreduce", "bcast"} {
			victim := k - 1 // with 3 switches a middle one dies
			if k == 3 {
				victim = 1
			}
			t.Run(fmt.Sprintf("%s/%s", shardName(k), op), func(t *testing.T) {
				simShards(t, n, k, figLink(), int64(100+k), func(t *testing.T, w *shardWorld) {
					var killed time.Time // written by rank 0 before its next call
					failed := make([]time.Time, n)
					nextErrs := make([]error, n)
					errs, _ := runEach(w.comms, func(ctx context.Context, c *Communicator) error {
						call1 := func(call int) error {
							if op == "allreduce" {
								return c.AllreduceBytes(ctx, nil, make([]byte, size), wire.DtypeF32, Sum, WithAlgo(AlgoInNet))
							}
							return c.Bcast(ctx, make([]byte, size), call%n, WithAlgo(AlgoInNet))
						}
						for call := 0; ; call++ {
							if err := call1(call); err != nil {
								nextErrs[c.Rank()] = call1(call + 1)
								failed[c.Rank()] = time.Now()
								return err
							}
							if c.Rank() == 0 && call == 3 {
								killed = time.Now()
								w.kill(victim)
							}
						}
					})
					for r, err := range errs {
						took := failed[r].Sub(killed)
						t.Logf("rank %d, %v after the crash: %v; then %v", r, took, err, nextErrs[r])
						if killed.IsZero() || took > bound {
							t.Errorf("rank %d failed twice %v after the crash, bound %v", r, took, bound)
						}
						if nextErrs[r] == nil {
							t.Errorf("rank %d: the call after the failed one succeeded", r)
						}
						var se *StripeError
						var pe *transport.PeerError
						switch {
						case err == nil:
							t.Fatalf("rank %d: no error", r)
						case k > 1 && !errors.As(err, &se):
							t.Errorf("rank %d: %v, want a *StripeError", r, err)
						case k > 1 && (se.Stripe != victim || se.Switch != w.addrs[victim]):
							t.Errorf("rank %d: %v, want it to name stripe %d, switch %v", r, err, victim, w.addrs[victim])
						case k == 1 && !errors.Is(err, endpoint.ErrSwitchSilent) && !errors.As(err, &pe):
							t.Errorf("rank %d: %v, want the switch found dead", r, err)
						}
					}
					if k == 1 {
						// Closing leaves the dead switch's group without
						// waiting for its answer to the LEAVE.
						for r, c := range w.comms {
							start := time.Now()
							_ = c.Close(context.Background())
							if took := time.Since(start); took > time.Second {
								t.Errorf("rank %d: Close took %v with its switch dead", r, took)
							}
						}
					}
				})
			})
		}
	}
}

// TestSimShardBytesPerSwitch: sharded over 3 switches, an Allreduce and
// a Bcast bring each switch about a third of the traffic one switch
// carries alone, by the switches' own counters: the data bytes their
// transports received (the aggregations' contributions), the
// aggregation packets and the multicast packets they took in.
func TestSimShardBytesPerSwitch(t *testing.T) {
	const n, size = 4, 3 << 20
	run := func(comms []*Communicator) {
		errs, _ := runEach(comms, func(ctx context.Context, c *Communicator) error {
			if err := c.AllreduceBytes(ctx, nil, make([]byte, size), wire.DtypeF32, Sum, WithAlgo(AlgoInNet)); err != nil {
				return err
			}
			return c.Bcast(ctx, make([]byte, size), 0, WithAlgo(AlgoInNet))
		})
		firstErr(t, "allreduce and bcast", errs)
	}
	// counts runs the calls and returns each switch's counters' growth:
	// data bytes received, aggregation packets in, multicast packets in.
	counts := func(w *shardWorld) [][3]uint64 {
		get := func() [][3]uint64 {
			var out [][3]uint64
			for _, s := range w.srvs {
				st := s.Stats()
				out = append(out, [3]uint64{st.Transport.BytesReceived, st.AggregateIn, st.MulticastIn})
			}
			return out
		}
		before := get()
		run(w.comms)
		after := get()
		for i := range after {
			for j := range after[i] {
				after[i][j] -= before[i][j]
			}
		}
		return after
	}
	var one [3]uint64
	simShards(t, n, 1, simnet.LinkConfig{}, 5, func(t *testing.T, w *shardWorld) { one = counts(w)[0] })
	simShards(t, n, 3, simnet.LinkConfig{}, 5, func(t *testing.T, w *shardWorld) {
		names := [3]string{"data bytes received", "aggregation packets", "multicast packets"}
		for i, got := range counts(w) {
			for j := range got {
				t.Logf("switch %d: %d %s; one switch alone %d", i, got[j], names[j], one[j])
				if lo, hi := one[j]/3*95/100, one[j]/3*105/100+1; one[j] == 0 || got[j] < lo || got[j] > hi {
					t.Errorf("switch %d: %d %s, want about a third of %d", i, got[j], names[j], one[j])
				}
			}
		}
	})
}
