package dissect

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// Packets made by hand for what the small workload does not send: a
// control message of every type in both directions, a chain, an
// optimizer step and an event.

// everyCtrl is one control message of every type, request and response,
// with every field its type carries set.
func everyCtrl() []ctrl.Msg {
	v4 := netip.MustParseAddrPort("10.4.0.1:7470")
	v6 := netip.MustParseAddrPort("[fd00::7]:40000")
	members := []ctrl.MemberInfo{{ID: 0, Addr: v4}, {ID: 1, Addr: v6}}
	shape := ctrl.PoolSpec{Size: 1 << 20, Stripe: 4096, Columns: 2, Replicas: 1, Perm: 0x0f}
	homes := []ctrl.PoolHome{{Addr: v4, Base: 0}, {Addr: v6, Base: 1 << 16}}
	var ms []ctrl.Msg
	// Every type package wire/ctrl names: a new one fails secure.AppendCtrl
	// below until it is given its fields here (and in the dissector).
	for t := ctrl.Join; !strings.HasPrefix(t.String(), "ctrl("); t++ {
		req := ctrl.Msg{Type: t}
		resp := ctrl.Msg{Type: t, Resp: true}
		switch t {
		case ctrl.Join:
			req.Job, req.Size, req.Rank, req.MTU = "train", 4, ctrl.RankAny, 9000
			resp.Group, resp.Member, resp.Epoch, resp.Members = 7, 1, 3, members
		case ctrl.JoinVia:
			req.Job, req.Size, req.Rank, req.MTU = "train", 4, 2, 9000
			req.Members = []ctrl.MemberInfo{{ID: 2, Addr: v6}}
			resp.Group, resp.Member, resp.Epoch, resp.Members = 7, 2, 3, members
		case ctrl.Leave, ctrl.MemberGone:
			req.Group, req.Member = 7, 1
		case ctrl.Heartbeat:
			req.Group, req.Member = 7, 1
			resp.Epoch, resp.Dead = 3, []uint16{2, 3}
		case ctrl.Destroy:
			req.Group = 7
		case ctrl.Register:
			req.Service, req.Policy, req.Size, req.Rank, req.MTU = "kv", 2, 2, 1, 1500
			req.Ranges = []ctrl.Range{{Start: 0, End: 100, Owner: 0, Replicas: []int32{1}}, {Start: 100, End: 200, Owner: 1}}
			resp.Group, resp.Member = 8, 1
		case ctrl.Lookup:
			req.Service, req.MTU = "kv", 1500
			resp.Group, resp.Members = 8, members
		case ctrl.PoolNode:
			req.Key, req.Capacity, req.Epoch = 0xfeedface, 1<<30, 42
			resp.Node, resp.Epoch = 3, 43
		case ctrl.PoolCreate:
			req.Pool = shape
			req.Pool.Columns = 0
			resp.Region, resp.Key, resp.Pool = 5, 0xabcdef0123, shape
		case ctrl.PoolOpen, ctrl.PoolFree, ctrl.PoolRevoke:
			req.Region, req.Key = 5, 0xabcdef0123
			if t == ctrl.PoolOpen {
				resp.Pool = shape
			}
		case ctrl.PoolStat:
			resp.PoolNodes = []ctrl.PoolNodeInfo{{ID: 0, Addr: v4, Capacity: 1 << 30, Used: 1 << 19, Alive: true, Requests: 10, Bytes: 1000},
				{ID: 1, Addr: v6, Capacity: 1 << 30}}
			r := shape
			r.Region, r.Lost, r.Down, r.Health = 5, 1, 1, ctrl.HealthUnavailable
			resp.PoolRegions, resp.PoolRefused = []ctrl.PoolSpec{r}, 99
		case ctrl.PoolGrant, ctrl.PoolRebuild:
			req.Region, req.Key, req.Pool, req.Base, req.Length, req.Node, req.Epoch, req.Homes = 5, 0xabcdef0123, shape, 1<<16, 1<<19, 1, 4, homes
			if t == ctrl.PoolRebuild {
				req.Fences = []wire.Fence{{ID: 0, Token: 3<<32 | 0xbeef}, {ID: 9, Token: 1}}
			}
		case ctrl.PoolRebuildGo, ctrl.PoolRebuilt:
			req.Region, req.Key, req.Node, req.Failed = 5, 0xabcdef0123, 1, t == ctrl.PoolRebuilt
		case ctrl.JoinStatus:
			req.Job = "train"
			resp.Size, resp.Joined = 10, []byte{0b101, 0b10} // ranks 0, 2, 9
		case ctrl.PoolReport:
			req.Final = true
			req.Reports = []ctrl.GrantReport{{Region: 5, Column: 1, Pool: shape, Base: 1 << 16, Length: 1 << 19, Epoch: 4,
				Digest: ctrl.PoolKeyDigest(5, 0xabcdef0123), Degraded: true, Homes: homes, Fences: []wire.Fence{{ID: 2, Token: 7 << 32}}}}
		case ctrl.PoolEpoch:
			req.Region, req.Key, req.Epoch = 5, 0xabcdef0123, 9
		}
		ms = append(ms, req, resp)
	}
	return ms
}

// handmade appends the hand-made packets to f's log: control messages
// between a client and the switch, then a chain, an optimizer step and
// an event.
func handmade(t *testing.T, f *simFabric) {
	t.Helper()
	at := f.net.Now()
	cli := netip.MustParseAddrPort("10.9.0.1:40200")
	for i, m := range everyCtrl() {
		payload, err := secure.AppendCtrl(nil, &m, f.token)
		if err != nil {
			t.Fatalf("%v resp=%v: %v", m.Type, m.Resp, err)
		}
		h := wire.Header{Version: wire.Version, Op: wire.OpControl, PSN: uint32(100 + i), AckBase: 100, MsgID: uint64(1000 + i/2), MsgLen: uint32(len(payload))}
		src, dst := cli, f.swAddr
		if m.Resp {
			h.Flags = wire.FlagResp
			src, dst = dst, src
		}
		pkt, err := wire.AppendPacket(nil, &h, payload)
		if err != nil {
			t.Fatal(err)
		}
		f.log = append(f.log, sent{at: at, src: src, dst: dst, buf: pkt})
	}
	// A chain of two hops, a load then a store, as the client sends it.
	hops := []wire.ChainHop{{Addr: 0x100, Op: wire.ChainLoad}, {Addr: 0x2000, Op: wire.ChainStore}}
	ch := wire.Header{Version: wire.Version, Op: wire.OpChain, Mode: wire.ModePool, Group: 5, Key: 0xabcdef0123, MsgID: 50,
		Operand1: 64, Operand2: uint64(len(hops))}
	payload := wire.AppendChain(nil, hops)
	ch.MsgLen = uint32(len(payload))
	pkt, err := wire.AppendPacket(nil, &ch, payload)
	if err != nil {
		t.Fatal(err)
	}
	f.log = append(f.log, sent{at: at, src: cli, dst: f.swAddr, buf: pkt})
	// An erasure-coded write: the change to a data shard, added into a
	// parity shard times a coefficient, then into the data shard.
	hops = []wire.ChainHop{{Addr: 0x100, Op: wire.ChainDelta}, {Addr: 0x8100, Op: wire.ChainGFAccumulate, Coef: 0x8e},
		{Addr: 0x100, Op: wire.ChainGFAccumulate, Coef: 1}}
	ch = wire.Header{Version: wire.Version, Op: wire.OpChain, Mode: wire.ModePool, Group: 5, Key: 0xabcdef0123, MsgID: 53,
		Operand1: 5, Operand2: uint64(len(hops))}
	payload = append(wire.AppendChain(nil, hops), "delta"...)
	ch.MsgLen = uint32(len(payload))
	if pkt, err = wire.AppendPacket(nil, &ch, payload); err != nil {
		t.Fatal(err)
	}
	f.log = append(f.log, sent{at: at, src: cli, dst: f.swAddr, buf: pkt})
	// An Adam step on four parameters.
	payload = wire.AppendOptim(nil, &wire.OptimParams{Algo: wire.OptimAdam, Step: 3, LR: 0.001, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8})
	payload = append(payload, make([]byte, 16)...)
	oh := wire.Header{Version: wire.Version, Op: wire.OpOptim, Mode: wire.ModePool, Group: 5, Key: 0xabcdef0123, MsgID: 51,
		Dtype: wire.DtypeF32, Addr: 0x400, Operand1: 1 << 16, MsgLen: uint32(len(payload))}
	if pkt, err = wire.AppendPacket(nil, &oh, payload); err != nil {
		t.Fatal(err)
	}
	f.log = append(f.log, sent{at: at, src: cli, dst: f.swAddr, buf: pkt})
	// The same chain, fenced (the trailer after the data).
	ch.MsgID, ch.Flags = 56, wire.FlagFence
	payload = wire.AppendFence(append(wire.AppendChain(nil, hops), "delta"...), wire.Fence{ID: 4, Token: 2<<32 | 0x1234})
	ch.MsgLen = uint32(len(payload))
	if pkt, err = wire.AppendPacket(nil, &ch, payload); err != nil {
		t.Fatal(err)
	}
	f.log = append(f.log, sent{at: at, src: cli, dst: f.swAddr, buf: pkt})
	// A fenced WRITE, a FENCE raise and a FENCED refusal.
	fw := wire.Header{Version: wire.Version, Op: wire.OpWrite, Mode: wire.ModePool, Flags: wire.FlagFence, Group: 5, Key: 0xabcdef0123, MsgID: 54, Addr: 0x200}
	payload = wire.AppendFence([]byte("fenced"), wire.Fence{ID: 4, Token: 2<<32 | 0x1234})
	fw.MsgLen = uint32(len(payload))
	if pkt, err = wire.AppendPacket(nil, &fw, payload); err != nil {
		t.Fatal(err)
	}
	f.log = append(f.log, sent{at: at, src: cli, dst: f.swAddr, buf: pkt})
	fr := wire.Header{Version: wire.Version, Op: wire.OpFence, Mode: wire.ModePool, Flags: wire.FlagFence, Group: 5, Key: 0xabcdef0123, MsgID: 55}
	payload = wire.AppendFence(nil, wire.Fence{ID: 4, Token: 3 << 32})
	fr.MsgLen = uint32(len(payload))
	if pkt, err = wire.AppendPacket(nil, &fr, payload); err != nil {
		t.Fatal(err)
	}
	f.log = append(f.log, sent{at: at, src: cli, dst: f.swAddr, buf: pkt})
	fd := wire.Header{Version: wire.Version, Op: wire.OpWrite, Mode: wire.ModePool, Flags: wire.FlagResp, Group: 5, MsgID: 54,
		Status: wire.StatusFenced, Operand1: 3 << 32}
	if pkt, err = wire.AppendPacket(nil, &fd, nil); err != nil {
		t.Fatal(err)
	}
	f.log = append(f.log, sent{at: at, src: f.swAddr, dst: cli, buf: pkt})
	// The switch tells a member that member 2 of group 7 left.
	eh := wire.Header{Version: wire.Version, Op: wire.OpEvent, Group: 7, Src: wire.MemberAll, Dst: 1, PSN: 9, AckBase: 9, MsgID: 52,
		Status: wire.StatusMemberDead, Operand1: 2, Operand2: 1}
	if pkt, err = wire.AppendPacket(nil, &eh, nil); err != nil {
		t.Fatal(err)
	}
	f.log = append(f.log, sent{at: at, src: f.swAddr, dst: cli, buf: pkt})
	// A NACK.
	nack := wire.Ack{Cum: 70, Window: 256, NBlocks: 1}
	nack.Blocks[0] = wire.SackBlock{Start: 72, End: 80}
	nh := wire.Header{Version: wire.Version, Op: wire.OpNack, Src: 1, Dst: wire.MemberAll, Group: 7}
	f.log = append(f.log, sent{at: at, src: cli, dst: f.swAddr, buf: wire.PutAckPacket(make([]byte, nack.AckPacketLen()), &nh, &nack)})
	// A header of every other opcode the wire package names, and a
	// response with every status it defines.
	for op := wire.Opcode(1); op < 0xff; op++ {
		if strings.HasPrefix(op.String(), "op(") || op == wire.OpAck || op == wire.OpNack {
			continue
		}
		h := wire.Header{Version: wire.Version, Op: op, PSN: 3, AckBase: 3, MsgID: 60 + uint64(op)}
		if op == wire.OpChain || op == wire.OpOptim {
			h.Mode = wire.ModePool
		}
		if pkt, err = wire.AppendPacket(nil, &h, nil); err != nil {
			t.Fatal(err)
		}
		f.log = append(f.log, sent{at: at, src: cli, dst: f.swAddr, buf: pkt})
	}
	// A NOP over IPv6, between ports no dissector claims.
	h6 := wire.Header{Version: wire.Version, Op: wire.OpNop, PSN: 4, AckBase: 4, MsgID: 80}
	if pkt, err = wire.AppendPacket(nil, &h6, nil); err != nil {
		t.Fatal(err)
	}
	f.log = append(f.log, sent{at: at, src: netip.MustParseAddrPort("[fd00::1]:40300"), dst: netip.MustParseAddrPort("[fd00::2]:40301"), buf: pkt})
	// Garbage to the switch's port: version 1, random bytes after it.
	rng := rand.New(rand.NewPCG(uint64(f.seed), 19))
	for range 20 {
		junk := make([]byte, wire.HeaderLen+rng.IntN(200))
		for i := range junk {
			junk[i] = byte(rng.Uint32())
		}
		junk[0] = wire.Version
		if rng.IntN(2) == 0 {
			junk[1] = byte(wire.OpControl) // a control message of random bytes
			binary.BigEndian.PutUint16(junk[40:], uint16(len(junk)-wire.HeaderLen))
		}
		f.log = append(f.log, sent{at: at, src: cli, dst: f.swAddr, buf: junk})
	}
	for st := wire.StatusOK; st.Known(); st++ {
		h := wire.Header{Version: wire.Version, Op: wire.OpRead, Mode: wire.ModePool, Flags: wire.FlagResp, Group: 5, MsgID: 70, Status: st}
		if pkt, err = wire.AppendPacket(nil, &h, nil); err != nil {
			t.Fatal(err)
		}
		f.log = append(f.log, sent{at: at, src: f.swAddr, dst: cli, buf: pkt})
	}
}
