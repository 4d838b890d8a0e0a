package fabric

import (
	"net/netip"
	"testing"

	"github.com/ndma/ndma/netio"
)

// TestGroupByAddr: the datagrams end up grouped by destination, each
// destination's in their original order.
func TestGroupByAddr(t *testing.T) {
	a := netip.MustParseAddrPort("10.0.0.2:1")
	b := netip.MustParseAddrPort("10.0.0.1:1")
	c := netip.MustParseAddrPort("10.0.0.1:2")
	in := []netio.Datagram{{Addr: a, Buf: []byte{0}}, {Addr: b, Buf: []byte{1}}, {Addr: c, Buf: []byte{2}},
		{Addr: a, Buf: []byte{3}}, {Addr: b, Buf: []byte{4}}, {Addr: c, Buf: []byte{5}}, {Addr: b, Buf: []byte{6}}}
	groupByAddr(in)
	want := []struct {
		addr netip.AddrPort
		b    byte
	}{{b, 1}, {b, 4}, {b, 6}, {c, 2}, {c, 5}, {a, 0}, {a, 3}}
	for i, w := range want {
		if in[i].Addr != w.addr || in[i].Buf[0] != w.b {
			t.Fatalf("datagram %d: %v %v, want %v %v", i, in[i].Addr, in[i].Buf, w.addr, w.b)
		}
	}
}

// TestGroupByAddrAllocs: grouping allocates nothing.
func TestGroupByAddrAllocs(t *testing.T) {
	a, b := netip.MustParseAddrPort("10.0.0.2:1"), netip.MustParseAddrPort("10.0.0.1:1")
	ds := make([]netio.Datagram, 64)
	for i := range ds {
		ds[i].Addr = a
		if i%3 == 0 {
			ds[i].Addr = b
		}
	}
	if n := testing.AllocsPerRun(100, func() { groupByAddr(ds) }); n != 0 {
		t.Errorf("%v allocations", n)
	}
}
