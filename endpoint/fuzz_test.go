package endpoint

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// fuzzRecord is the bytes of the fuzz input that describe one datagram.
const fuzzRecord = 20

var (
	fuzzAddrs = []netip.AddrPort{swAddr, hostileAddr, netip.MustParseAddrPort("10.0.0.2:1"), netip.MustParseAddrPort("10.0.0.3:1")}
	fuzzOps   = []wire.Opcode{wire.OpSend, wire.OpData, wire.OpRead, wire.OpWrite, wire.OpEvent, wire.OpControl, wire.OpNop, wire.OpCAS}
	fuzzModes = []wire.Mode{wire.ModeUnicast, wire.ModeMulticast, wire.ModeAggregate, wire.ModeAnycast}
)

// fuzzDatagram decodes one record into a sealed datagram and its source.
func fuzzDatagram(f *forger, b []byte) (netip.AddrPort, []byte) {
	from := fuzzAddrs[int(b[0])%len(fuzzAddrs)]
	h := wire.Header{
		Op:       fuzzOps[int(b[1])%len(fuzzOps)],
		Mode:     fuzzModes[int(b[2])%len(fuzzModes)],
		Flags:    wire.Flags(b[3]) & (wire.FlagResp | wire.FlagSyn),
		Group:    []uint32{0, 7, 8}[int(b[4])%3],
		Src:      []uint16{0, 1, wire.MemberAll}[int(b[5])%3],
		Dst:      []uint16{1, wire.MemberAll, 0}[int(b[5]/3)%3],
		MsgID:    uint64(b[6] % 8),
		MsgLen:   uint32(binary.BigEndian.Uint16(b[7:])),
		Offset:   uint32(binary.BigEndian.Uint16(b[9:])),
		Key:      uint64(b[13] % 4),
		Operand1: uint64(b[14] % 4),
		Operand2: uint64(b[15] % 4),
		Status:   wire.Status(b[16] % 4),
		Addr:     uint64(b[17]),
	}
	n := int(b[11]) % 256
	if b[12]&1 == 0 {
		// Mostly self-consistent fragments (the decoder refuses the rest).
		n = min(n, int(h.MsgLen))
		if int(h.Offset)+n > int(h.MsgLen) {
			h.Offset = h.MsgLen - uint32(n)
		}
	}
	k := forgerKey{h.Group, h.Src, h.Mode}
	f.psn[k] += uint32(b[12] >> 5) // skip some PSNs
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(i) ^ b[18]
	}
	h.Version, h.AckBase = wire.Version, 1
	f.psn[k]++
	h.PSN = f.psn[k]
	pkt, err := wire.AppendPacket(nil, &h, payload) // sealed (wire.Seal)
	if err != nil {
		return from, nil
	}
	if b[19]&1 == 1 && len(pkt) > wire.HeaderLen {
		pkt[wire.HeaderLen] ^= 1 // a damaged datagram: its checksum fails
	}
	return from, pkt
}

// FuzzCoreStep feeds a core with a store, posted receives and one-sided
// ops, and an anycast service membership a sequence of crafted datagrams
// (every header field the core reads), checking that it never panics and
// that its tables stay within their bounds.
func FuzzCoreStep(f *testing.F) {
	rec := func(from, op, mode, flags, group, src, id byte, msgLen, off uint16, n, psn, key, o1, o2, st byte) []byte {
		b := make([]byte, fuzzRecord)
		b[0], b[1], b[2], b[3], b[4], b[5], b[6] = from, op, mode, flags, group, src, id
		binary.BigEndian.PutUint16(b[7:], msgLen)
		binary.BigEndian.PutUint16(b[9:], off)
		b[11], b[12], b[13], b[14], b[15], b[16] = n, psn, key, o1, o2, st
		return b
	}
	cat := func(rs ...[]byte) []byte {
		var out []byte
		for _, r := range rs {
			out = append(out, r...)
		}
		return out
	}
	// Finding 1 on each path: a message's first fragment, then a
	// fragment of the same id claiming a longer message at a far offset.
	f.Add(cat(rec(2, 0, 0, 0, 0, 0, 1, 100, 0, 50, 0, 1, 1, 1, 0), rec(2, 0, 0, 0, 0, 0, 1, 10000, 5000, 50, 0, 1, 1, 1, 0)))
	f.Add(cat(rec(0, 1, 1, 0, 1, 0, 1, 100, 0, 50, 0, 0, 0, 0, 0), rec(0, 1, 1, 0, 1, 0, 1, 10000, 5000, 50, 0, 0, 0, 0, 0)))
	f.Add(cat(rec(0, 1, 3, 0, 1, 2, 3, 100, 0, 50, 0, 0, 0, 0, 0), rec(0, 1, 3, 0, 1, 2, 3, 10000, 5000, 50, 0, 0, 0, 0, 0)))
	f.Add(cat(rec(2, 2, 0, 1, 0, 0, 1, 64, 0, 32, 0, 0, 0, 0, 0), rec(2, 2, 0, 1, 0, 0, 1, 9000, 4000, 32, 0, 0, 0, 0, 0)))
	// Events, aggregation results, a multi-packet write.
	f.Add(cat(rec(1, 4, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 3, 0, 0), rec(0, 1, 2, 0, 1, 2, 1, 16, 0, 16, 0, 0, 0, 0, 0)))
	f.Add(cat(rec(3, 3, 0, 0, 0, 0, 2, 600, 0, 200, 0, 1, 0, 0, 0), rec(3, 3, 0, 0, 0, 0, 2, 600, 200, 200, 0, 1, 0, 0, 0), rec(3, 3, 0, 0, 0, 0, 2, 900, 400, 200, 0, 1, 0, 0, 0)))
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 400*fuzzRecord {
			return
		}
		store, _ := memnode.NewStore(memnode.Config{})
		key, err := store.Alloc(4096, wire.PermAll, 1)
		if err != nil {
			t.Fatal(err)
		}
		_ = key
		c, err := NewCore(Config{Store: store, Transport: transport.Config{Seed: 1, GroupModes: true, DeadTimeout: time.Second},
			MaxUnexpected: 4096, MaxUnexpectedMsgs: 16, MaxIncoming: 4, MaxIncomingBytes: 4096, MaxResponse: 8192})
		if err != nil {
			t.Fatal(err)
		}
		c.SetMember(7, 1)
		now := simnet.Epoch()
		peer := fuzzAddrs[2]
		post := func(op *Op) {
			if err := c.Post(now, op); err != nil {
				t.Fatal(err)
			}
		}
		for tag := range uint64(4) {
			post(&Op{Kind: KindRecvMsg, Peer: peer, Comm: 1, Tag: tag, Buf: make([]byte, 300)})
		}
		post(&Op{Kind: KindRecv, Peer: swAddr, Group: 7, From: 0, Buf: make([]byte, 100)})
		post(&Op{Kind: KindRecv, Peer: swAddr, Group: 7, From: 0, Buf: make([]byte, 16)})
		post(&Op{Kind: KindAggregate, Peer: swAddr, Group: 7, Buf: make([]byte, 16), Recv: make([]byte, 16), Root: -1, Dtype: wire.DtypeI64, Alu: wire.AluAdd})
		post(&Op{Kind: KindRead, Peer: peer, Key: 1, Buf: make([]byte, 64)})
		post(&Op{Kind: KindControl, Peer: swAddr, Buf: []byte("hello")})
		fg := newForger()
		for len(in) >= fuzzRecord {
			from, pkt := fuzzDatagram(fg, in[:fuzzRecord])
			now = now.Add(time.Duration(in[18]) * 10 * time.Millisecond)
			in = in[fuzzRecord:]
			if pkt == nil {
				continue
			}
			c.Receive(now, netio.Datagram{Addr: from, Buf: pkt})
			if in := len(in); in%(3*fuzzRecord) == 0 {
				c.Poll(now, nil)
				for _, r := range c.Requests() {
					_ = c.Reply(r, r.Data, wire.StatusOK)
				}
			}
			checkBounds(t, c)
		}
	})
}
