package transport

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/wire"
)

// fuzzReader hands out fields from the fuzz input, zeros once it is used up.
type fuzzReader struct{ b []byte }

func (r *fuzzReader) u8() uint8 {
	if len(r.b) == 0 {
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *fuzzReader) u16() uint16 { return uint16(r.u8())<<8 | uint16(r.u8()) }
func (r *fuzzReader) u32() uint32 { return uint32(r.u16())<<16 | uint32(r.u16()) }

// FuzzEngineStep drives one engine with a sequence of crafted datagrams
// (data packets with arbitrary PSN, AckBase, message fields, flags, group,
// source and mode, and ACKs with arbitrary SACK blocks, all with a valid
// checksum) interleaved with Polls and time steps. After each call it
// checks that nothing panicked, the call returned promptly, the peer
// tables stay within their bounds, and each message's deliveries are
// disjoint byte ranges within MsgLen with MsgDone exactly when they cover
// it.
func FuzzEngineStep(f *testing.F) {
	seed := func(ops ...[]byte) []byte {
		var b []byte
		for _, o := range ops {
			b = append(b, o...)
		}
		return b
	}
	data := func(addr, psn, base byte, off, msgLen, n uint16) []byte {
		return []byte{0, addr, 0, 0, 0, 0, 0, 0, psn, 0, 0, 0, base, 0, 0, 0, 7, 0, byte(off >> 8), byte(off), byte(msgLen >> 8), byte(msgLen), byte(n), 0}
	}
	f.Add(seed(data(0, 1, 1, 0, 20, 10), data(0, 2, 1, 10, 20, 10), []byte{8}))
	f.Add(seed(data(1, 1, 1, 0, 20, 10), data(1, 2, 1, 5, 40, 10), []byte{9, 50}, []byte{8}))
	f.Add(seed(data(2, 5, 5, 0, 0, 0), []byte{1, 2, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 32}, []byte{8}))
	f.Add(seed([]byte{6, 0, 0, 0, 0, 0, 0, 0, 0x80, 0, 0, 0, 32}, []byte{8, 9, 255, 8}))
	f.Fuzz(func(t *testing.T, in []byte) {
		cfg := Config{Seed: 1, MTU: 1500, SendWindow: 64, RecvWindow: 64, MaxPeers: 4, MaxStrangers: 4,
			MaxPartial: 4, GroupModes: true, DeadTimeout: 100 * time.Millisecond}
		e, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		addrs := [4]netip.AddrPort{}
		for i := range addrs {
			addrs[i] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), 9)
		}
		// The engine has messages out to two peers, so ACKs find records.
		h := wire.Header{Op: wire.OpWrite}
		for i := range 2 {
			if _, err := e.Send(PeerID{Addr: addrs[i]}, &h, make([]byte, 5000), 0); err != nil {
				t.Fatal(err)
			}
		}
		type msgKey2 struct {
			peer PeerID
			id   uint64
			resp bool
		}
		type track struct {
			msgLen uint32
			spans  [][2]uint32
			total  uint64
		}
		msgs := map[msgKey2]*track{}
		now := time.Unix(100, 0)
		r := &fuzzReader{b: in}
		timed := func(what string, f func()) {
			start := time.Now()
			f()
			if d := time.Since(start); d > time.Second {
				t.Fatalf("%s took %v", what, d)
			}
		}
		for ops := 0; len(r.b) > 0 && ops < 200; ops++ {
			op := r.u8() % 10
			addr := addrs[r.u8()%4]
			switch {
			case op < 6: // data packet
				flags := wire.Flags(r.u8()) & (wire.FlagResp | wire.FlagSyn | wire.FlagRetx)
				grp := uint32(r.u8() % 3)
				src := uint16(r.u8() % 3)
				if src == 2 {
					src = wire.MemberAll
				}
				mode := wire.Mode(r.u8() % 4)
				psn, base := r.u32(), r.u32()
				id := uint64(r.u8() % 4)
				off, msgLen := uint32(r.u16()), uint32(r.u16())
				n := int(r.u8())
				if uint64(off)+uint64(n) > uint64(msgLen) {
					msgLen = off + uint32(n)
				}
				dh := wire.Header{Version: wire.Version, Op: wire.OpWrite, Flags: flags, Group: grp, Src: src,
					Mode: mode, PSN: psn, AckBase: base, MsgID: id, Offset: off, MsgLen: msgLen, TS: uint64(now.UnixNano())}
				if grp != 0 {
					dh.Dst = wire.MemberAll
				}
				pkt, err := wire.AppendPacket(nil, &dh, make([]byte, n))
				if err != nil {
					t.Fatal(err)
				}
				key := msgKey2{PeerID{addr, grp, src, mode}, id, flags&wire.FlagResp != 0}
				// Did the engine track a partial message for it before?
				had := false
				if p := e.lookup(key.peer); p != nil {
					// A SYN far from the window restarts the receiver,
					// forgetting its partial messages.
					restart := flags&wire.FlagSyn != 0 && !p.nearWindow(base)
					had = p.partial[msgKey{id, key.resp}] != nil && !restart
				}
				var d Delivery
				var ok bool
				timed("Receive", func() { d, ok = e.Receive(now, netio.Datagram{Addr: addr, Buf: pkt}, Admission{}) })
				if !ok {
					break
				}
				hd := &d.Header
				if uint64(hd.Offset)+uint64(len(d.Payload)) > uint64(hd.MsgLen) {
					t.Fatalf("delivered [%d, +%d) beyond MsgLen %d", hd.Offset, len(d.Payload), hd.MsgLen)
				}
				tr := msgs[key]
				if !had || tr == nil {
					tr = &track{msgLen: hd.MsgLen}
					msgs[key] = tr
				}
				if tr.msgLen != hd.MsgLen {
					t.Fatalf("message %d: MsgLen %d then %d", id, tr.msgLen, hd.MsgLen)
				}
				s, e2 := hd.Offset, hd.Offset+uint32(len(d.Payload))
				for _, sp := range tr.spans {
					if s < sp[1] && sp[0] < e2 {
						t.Fatalf("message %d: [%d, %d) delivered twice", id, s, e2)
					}
				}
				tr.spans = append(tr.spans, [2]uint32{s, e2})
				tr.total += uint64(e2 - s)
				if tr.total > uint64(tr.msgLen) {
					t.Fatalf("message %d: %d bytes delivered of %d", id, tr.total, tr.msgLen)
				}
				if d.MsgDone != (tr.total == uint64(tr.msgLen)) {
					t.Fatalf("message %d: MsgDone %v with %d of %d bytes", id, d.MsgDone, tr.total, tr.msgLen)
				}
				if d.MsgDone {
					delete(msgs, key)
				}
			case op < 8: // ACK
				b := fuzzAck(r)
				timed("Receive(ACK)", func() { e.Receive(now, netio.Datagram{Addr: addr, Buf: b}, Admission{}) })
			case op == 8:
				timed("Poll", func() { e.Poll(now, nil) })
			default:
				now = now.Add(time.Duration(r.u8()) * time.Millisecond)
			}
			if e.Peers() > cfg.MaxPeers+cfg.MaxStrangers || e.Strangers() > cfg.MaxStrangers {
				t.Fatalf("peers %d strangers %d", e.Peers(), e.Strangers())
			}
		}
	})
}

// fuzzAck reads an ACK or NACK from r: its cumulative point, window and
// up to MaxSackBlocks blocks, each within 2^31 above the point, encoded
// with a valid checksum.
func fuzzAck(r *fuzzReader) []byte {
	a := wire.Ack{Cum: r.u32(), Window: uint32(r.u16()), NBlocks: r.u8() % (wire.MaxSackBlocks + 1)}
	for i := range int(a.NBlocks) {
		st := a.Cum + 1 + r.u32()%(1<<31-1)
		ln := 1 + r.u32()%(1<<31)
		if st-a.Cum+ln > 1<<31 {
			ln = 1<<31 - (st - a.Cum)
		}
		if ln == 0 {
			ln = 1
			st = a.Cum + 1
		}
		a.Blocks[i] = wire.SackBlock{Start: st, End: st + ln}
	}
	ah := wire.Header{Version: wire.Version, Op: wire.OpAck, PSN: r.u32()}
	if r.u8()&1 != 0 {
		ah.Op = wire.OpNack
	}
	b := make([]byte, wire.HeaderLen+a.EncodedLen())
	ah.Len = uint16(a.EncodedLen())
	ah.Encode(b)
	a.Encode(b[wire.HeaderLen:])
	binary.BigEndian.PutUint32(b[92:], 0)
	wire.Seal(b)
	return b
}
