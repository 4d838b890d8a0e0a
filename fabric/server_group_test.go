package fabric

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/ndma/ndma/netio"
)

// TestGroupByAddr: the datagrams end up grouped by destination, the
// destinations in the order of their first datagram, each destination's
// datagrams in their original order; also with more destinations than
// the counting sort takes, and for batches already grouped.
func TestGroupByAddr(t *testing.T) {
	a := netip.MustParseAddrPort("10.0.0.2:1")
	b := netip.MustParseAddrPort("10.0.0.1:1")
	c := netip.MustParseAddrPort("10.0.0.1:2")
	in := []netio.Datagram{{Addr: a, Buf: []byte{0}}, {Addr: b, Buf: []byte{1}}, {Addr: c, Buf: []byte{2}},
		{Addr: a, Buf: []byte{3}}, {Addr: b, Buf: []byte{4}}, {Addr: c, Buf: []byte{5}}, {Addr: b, Buf: []byte{6}}}
	var g grouper
	g.group(in)
	want := []struct {
		addr netip.AddrPort
		b    byte
	}{{a, 0}, {a, 3}, {b, 1}, {b, 4}, {b, 6}, {c, 2}, {c, 5}}
	for i, w := range want {
		if in[i].Addr != w.addr || in[i].Buf[0] != w.b {
			t.Fatalf("datagram %d: %v %v, want %v %v", i, in[i].Addr, in[i].Buf, w.addr, w.b)
		}
	}
	if g.tmp[0].Buf != nil {
		t.Error("the scratch space still points at the datagrams")
	}

	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for _, dests := range []int{1, 2, 8, maxGroupAddrs, maxGroupAddrs + 1, 200} {
		t.Run(fmt.Sprint(dests), func(t *testing.T) {
			for range 50 {
				ds := make([]netio.Datagram, 3+rng.IntN(300))
				for i := range ds {
					ds[i].Addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, 1}), uint16(1+rng.IntN(dests)))
					ds[i].Buf = []byte{byte(i), byte(i >> 8)}
				}
				if rng.IntN(4) == 0 {
					g.group(ds) // then again, already grouped
				}
				checkGrouped(t, &g, ds)
			}
		})
	}
}

// checkGrouped groups ds and checks that each destination's datagrams
// are adjacent and in their original order (Buf holds the index).
func checkGrouped(t *testing.T, g *grouper, ds []netio.Datagram) {
	t.Helper()
	count := map[netip.AddrPort]int{}
	for _, d := range ds {
		count[d.Addr]++
	}
	g.group(ds)
	seen := map[netip.AddrPort]bool{}
	for i := 0; i < len(ds); {
		a := ds[i].Addr
		if seen[a] {
			t.Fatalf("%v split across runs", a)
		}
		seen[a] = true
		j, prev := i, -1
		for ; j < len(ds) && ds[j].Addr == a; j++ {
			k := int(ds[j].Buf[0]) | int(ds[j].Buf[1])<<8
			if k <= prev {
				t.Fatalf("%v: datagram %d after %d", a, k, prev)
			}
			prev = k
		}
		if j-i != count[a] {
			t.Fatalf("%v: %d datagrams, want %d", a, j-i, count[a])
		}
		i = j
	}
}

// TestGroupByAddrAllocs: grouping allocates nothing once its scratch
// space has grown.
func TestGroupByAddrAllocs(t *testing.T) {
	a, b := netip.MustParseAddrPort("10.0.0.2:1"), netip.MustParseAddrPort("10.0.0.1:1")
	ds := make([]netio.Datagram, 64)
	for i := range ds {
		ds[i].Addr = a
		if i%3 == 0 {
			ds[i].Addr = b
		}
	}
	var g grouper
	if n := testing.AllocsPerRun(100, func() {
		for i := range ds {
			ds[i].Addr = a
			if i%3 == 0 {
				ds[i].Addr = b
			}
		}
		g.group(ds)
	}); n != 0 {
		t.Errorf("%v allocations", n)
	}
}
