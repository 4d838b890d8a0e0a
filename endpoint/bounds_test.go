package endpoint

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/ndma/ndma/memnode/server"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/wire"
)

// TestUnexpectedFloodBounded: a stranger floods fresh communicators and
// tags with empty messages (each costing no bytes, only an entry) and
// with messages of fresh ids; the unexpected tables stay within their
// counts, and an established peer's unexpected messages still get in.
func TestUnexpectedFloodBounded(t *testing.T) {
	c := newTestCore(t, Config{})
	now := simnet.Epoch()
	friend := netip.MustParseAddrPort("10.0.0.2:1")
	// The friend is established: a receive from it is posted.
	first := &Op{Kind: KindRecvMsg, Peer: friend, Comm: 1, Tag: 1, Buf: make([]byte, 16)}
	if err := c.Post(now, first); err != nil {
		t.Fatal(err)
	}
	// From 100 addresses (the transport holds back a refused packet and
	// keeps its window per peer).
	for a := range 100 {
		from := netip.AddrPortFrom(hostileAddr.Addr(), uint16(2000+a))
		f := newForger()
		for i := range 200 {
			h := wire.Header{Op: wire.OpSend, MsgID: uint64(i + 1), Key: uint64(a), Operand1: uint64(i), Operand2: 1}
			step(t, c, now, from, f.packet(h, nil))
		}
	}
	sz := tableSizes(c)
	if sz["unexpMsg"] > c.cfg.MaxUnexpectedMsgs/4 {
		t.Fatalf("%d unexpected messages from one stranger, bound %d", sz["unexpMsg"], c.cfg.MaxUnexpectedMsgs/4)
	}
	checkBounds(t, c)
	// The established peer's unexpected message is buffered and taken.
	ff := newForger()
	data := fill(16, 9)
	step(t, c, now, friend, ff.packet(wire.Header{Op: wire.OpSend, MsgID: 1, Key: 1, Operand1: 2, Operand2: 1, MsgLen: 16}, data))
	rv := &Op{Kind: KindRecvMsg, Peer: friend, Comm: 1, Tag: 2, Buf: make([]byte, 16)}
	if err := c.Post(now, rv); err != nil {
		t.Fatal(err)
	}
	if done := pollDone(c, now); len(done) != 1 || rv.Err != nil || !bytes.Equal(rv.Buf, data) {
		t.Fatalf("established peer's message: done %d err %v", len(done), rv.Err)
	}
}

// TestDeadMembersOnlyForJoinedGroups: member-dead events for groups this
// core is not in are dropped, and LeaveGroup forgets a group's entries.
func TestDeadMembersOnlyForJoinedGroups(t *testing.T) {
	c := groupCore(t, Config{})
	now := simnet.Epoch()
	f := newForger()
	for i := range 5000 {
		h := wire.Header{Op: wire.OpEvent, Group: uint32(1000 + i), Status: wire.StatusMemberDead, Operand1: uint64(i), MsgID: uint64(i + 1), Dst: wire.MemberAll}
		step(t, c, now, hostileAddr, f.packet(h, nil))
	}
	if n := len(c.deadMembers); n != 0 {
		t.Fatalf("%d dead members recorded for groups this core never joined", n)
	}
	step(t, c, now, swAddr, newForger().packet(wire.Header{Op: wire.OpEvent, Group: 7, Status: wire.StatusMemberDead, Operand1: 3, MsgID: 1, Dst: wire.MemberAll}, nil))
	if c.DeadMember(7, 3) == nil {
		t.Fatal("member death in a joined group not recorded")
	}
	c.LeaveGroup(7)
	if c.DeadMember(7, 3) != nil || len(c.joined) != 0 {
		t.Fatal("LeaveGroup kept the group's state")
	}
}

// TestForgetComm: the sequence numbers of a communicator's streams and
// its unexpected messages are freed by ForgetComm, others kept.
func TestForgetComm(t *testing.T) {
	c := newTestCore(t, Config{})
	now := simnet.Epoch()
	peer := netip.MustParseAddrPort("10.0.0.2:1")
	for comm := range uint32(3) {
		for tag := range uint64(10) {
			if err := c.Post(now, &Op{Kind: KindSendMsg, Peer: peer, Comm: comm, Tag: tag, Buf: []byte{1}}); err != nil {
				t.Fatal(err)
			}
			op := &Op{Kind: KindRecvMsg, Peer: peer, Comm: comm, Tag: tag, Buf: make([]byte, 1)}
			if err := c.Post(now, op); err != nil {
				t.Fatal(err)
			}
			c.Cancel(op)
		}
	}
	f := newForger()
	step(t, c, now, peer, f.packet(wire.Header{Op: wire.OpSend, MsgID: 1, Key: 1, Operand1: 99, Operand2: 1, MsgLen: 1}, []byte{1}))
	if len(c.sendSeq) != 30 || len(c.recvSeq) != 30 || len(c.unexpMsg) != 1 {
		t.Fatalf("tables before: %v", tableSizes(c))
	}
	c.ForgetComm(1)
	if len(c.sendSeq) != 20 || len(c.recvSeq) != 20 || len(c.unexpMsg) != 0 || c.unexpUse[0] != (unexpUse{}) {
		t.Fatalf("tables after ForgetComm: %v, use %v", tableSizes(c), c.unexpUse)
	}
	c.ForgetPeer(peer)
	if len(c.sendSeq) != 0 || len(c.recvSeq) != 0 || len(c.msgPeers) != 0 {
		t.Fatalf("tables after ForgetPeer: %v", tableSizes(c))
	}
}

// TestAnycastRequestsBounded: partial anycast requests are bounded in
// bytes (MaxIncomingBytes), and requests held (received or handed out
// and not answered) in number (MaxIncoming): beyond, the client gets
// StatusBusy; once answered, new requests are taken again.
func TestAnycastRequestsBounded(t *testing.T) {
	c := groupCore(t, Config{MaxIncoming: 4})
	now := simnet.Epoch()
	f := newForger()
	// Partial requests claiming 16 MiB each.
	for i := range 8 {
		h := wire.Header{Op: wire.OpData, Mode: wire.ModeAnycast, Group: 7, Src: wire.MemberAll, Dst: 1, MsgID: uint64(100 + i), MsgLen: 16 << 20}
		step(t, c, now, swAddr, f.packet(h, fill(100, 1)))
	}
	if n := anyInBytes(c); n > c.cfg.MaxIncomingBytes {
		t.Fatalf("%d bytes of partial requests, bound %d", n, c.cfg.MaxIncomingBytes)
	}
	// Their clients gave up: once idle for the dead timeout they are
	// forgotten when room is needed.
	now = now.Add(c.deadTimeout() + 1)
	refused := c.Stats().RequestsRefused
	// Complete requests nobody answers: at most MaxIncoming are held.
	for i := range 10 {
		h := wire.Header{Op: wire.OpData, Mode: wire.ModeAnycast, Group: 7, Src: wire.MemberAll, Dst: 1, MsgID: uint64(200 + i), MsgLen: 1}
		step(t, c, now, swAddr, f.packet(h, []byte{byte(i)}))
	}
	rs := c.Requests()
	if len(rs) != 4 || c.Stats().RequestsRefused-refused != 6 {
		t.Fatalf("%d requests handed out, %d refused; want 4 and 6", len(rs), c.Stats().RequestsRefused-refused)
	}
	for _, r := range rs {
		if err := c.Reply(r, nil, wire.StatusOK); err != nil {
			t.Fatal(err)
		}
	}
	step(t, c, now, swAddr, f.packet(wire.Header{Op: wire.OpData, Mode: wire.ModeAnycast, Group: 7, Src: wire.MemberAll, Dst: 1, MsgID: 300, MsgLen: 1}, []byte{1}))
	if rs := c.Requests(); len(rs) != 1 {
		t.Fatalf("after the answers: %d requests, want 1", len(rs))
	}
}

// TestPartialRequestsBounded: first packets of multi-packet one-sided
// requests with fresh ids are held back once server.MaxInRequests are being
// received; a request already under way still completes.
func TestPartialRequestsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("70k datagrams")
	}
	c := newTestCore(t, Config{})
	now := simnet.Epoch()
	f := newForger()
	h := wire.Header{Op: wire.OpNop, MsgID: 1, MsgLen: 20}
	step(t, c, now, hostileAddr, f.packet(h, fill(10, 1)))
	// The transport tracks at most 256 partial messages per peer: the
	// flood comes from 300 addresses.
	for a := range 300 {
		from := netip.AddrPortFrom(hostileAddr.Addr(), uint16(2000+a))
		f := newForger()
		for i := range 240 {
			h := wire.Header{Op: wire.OpNop, MsgID: uint64(i + 2), MsgLen: 20}
			c.Receive(now, netio.Datagram{Addr: from, Buf: f.packet(h, fill(10, 1))})
		}
	}
	if n := c.mem.InRequests(); n > server.MaxInRequests {
		t.Fatalf("%d partial requests, bound %d", n, server.MaxInRequests)
	}
	h.Offset = 10
	served := c.Stats().RequestsServed
	step(t, c, now, hostileAddr, f.packet(h, fill(10, 1)))
	if c.Stats().RequestsServed != served+1 {
		t.Fatal("the request under way was not served")
	}
}

// TestMemberLeftFailsNoMessage: a member that left finished its part, and
// a message to or from it may still be in flight when the switch's notice
// arrives: its leaving fails no two-sided op bound to it. Its crash fails
// them all, naming it.
func TestMemberLeftFailsNoMessage(t *testing.T) {
	c := groupCore(t, Config{})
	now := simnet.Epoch()
	peer := netip.MustParseAddrPort("10.0.0.9:9")
	send := &Op{Kind: KindSendMsg, Peer: peer, Comm: 1, Tag: 1, Buf: make([]byte, 8), Group: 7, From: 3}
	recv := &Op{Kind: KindRecvMsg, Peer: peer, Comm: 1, Tag: 2, Buf: make([]byte, 8), Group: 7, From: 3}
	for _, op := range []*Op{send, recv} {
		if err := c.Post(now, op); err != nil {
			t.Fatal(err)
		}
	}
	f := newForger()
	step(t, c, now, swAddr, f.packet(wire.Header{Op: wire.OpEvent, Group: 7, Status: wire.StatusMemberDead, Operand1: 3, Operand2: 1, MsgID: 1, Dst: wire.MemberAll}, nil))
	if done := pollDone(c, now); len(done) != 0 {
		t.Fatalf("member 3 left: %d ops failed (%v), want none", len(done), done[0].Err)
	}
	step(t, c, now, swAddr, f.packet(wire.Header{Op: wire.OpEvent, Group: 7, Status: wire.StatusMemberDead, Operand1: 3, MsgID: 2, Dst: wire.MemberAll}, nil))
	done := pollDone(c, now)
	var me *MemberError
	if len(done) != 2 || !errors.As(done[0].Err, &me) || me.Member != 3 || me.Left {
		t.Fatalf("member 3 crashed: %d ops done, err %v", len(done), done)
	}
}
