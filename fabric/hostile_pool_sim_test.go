package fabric_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// byteSink counts what reaches an address that never sends.
type byteSink struct{ bytes, n int }

func (b *byteSink) Receive(_ time.Time, d netio.Datagram) { b.bytes += len(d.Buf); b.n++ }
func (b *byteSink) Poll(_ time.Time, out []netio.Datagram) ([]netio.Datagram, time.Time) {
	return out, time.Time{}
}

// TestSimPoolNoReflection: pool READs of a whole segment sent with a
// victim's forged source address (and a valid region key) must not make
// the memory node send the victim more than three times the bytes sent in
// its name; the legitimate client, proven by its control exchange, keeps
// reading and writing verified data.
func TestSimPoolNoReflection(t *testing.T) {
	f, _, cli := poolSimSetup(t, 41, simnet.LinkConfig{}, 2)
	p := f.createPool(cli, ctrl.PoolSpec{Size: 1 << 20, Stripe: 64 << 10, Replicas: 1, Perm: uint8(wire.PermAll)})
	victim := &byteSink{}
	vaddr := netip.MustParseAddrPort("10.7.7.7:4000")
	f.net.Attach(vaddr, victim, f.link, f.link)
	seg := uint64(cli.core.PoolSegment())
	sent := 0
	for i := range 200 {
		h := wire.Header{Version: wire.Version, Op: wire.OpRead, Mode: wire.ModePool, Group: p.spec.Region, Key: p.key,
			MsgID: uint64(i + 1), Addr: uint64(i%8) * (64 << 10), Operand1: seg}
		pkt, err := wire.AppendPacket(nil, &h, nil)
		if err != nil {
			t.Fatal(err)
		}
		sent += len(pkt)
		f.sw.Receive(f.net.Now(), netio.Datagram{Addr: vaddr, Buf: pkt})
		f.net.Wake(f.swAddr)
		f.net.RunFor(time.Millisecond)
	}
	f.net.RunFor(100 * time.Millisecond)
	if victim.bytes > 3*sent {
		t.Fatalf("victim got %d bytes in %d datagrams for %d bytes sent in its name (x%.1f), want at most x3",
			victim.bytes, victim.n, sent, float64(victim.bytes)/float64(sent))
	}
	t.Logf("victim got %d bytes for %d sent in its name; switch refused %d as unproven", victim.bytes, sent, f.sw.Stats().PoolUnproven)
	want := bytes.Repeat([]byte("ndma"), 64<<10/4)
	if err, _ := p.access(endpoint.KindWrite, want, 0, time.Minute); err != nil {
		t.Fatalf("seed %d: legitimate write: %v", f.seed, err)
	}
	got := make([]byte, len(want))
	if err, _ := p.access(endpoint.KindRead, got, 0, time.Minute); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("seed %d: legitimate read: %v (equal %v)", f.seed, err, bytes.Equal(got, want))
	}
}
