package endpoint

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// hostileNode sends crafted, well-formed datagrams at a target on simnet:
// contradicting fragments, floods of fresh message ids, tags and
// communicators, far sequence numbers, and group traffic for groups the
// target is not in. It ignores what it receives.
type hostileNode struct {
	target netip.AddrPort
	rng    *rand.Rand
	f      *forger
	left   int // datagrams still to send
	every  time.Duration
	sent   int
}

func (h *hostileNode) Receive(time.Time, netio.Datagram) {}

func (h *hostileNode) Poll(now time.Time, out []netio.Datagram) ([]netio.Datagram, time.Time) {
	for range min(h.left, 16) {
		out = append(out, netio.Datagram{Addr: h.target, Buf: h.next()})
		h.left--
		h.sent++
	}
	if h.left == 0 {
		return out, time.Time{}
	}
	return out, now.Add(h.every)
}

func (h *hostileNode) next() []byte {
	r := h.rng
	id := uint64(r.IntN(1 << 20))
	switch r.IntN(6) {
	case 0: // a message's first fragment, then a liar of the same id
		if r.IntN(2) == 0 {
			return h.f.packet(wire.Header{Op: wire.OpSend, MsgID: id % 8, Key: 1, Operand1: 1, Operand2: 1, MsgLen: 3000}, fill(1000, 1))
		}
		return h.f.packet(wire.Header{Op: wire.OpSend, MsgID: id % 8, Key: 1, Operand1: 1, Operand2: 1, MsgLen: 1 << 30, Offset: 1 << 29}, fill(1000, 2))
	case 1: // fresh communicators and tags, empty messages
		return h.f.packet(wire.Header{Op: wire.OpSend, MsgID: id, Key: uint64(r.Uint32()), Operand1: r.Uint64(), Operand2: 1}, nil)
	case 2: // fresh sequence numbers of one stream, large claimed lengths
		return h.f.packet(wire.Header{Op: wire.OpSend, MsgID: id, Key: 2, Operand1: 2, Operand2: r.Uint64(), MsgLen: 1 << 24}, fill(500, 3))
	case 3: // first packets of multi-packet requests
		return h.f.packet(wire.Header{Op: wire.OpWrite, MsgID: id, Key: 9, MsgLen: 1 << 20}, fill(200, 4))
	case 4: // a far sequence number (the transport drops it as out of its window)
		b := h.f.packet(wire.Header{Op: wire.OpSend, MsgID: id, Key: 3, Operand1: 3, Operand2: 1, MsgLen: 10}, fill(10, 5))
		var hd wire.Header
		payload, _, _ := wire.Parse(b, &hd)
		hd.PSN += 1<<30 + uint32(r.IntN(1<<20))
		pkt, _ := wire.AppendPacket(nil, &hd, payload)
		return pkt
	default: // member-dead events and multicasts for groups it is not in
		if r.IntN(2) == 0 {
			return h.f.packet(wire.Header{Op: wire.OpEvent, Group: r.Uint32(), Status: wire.StatusMemberDead, Operand1: uint64(r.IntN(1 << 16)), MsgID: id, Dst: wire.MemberAll}, nil)
		}
		return h.f.packet(wire.Header{Op: wire.OpData, Mode: wire.ModeMulticast, Group: 5, Src: uint16(r.IntN(4)), Dst: wire.MemberAll, MsgID: id, MsgLen: 2000}, fill(100, 6))
	}
}

// TestSimHostilePeer: while a hostile node floods an endpoint with
// crafted datagrams, two legitimate peers exchange two-sided messages with
// it (some received after they arrived): every message arrives whole and
// in order, and the endpoint's tables stay within their bounds the whole
// time.
func TestSimHostilePeer(t *testing.T) {
	const seed = 1414
	t.Logf("seed %d", seed)
	net := simnet.New(seed)
	l := simnet.LinkConfig{Rate: 10e9, Latency: 5 * time.Microsecond, Loss: 0.01, Reorder: 0.02}
	tcfg := transport.Config{MTU: 1500, DeadTimeout: time.Second}
	cfg := func(s uint64) Config {
		c := Config{Transport: tcfg, OpTimeout: time.Hour, MaxUnexpected: 1 << 20, MaxUnexpectedMsgs: 256, MaxIncomingBytes: 1 << 20}
		c.Transport.Seed = s
		return c
	}
	target, err := NewCore(cfg(1))
	if err != nil {
		t.Fatal(err)
	}
	tAddr := netip.MustParseAddrPort("10.0.0.1:1")
	var done []*Op
	onDone := func(_ time.Time, op *Op) { done = append(done, op) }
	checks := 0
	net.Attach(tAddr, simCore(target, onDone, func(time.Time) {
		checkBounds(t, target)
		checks++
	}), l, l)
	peers := make([]*Core, 2)
	paddrs := make([]netip.AddrPort, 2)
	for i := range peers {
		if peers[i], err = NewCore(cfg(uint64(10 + i))); err != nil {
			t.Fatal(err)
		}
		paddrs[i] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 1, byte(i + 1)}), 1)
		net.Attach(paddrs[i], simCore(peers[i], onDone, nil), l, l)
	}
	hostile := &hostileNode{target: tAddr, rng: rand.New(rand.NewPCG(seed, 2)), f: newForger(), left: 30000, every: 20 * time.Microsecond}
	hAddr := netip.MustParseAddrPort("10.6.6.6:6")
	net.Attach(hAddr, hostile, l, l)
	net.Wake(hAddr)

	r := rand.New(rand.NewPCG(seed, 1))
	want := map[*Op][]byte{}
	var late []*Op
	total := 0
	for i, p := range peers {
		for j := range 60 {
			tag := uint64(j % 3)
			data := fill(r.IntN(12000), byte(i*60+j))
			if err := p.Post(net.Now(), &Op{Kind: KindSendMsg, Peer: tAddr, Comm: 4, Tag: tag, Buf: data}); err != nil {
				t.Fatal(err)
			}
			rv := &Op{Kind: KindRecvMsg, Peer: paddrs[i], Comm: 4, Tag: tag, Buf: make([]byte, 12000)}
			want[rv] = data
			if tag == 2 { // posted late (a stream's receives keep their order)
				late = append(late, rv)
			} else if err := target.Post(net.Now(), rv); err != nil {
				t.Fatal(err)
			}
			total += 2
		}
		net.Wake(paddrs[i])
	}
	net.Wake(tAddr)
	// The late receives are posted while the flood runs.
	for _, rv := range late {
		net.RunFor(100 * time.Microsecond)
		if err := target.Post(net.Now(), rv); err != nil {
			t.Fatal(err)
		}
		net.Wake(tAddr)
	}
	if err := net.RunUntil(func() bool { return len(done) == total }, time.Minute); err != nil {
		t.Fatalf("seed %d: %v (%d of %d done; hostile sent %d)", seed, err, len(done), total, hostile.sent)
	}
	for rv, data := range want {
		if rv.Err != nil || !bytes.Equal(rv.Buf[:rv.N], data) {
			t.Fatalf("seed %d: receive from %v tag %d: err %v, %d bytes of %d", seed, rv.Peer, rv.Tag, rv.Err, rv.N, len(data))
		}
	}
	for _, op := range done {
		if op.Err != nil {
			t.Fatalf("seed %d: %v: %v", seed, op.Kind, op.Err)
		}
	}
	st := target.Stats()
	if hostile.sent < 5000 || st.FragmentsRefused == 0 || st.Transport.Refused == 0 {
		t.Fatalf("the flood did not reach the endpoint: sent %d, refused fragments %d, held back %d", hostile.sent, st.FragmentsRefused, st.Transport.Refused)
	}
	checkBounds(t, target)
	t.Logf("%d messages in %v virtual under %d hostile datagrams; %d bound checks; tables %v; refused fragments %d, held back %d",
		total/2, net.Elapsed(), hostile.sent, checks, fmtSizes(tableSizes(target)), st.FragmentsRefused, st.Transport.Refused)
}

func fmtSizes(m map[string]int) string {
	s := ""
	for _, k := range []string{"unexp", "unexpMsg", "anyIn", "inStatus", "deadMembers", "recvSeq"} {
		s += fmt.Sprintf("%s=%d ", k, m[k])
	}
	return s
}
