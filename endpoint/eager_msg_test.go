package endpoint

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/transport"
)

// eagerPair is two cores on a simnet, a's ops completing into done.
type eagerPair struct {
	net    *simnet.Network
	a, b   *Core
	aa, ba netip.AddrPort
	done   []*Op
}

func newEagerPair(t *testing.T, seed int64, tc transport.Config) *eagerPair {
	t.Helper()
	t.Logf("seed %d", seed)
	p := &eagerPair{net: simnet.New(seed), aa: netip.MustParseAddrPort("10.0.0.1:1"), ba: netip.MustParseAddrPort("10.0.0.2:1")}
	l := simnet.LinkConfig{Rate: 1e9, Latency: 5 * time.Microsecond}
	var err error
	tc.Seed = uint64(seed)
	if p.a, err = NewCore(Config{Transport: tc}); err != nil {
		t.Fatal(err)
	}
	tc.Seed++
	if p.b, err = NewCore(Config{Transport: tc}); err != nil {
		t.Fatal(err)
	}
	p.net.Attach(p.aa, simCore(p.a, func(_ time.Time, op *Op) { p.done = append(p.done, op) }, nil), l, l)
	p.net.Attach(p.ba, simCore(p.b, func(_ time.Time, op *Op) { p.done = append(p.done, op) }, nil), l, l)
	return p
}

// TestSimEagerSend: an eager two-sided send completes when it is posted,
// though the peer's ACKs never come back, and the peer receives the bytes
// as they were then, not as the caller rewrote its buffer afterwards; a
// send without Eager waits for the ACK that does not come.
func TestSimEagerSend(t *testing.T) {
	p := newEagerPair(t, 71, transport.Config{MTU: 1500})
	// Nothing reaches a: b's ACKs are lost.
	l := simnet.LinkConfig{Rate: 1e9, Latency: 5 * time.Microsecond}
	p.net.SetLink(p.aa, l, simnet.LinkConfig{Rate: 1e9, Latency: 5 * time.Microsecond, Loss: 1})
	buf := bytes.Repeat([]byte{7}, 3000)
	eager := &Op{Kind: KindSendMsg, Peer: p.ba, Tag: 1, Buf: buf, Eager: true}
	if err := p.a.Post(p.net.Now(), eager); err != nil {
		t.Fatal(err)
	}
	if !eager.finished || eager.Err != nil {
		t.Fatalf("eager send not complete at once: finished %v, err %v", eager.finished, eager.Err)
	}
	for i := range buf {
		buf[i] = 9 // the caller's buffer is its own again
	}
	plain := &Op{Kind: KindSendMsg, Peer: p.ba, Tag: 2, Buf: make([]byte, 100)}
	if err := p.a.Post(p.net.Now(), plain); err != nil {
		t.Fatal(err)
	}
	recv := &Op{Kind: KindRecvMsg, Peer: p.aa, Tag: 1, Buf: make([]byte, 4000)}
	if err := p.b.Post(p.net.Now(), recv); err != nil {
		t.Fatal(err)
	}
	p.net.Wake(p.aa)
	if err := p.net.RunUntil(func() bool { return recv.finished }, time.Second); err != nil {
		t.Fatal(err)
	}
	if recv.Err != nil || !bytes.Equal(recv.Buf[:recv.N], bytes.Repeat([]byte{7}, 3000)) {
		t.Fatalf("received %d bytes (err %v), not the 3000 sevens sent", recv.N, recv.Err)
	}
	p.net.RunFor(100 * time.Millisecond)
	if plain.finished {
		t.Fatalf("a send without Eager completed without its ACK: %v", plain.Err)
	}
	if !p.a.Owed() {
		t.Fatal("the core owes nothing while its eager send is unacknowledged")
	}
}

// TestSimEagerSendFailure: an eager send whose peer never acknowledges
// fails, once the transport gives up, the receive from that peer that
// waits and every two-sided operation with the peer posted later, with
// the transport's *PeerError; ForgetPeer clears it.
func TestSimEagerSendFailure(t *testing.T) {
	p := newEagerPair(t, 72, transport.Config{MTU: 1500, DeadTimeout: 200 * time.Millisecond})
	p.net.Detach(p.ba) // b is gone
	send := &Op{Kind: KindSendMsg, Peer: p.ba, Tag: 1, Buf: []byte("hello"), Eager: true}
	if err := p.a.Post(p.net.Now(), send); err != nil {
		t.Fatal(err)
	}
	if !send.finished || send.Err != nil {
		t.Fatalf("eager send: finished %v, err %v", send.finished, send.Err)
	}
	recv := &Op{Kind: KindRecvMsg, Peer: p.ba, Tag: 1, Buf: make([]byte, 8)}
	if err := p.a.Post(p.net.Now(), recv); err != nil {
		t.Fatal(err)
	}
	p.net.Wake(p.aa)
	if err := p.net.RunUntil(func() bool { return recv.finished }, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	var pe *transport.PeerError
	if !errors.As(recv.Err, &pe) {
		t.Fatalf("receive from the peer: %v, want a *transport.PeerError", recv.Err)
	}
	if p.a.Owed() {
		t.Fatal("the failed eager send is still owed")
	}
	for _, op := range []*Op{
		{Kind: KindSendMsg, Peer: p.ba, Tag: 1, Buf: []byte("again"), Eager: true},
		{Kind: KindSendMsg, Peer: p.ba, Tag: 1, Buf: []byte("again")},
		{Kind: KindRecvMsg, Peer: p.ba, Tag: 3, Buf: make([]byte, 8)},
	} {
		if err := p.a.Post(p.net.Now(), op); err != nil {
			t.Fatal(err)
		}
		if !op.finished || !errors.As(op.Err, &pe) {
			t.Fatalf("%v posted after the failure: finished %v, err %v", op.Kind, op.finished, op.Err)
		}
	}
	p.a.ForgetPeer(p.ba)
	again := &Op{Kind: KindSendMsg, Peer: p.ba, Tag: 1, Buf: []byte("again")}
	if err := p.a.Post(p.net.Now(), again); err != nil {
		t.Fatal(err)
	}
	if again.finished {
		t.Fatalf("send after ForgetPeer failed at once: %v", again.Err)
	}
	p.a.Cancel(again)
}

// TestSimEagerSendBacklog: while eagerBacklog messages to one peer are
// unacknowledged, an eager send waits as one without Eager; all arrive in
// order once the peer answers.
func TestSimEagerSendBacklog(t *testing.T) {
	p := newEagerPair(t, 73, transport.Config{MTU: 1500})
	var sends []*Op
	for i := range eagerBacklog + 5 {
		op := &Op{Kind: KindSendMsg, Peer: p.ba, Tag: 1, Buf: []byte{byte(i)}, Eager: true}
		if err := p.a.Post(p.net.Now(), op); err != nil {
			t.Fatal(err)
		}
		sends = append(sends, op)
	}
	for i, op := range sends {
		if op.finished != (i < eagerBacklog) {
			t.Fatalf("send %d of %d: finished %v at post", i, len(sends), op.finished)
		}
	}
	var recvs []*Op
	for range sends {
		op := &Op{Kind: KindRecvMsg, Peer: p.aa, Tag: 1, Buf: make([]byte, 1)}
		if err := p.b.Post(p.net.Now(), op); err != nil {
			t.Fatal(err)
		}
		recvs = append(recvs, op)
	}
	p.net.Wake(p.aa)
	if err := p.net.RunUntil(func() bool {
		for _, op := range append(sends, recvs...) {
			if !op.finished {
				return false
			}
		}
		return true
	}, time.Second); err != nil {
		t.Fatal(err)
	}
	for i, op := range recvs {
		if op.Err != nil || op.N != 1 || op.Buf[0] != byte(i) {
			t.Fatalf("receive %d: err %v, %d bytes %v", i, op.Err, op.N, op.Buf[:op.N])
		}
	}
	if err := p.net.RunUntil(func() bool { return !p.a.Owed() }, time.Second); err != nil {
		t.Fatalf("eager sends still owed: %v", err)
	}
}

// TestSimRefusedSendKeepsOrder: a two-sided send the transport refuses
// (its queue to the peer is full) takes no sequence number, so the
// stream's next message matches the receiver's next receive. With and
// without Eager.
func TestSimRefusedSendKeepsOrder(t *testing.T) {
	for _, eager := range []bool{false, true} {
		p := newEagerPair(t, 74, transport.Config{MTU: 1500, MaxPeerMessages: 4})
		var sends []*Op
		post := func(b byte) error {
			op := &Op{Kind: KindSendMsg, Peer: p.ba, Tag: 1, Buf: []byte{b}, Eager: eager}
			err := p.a.Post(p.net.Now(), op)
			if err == nil {
				sends = append(sends, op)
			}
			return err
		}
		for i := range 4 {
			if err := post(byte(i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := post(99); !errors.Is(err, transport.ErrQueueFull) {
			t.Fatalf("eager %v: fifth send: %v, want ErrQueueFull", eager, err)
		}
		p.net.Wake(p.aa)
		p.net.RunFor(10 * time.Millisecond)
		if err := post(4); err != nil {
			t.Fatalf("eager %v: send after the queue drained: %v", eager, err)
		}
		p.net.Wake(p.aa)
		var recvs []*Op
		for range 5 {
			op := &Op{Kind: KindRecvMsg, Peer: p.aa, Tag: 1, Buf: make([]byte, 1)}
			if err := p.b.Post(p.net.Now(), op); err != nil {
				t.Fatal(err)
			}
			recvs = append(recvs, op)
		}
		if err := p.net.RunUntil(func() bool { return recvs[4].finished }, time.Second); err != nil {
			for i, op := range recvs {
				t.Logf("recv %d: finished %v err %v", i, op.finished, op.Err)
			}
			for i, op := range sends {
				t.Logf("send %d: finished %v err %v", i, op.finished, op.Err)
			}
			t.Fatalf("eager %v: the send after the refused one never matched: %v", eager, err)
		}
		for i, op := range recvs {
			if op.Err != nil || op.N != 1 || op.Buf[0] != byte(i) {
				t.Fatalf("eager %v: receive %d: err %v, %v", eager, i, op.Err, op.Buf[:op.N])
			}
		}
	}
}

// TestEagerSendBound: eager copies are bounded over all peers: with
// eagerMaxOut unacknowledged (peers that never answer), the next eager
// send waits as a plain one, and each peer's own backlog bound holds.
func TestEagerSendBound(t *testing.T) {
	c, err := NewCore(Config{Transport: transport.Config{Seed: 1, MaxPeerMessages: 1024}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	eager := 0
	peers := eagerMaxOut/eagerBacklog + 2
	for p := range peers {
		peer := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 1, byte(p + 1)}), 1)
		for range eagerBacklog + 1 {
			op := &Op{Kind: KindSendMsg, Peer: peer, Tag: 1, Buf: []byte("x"), Eager: true}
			if err := c.Post(now, op); err != nil {
				t.Fatal(err)
			}
			if op.finished {
				eager++
			}
		}
	}
	if eager != eagerMaxOut || c.eagerOut != eagerMaxOut {
		t.Fatalf("%d sends completed eagerly (%d owed) to %d silent peers, want %d", eager, c.eagerOut, peers, eagerMaxOut)
	}
}
