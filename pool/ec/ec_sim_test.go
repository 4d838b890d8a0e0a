package ec_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/klauspost/reedsolomon"
	"github.com/ndma/ndma/internal/simpool"
	"github.com/ndma/ndma/pool/ec"
	"github.com/ndma/ndma/wire"
)

const k, m = 4, 2

// TestSimCodedVolume writes objects of odd sizes at odd offsets into a
// 4+2 volume on six memory nodes (overwrites included), checks that every
// row's parity, built by the memory nodes, is what klauspost's Encode
// makes of the data, that the client sent about k shards' bytes per k
// shards of data (not k+m), that writes through a lossy link to a parity
// node (chains resent) still leave the parity right, and then crashes the
// memory nodes of two data shards and reads every byte back by
// reconstruction.
func TestSimCodedVolume(t *testing.T) {
	// Shards of one datagram, and of three (each piece's chain cut into
	// chunks).
	for _, c := range []struct {
		seed  int64
		shard int
	}{{71, 4096}, {72, 20000}} {
		t.Run(fmt.Sprint("seed", c.seed), func(t *testing.T) { simCodedVolume(t, c.seed, c.shard) })
	}
}

func simCodedVolume(t *testing.T, seed int64, shard int) {
	synctest.Test(t, func(t *testing.T) {
		t.Logf("seed %d, shards of %d bytes", seed, shard)
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		f := ecFabric(t, seed)
		defer f.Close()
		ctx := f.Ctx()
		ep := f.Endpoint()
		v, err := ec.Create(ctx, f.PoolClient(ep), k, m, uint64(shard), uint64(20*k*shard-1000))
		if err != nil {
			t.Fatal(err)
		}
		if v.Size() != int64(20*k*shard) {
			t.Fatalf("volume of %d bytes, want 20 rows of %d", v.Size(), k*shard)
		}
		model := make([]byte, v.Size())
		write := func(off, n int) {
			t.Helper()
			p := make([]byte, n)
			for i := range p {
				p[i] = byte(rng.Uint32())
			}
			if err := v.WriteAt(ctx, p, int64(off)); err != nil {
				t.Fatalf("seed %d: write of %d at %d: %v", seed, n, off, err)
			}
			copy(model[off:], p)
		}
		// Objects of sizes that are multiples of nothing, then overwrites
		// across them, then a write of the whole of some rows.
		before := ep.Stats().Pool
		data := 0
		for _, w := range [][2]int{{0, 7919}, {10007, 30011}, {45001, 3}, {60013, 19997}, {3001, 12007}, {20011, 40009}, {0, 6 * k * shard}} {
			write(w[0], w[1])
			data += w[1]
		}
		after := ep.Stats().Pool
		checkParity(t, v, shard, model)
		// Each datagram carries a header, the hop list and data; the data
		// went out once (k shards' bytes), not once per shard (k+m).
		sent, reqs := after.RequestBytes-before.RequestBytes, after.Requests-before.Requests
		carried := sent - reqs*uint64(wire.HeaderLen+(m+2)*wire.ChainHopLen)
		t.Logf("%d data bytes: %d requests, %d bytes sent (%d of them data)", data, reqs, sent, carried)
		if carried < uint64(data) || sent > uint64(data)*(2*k+1)/(2*k) || after.Retransmits != before.Retransmits {
			t.Fatalf("seed %d: %d data bytes written with %d bytes sent (%d data, %d resent): want at most %d; parity sent from the host would be %d",
				seed, data, sent, carried, after.Retransmits-before.Retransmits, uint64(data)*(2*k+1)/(2*k), data*(k+m)/k)
		}
		// Chains lost on a parity node's link are resent whole: the memory
		// nodes must not add a change twice.
		parity := columnNode(t, f, v, k)
		f.SetLoss(parity.Addr, 0.3)
		for range 6 {
			write(rng.IntN(int(v.Size())-9000), 1+rng.IntN(9000))
		}
		f.SetLoss(parity.Addr, 0)
		if st := ep.Stats().Pool; st.Retransmits == after.Retransmits {
			t.Fatalf("seed %d: no chain was resent through the lossy link", seed)
		}
		checkParity(t, v, shard, model)
		// Lose the memory nodes of two data shards (drawn by the seed).
		lost := rng.Perm(k)[:2]
		for _, c := range lost {
			f.CrashMem(columnNode(t, f, v, c))
		}
		time.Sleep(10 * time.Second) // the switch declares them dead
		got := make([]byte, v.Size())
		rebuilt, err := v.ReadAt(ctx, got, 0)
		if err != nil {
			t.Fatalf("seed %d: read with shards %v lost: %v", seed, lost, err)
		}
		if !bytes.Equal(got, model) {
			t.Fatalf("seed %d: volume read back differs from what was written", seed)
		}
		// Every piece of a lost shard was rebuilt: 20 rows, two shards each.
		if rebuilt != 2*20 {
			t.Fatalf("seed %d: %d pieces rebuilt, want %d", seed, rebuilt, 2*20)
		}
		// An odd piece inside a lost shard, and one across shards.
		for _, r := range [][2]int{{lost[0]*shard + 17, 1000}, {5*k*shard + 3*shard - 5, shard + 11}} {
			p := make([]byte, r[1])
			if _, err := v.ReadAt(ctx, p, int64(r[0])); err != nil || !bytes.Equal(p, model[r[0]:r[0]+r[1]]) {
				t.Fatalf("seed %d: read of %d at %d: %v", seed, r[1], r[0], err)
			}
		}
		// A third loss is more than the code can take.
		f.CrashMem(columnNode(t, f, v, k))
		time.Sleep(10 * time.Second)
		if _, err := v.ReadAt(ctx, make([]byte, 10), int64(lost[0]*shard)); err == nil {
			t.Fatalf("seed %d: read with three shards lost succeeded", seed)
		}
	})
}

// checkParity reads every row of v's region as it lies in memory and
// compares its data with model and its parity with klauspost's Encode of
// that data.
func checkParity(t *testing.T, v *ec.Volume, shard int, model []byte) {
	t.Helper()
	enc, err := reedsolomon.New(k, m)
	if err != nil {
		t.Fatal(err)
	}
	row := make([]byte, (k+m)*shard)
	for r := range int(v.Size()) / (k * shard) {
		if _, err := v.Region().ReadAtContext(context.Background(), row, int64(v.ShardAddr(uint64(r), 0, 0))); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(row[:k*shard], model[r*k*shard:(r+1)*k*shard]) {
			t.Fatalf("row %d: data differs from what was written", r)
		}
		shards := make([][]byte, k+m)
		for s := range shards {
			shards[s] = bytes.Clone(row[s*shard : (s+1)*shard])
		}
		if err := enc.Encode(shards); err != nil {
			t.Fatal(err)
		}
		for j := range m {
			if !bytes.Equal(shards[k+j], row[(k+j)*shard:(k+j+1)*shard]) {
				t.Fatalf("row %d: parity %d differs from klauspost's Encode of the data", r, j)
			}
		}
	}
}

// columnNode is the memory node that holds column c of v's region.
func columnNode(t *testing.T, f *simpool.Fabric, v *ec.Volume, c int) *simpool.Mem {
	t.Helper()
	return f.Holder(v.Region(), int64(v.ShardAddr(0, c, 0)))
}

// ecFabric starts a simulated fabric of k+m memory nodes, one per shard
// of a row, for seed.
func ecFabric(t *testing.T, seed int64) *simpool.Fabric {
	t.Helper()
	return simpool.Start(t, simpool.Config{Seed: seed, Token: []byte("ec test token"), Nodes: k + m})
}
