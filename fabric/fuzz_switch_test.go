package fabric_test

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// fuzzReader reads fields off the fuzz input; past its end every field
// reads as zero.
type fuzzReader struct{ b []byte }

func (r *fuzzReader) n(k int) uint64 {
	var v uint64
	for range k {
		v <<= 8
		if len(r.b) > 0 {
			v |= uint64(r.b[0])
			r.b = r.b[1:]
		}
	}
	return v
}

// fuzzFabric is the switch under fuzzing: a job group of three members
// (cores 0-2) and a service group of two (cores 0 and 1), joined through
// the control path.
type fuzzFabric struct {
	*benchFabric
	svc uint32
}

const (
	fuzzSlots      = 16
	fuzzMaxAnycast = 64
)

func newFuzzFabric(tb testing.TB) *fuzzFabric { return newFuzzFabricTree(tb, nil) }

// newFuzzFabricTree is newFuzzFabric with the switch the root of a tree
// whose children are at children: a core at a child's address joins its
// rank as that child switch would (JOINVIA).
func newFuzzFabricTree(tb testing.TB, children []netip.AddrPort) *fuzzFabric {
	f := newBenchFabricConfig(tb, 3, fabric.Config{
		Pool: fabric.PoolConfig{Slots: fuzzSlots}, MaxAnycast: fuzzMaxAnycast, MaxAnycastPerClient: 8,
		AggTimeout: time.Second, AnycastTimeout: time.Second, MaxGroups: 8, Children: children,
	})
	ops := make([]*endpoint.Op, 2)
	for i := range ops {
		buf, err := secure.AppendCtrl(nil, &ctrl.Msg{Type: ctrl.Register, Service: "svc", Size: 2, Rank: i,
			Policy: uint8(ctrl.PolicyLeastOutstanding), MTU: 9000}, []byte("bench"))
		if err != nil {
			tb.Fatal(err)
		}
		ops[i] = &endpoint.Op{Kind: endpoint.KindControl, Peer: benchSwitchAddr, Buf: buf}
		if err := f.cores[i].Post(f.now, ops[i]); err != nil {
			tb.Fatal(err)
		}
	}
	f.run(func() bool { return opDone(ops[0]) && opDone(ops[1]) })
	ff := &fuzzFabric{benchFabric: f}
	for i, op := range ops {
		var resp ctrl.Msg
		if op.Err != nil || secure.ParseCtrl(op.Resp, &resp, []byte("bench")) != nil {
			tb.Fatalf("register %d: %v", i, op.Err)
		}
		ff.svc = resp.Group
	}
	return ff
}

// step feeds the switch the datagrams the fuzz input describes, with Polls
// and time advances between them, checking the switch's bounds after each.
func (f *fuzzFabric) step(t *testing.T, data []byte) {
	r := &fuzzReader{b: data}
	stranger := netip.MustParseAddrPort("10.9.9.9:9")
	var out []netio.Datagram
	for i := 0; len(r.b) > 0 && i < 256; i++ {
		kind := r.n(1)
		if kind&7 == 0 {
			f.now = f.now.Add(time.Duration(r.n(2)) * time.Millisecond)
			out, _ = f.sw.Poll(f.now, out[:0])
			continue
		}
		var from netip.AddrPort
		if k := int(kind>>3) & 3; k < 3 {
			from = f.addrs[k]
		} else {
			from = stranger
		}
		h := wire.Header{Version: wire.Version, Op: wire.Opcode(r.n(1)), Mode: wire.Mode(r.n(1) % 6), Flags: wire.Flags(r.n(1))}
		switch r.n(1) % 4 {
		case 0:
			h.Group = 0
		case 1:
			h.Group = f.group
		case 2:
			h.Group = f.svc
		default:
			h.Group = uint32(r.n(4))
		}
		h.Src, h.Dst = uint16(r.n(2)), uint16(r.n(2))
		// Sequence fields near the ones in use, or anywhere.
		h.PSN, h.AckBase = uint32(r.n(4)), uint32(r.n(4))
		h.MsgID, h.Offset, h.MsgLen = r.n(2), uint32(r.n(2)), uint32(r.n(2))
		h.Dtype, h.Alu = wire.Dtype(r.n(1)), wire.Alu(r.n(1))
		h.Operand1, h.Operand2, h.Addr = r.n(1), r.n(1), r.n(8)
		var payload []byte
		if h.Op == wire.OpAck || h.Op == wire.OpNack {
			a := wire.Ack{Cum: uint32(r.n(4)), Window: uint32(r.n(2)), NBlocks: uint8(r.n(1) % (wire.MaxSackBlocks + 1))}
			for b := range int(a.NBlocks) {
				a.Blocks[b] = wire.SackBlock{Start: uint32(r.n(4)), End: uint32(r.n(4))}
			}
			payload = make([]byte, a.EncodedLen())
			a.Encode(payload)
		} else {
			payload = make([]byte, 8*(r.n(1)%8))
			for j := range payload {
				payload[j] = byte(r.n(1))
			}
		}
		pkt, err := wire.AppendPacket(nil, &h, payload)
		if err != nil {
			continue
		}
		t0 := time.Now()
		f.sw.Receive(f.now, netio.Datagram{Addr: from, Buf: pkt})
		if el := time.Since(t0); el > time.Second {
			t.Fatalf("Receive took %v on %+v", el, h)
		}
		f.checkBounds(t)
	}
	f.now = f.now.Add(2 * time.Second)
	out, _ = f.sw.Poll(f.now, out[:0])
	_ = out
	f.checkBounds(t)
	if st := f.sw.Stats(); st.AnycastPending != 0 {
		t.Fatalf("%d anycast requests still pending after their timeout", st.AnycastPending)
	}
}

func (f *fuzzFabric) checkBounds(t *testing.T) {
	st := f.sw.Stats()
	if st.Pool.InUse > fuzzSlots || st.AnycastPending > fuzzMaxAnycast || st.Groups > 8 {
		t.Fatalf("bounds exceeded: %d slots, %d anycast requests, %d groups", st.Pool.InUse, st.AnycastPending, st.Groups)
	}
}

// fuzzSeed encodes one datagram record for the seed corpus.
func fuzzSeed(src, group byte, op wire.Opcode, mode wire.Mode, flags wire.Flags, psn, ackBase uint32, ack *wire.Ack) []byte {
	b := []byte{1 | src<<3, byte(op), byte(mode), byte(flags), group, 0, 0, 0xff, 0xff}
	b = binary.BigEndian.AppendUint32(b, psn)
	b = binary.BigEndian.AppendUint32(b, ackBase)
	b = append(b, 0, 1, 0, 0, 0, 64, byte(wire.DtypeI64), byte(wire.AluAdd), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
	if ack != nil {
		b = binary.BigEndian.AppendUint32(b, ack.Cum)
		b = append(b, 4, 0, ack.NBlocks)
		for i := range int(ack.NBlocks) {
			b = binary.BigEndian.AppendUint32(b, ack.Blocks[i].Start)
			b = binary.BigEndian.AppendUint32(b, ack.Blocks[i].End)
		}
	} else {
		b = append(b, 1, 1, 2, 3, 4, 5, 6, 7, 8)
	}
	return b
}

// FuzzSwitchStep drives the stateful receive path of a Switch with a job
// group and a service group: crafted datagrams with arbitrary header
// fields (sealed, so they get past the checksum), ACK frames with
// arbitrary cumulative points and SACK blocks, Polls and time advances.
// Every Receive must return promptly and the slot pool, the anycast table
// and the group table must stay within their configured bounds; anycast
// state must be gone once its timeout has passed.
func FuzzSwitchStep(f *testing.F) {
	far := uint32(1 << 31)
	seeds := [][]byte{
		fuzzSeed(0, 1, wire.OpData, wire.ModeMulticast, 0, 5, 5, nil),
		append(fuzzSeed(0, 1, wire.OpData, wire.ModeMulticast, 0, 5, 5, nil), fuzzSeed(0, 1, wire.OpData, wire.ModeMulticast, 0, far, far-1, nil)...),
		append(fuzzSeed(0, 1, wire.OpData, wire.ModeMulticast, 0, 5, 5, nil),
			fuzzSeed(1, 1, wire.OpAck, wire.ModeMulticast, 0, 0, 0, &wire.Ack{Cum: far, NBlocks: 2,
				Blocks: [wire.MaxSackBlocks]wire.SackBlock{{Start: 6, End: far}, {Start: far + 7, End: 3}}})...),
		fuzzSeed(1, 1, wire.OpData, wire.ModeAggregate, 0, 1, 1, nil),
		fuzzSeed(3, 2, wire.OpData, wire.ModeAnycast, 0, 1, 1, nil),
		fuzzSeed(2, 2, wire.OpData, wire.ModeAnycast, wire.FlagResp, 1, 1, nil),
		fuzzSeed(0, 1, wire.OpData, wire.ModeMulticast, wire.FlagSyn, far, far, nil),
		fuzzSeed(3, 0, wire.OpControl, wire.ModeUnicast, 0, 1, 1, nil),
		{0, 0, 10},
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		newFuzzFabric(t).step(t, data)
	})
}

// FuzzTreeSwitchStep is FuzzSwitchStep at the root of a tree of
// switches: member 2 of the job lies behind a child switch (the third
// sender), whose merged ACKs, heartbeats, reports of members gone and
// joins the inputs imitate or forge.
func FuzzTreeSwitchStep(f *testing.F) {
	far := uint32(1 << 31)
	seeds := [][]byte{
		fuzzSeed(0, 1, wire.OpData, wire.ModeMulticast, 0, 5, 5, nil),
		append(fuzzSeed(0, 1, wire.OpData, wire.ModeMulticast, 0, 5, 5, nil),
			fuzzSeed(2, 1, wire.OpAck, wire.ModeMulticast, 0, 0, 0, &wire.Ack{Cum: 6, NBlocks: 1,
				Blocks: [wire.MaxSackBlocks]wire.SackBlock{{Start: 6, End: far}}})...),
		fuzzSeed(2, 1, wire.OpData, wire.ModeMulticast, 0, 5, 5, nil),
		fuzzSeed(2, 1, wire.OpData, wire.ModeMulticast, wire.FlagSyn, far, far, nil),
		fuzzSeed(2, 0, wire.OpControl, wire.ModeUnicast, 0, 1, 1, nil),
	}
	for _, s := range seeds {
		f.Add(s)
	}
	child := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 1, 3}), 9000) // core 2's
	f.Fuzz(func(t *testing.T, data []byte) {
		newFuzzFabricTree(t, []netip.AddrPort{child}).step(t, data)
	})
}
