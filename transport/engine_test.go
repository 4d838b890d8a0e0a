package transport

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/wire"
)

// node adapts an Engine to simnet and records what it delivers.
type node struct {
	t     testing.TB
	e     *Engine
	addr  netip.AddrPort
	comps []Completion
	// reassembly of received messages, by (peer, msg id)
	rx   map[rxKey][]byte
	done map[rxKey][]byte
}

type rxKey struct {
	from netip.AddrPort
	id   uint64
}

func newNode(t testing.TB, addr string, cfg Config) *node {
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &node{t: t, e: e, addr: netip.MustParseAddrPort(addr), rx: map[rxKey][]byte{}, done: map[rxKey][]byte{}}
}

func (n *node) Receive(now time.Time, d netio.Datagram) {
	del, ok := n.e.Receive(now, d, Admission{})
	if !ok {
		return
	}
	k := rxKey{d.Addr, del.Header.MsgID}
	if _, dup := n.done[k]; dup {
		n.t.Errorf("message %d delivered again after completion", k.id)
	}
	buf := n.rx[k]
	if buf == nil {
		buf = make([]byte, del.Header.MsgLen)
		n.rx[k] = buf
	}
	copy(buf[del.Header.Offset:], del.Payload)
	if del.MsgDone {
		n.done[k] = buf
		delete(n.rx, k)
	}
}

func (n *node) Poll(now time.Time, out []netio.Datagram) ([]netio.Datagram, time.Time) {
	out, comps, next := n.e.Poll(now, out)
	n.comps = append(n.comps, comps...)
	return out, next
}

func link(rate float64, lat time.Duration, loss, reorder, dup, corrupt float64) simnet.LinkConfig {
	return simnet.LinkConfig{Rate: rate, Latency: lat, Loss: loss, Reorder: reorder, Dup: dup, Corrupt: corrupt}
}

// TestTransferUnderImpairments sends many messages of random sizes each
// way between two engines over links with loss, reordering, duplication
// and corruption, and checks every byte arrives exactly once.
func TestTransferUnderImpairments(t *testing.T) {
	for _, loss := range []float64{0, 0.01, 0.10, 0.30} {
		t.Run(fmt.Sprintf("loss=%v", loss), func(t *testing.T) {
			seed := int64(1000 + loss*1000)
			t.Logf("seed %d", seed)
			net := simnet.New(seed)
			cfg := Config{MTU: 1500, Seed: uint64(seed), DeadTimeout: time.Minute}
			a := newNode(t, "10.0.0.1:1", cfg)
			cfg.Seed++
			b := newNode(t, "10.0.0.2:1", cfg)
			l := link(1e9, 10*time.Microsecond, loss, 0.05, 0.02, 0.02)
			if loss == 0 {
				l = link(1e9, 10*time.Microsecond, 0, 0, 0, 0)
			}
			net.Attach(a.addr, a, l, l)
			net.Attach(b.addr, b, l, l)
			rng := rand.New(rand.NewPCG(uint64(seed), 1))
			sent := map[rxKey][]byte{}
			const msgs = 300
			for i := 0; i < msgs; i++ {
				src, dst := a, b
				if i%3 == 2 {
					src, dst = b, a
				}
				size := rng.IntN(20000)
				if i%10 == 0 {
					size = 0
				}
				p := make([]byte, size)
				for j := range p {
					p[j] = byte(rng.Uint32())
				}
				h := wire.Header{Op: wire.OpWrite}
				id, err := src.e.Send(PeerID{Addr: dst.addr}, &h, p, uint64(i))
				if err != nil {
					t.Fatal(err)
				}
				sent[rxKey{src.addr, id}] = p
				net.Wake(src.addr)
			}
			err := net.RunUntil(func() bool {
				return len(a.comps)+len(b.comps) == msgs && len(a.done)+len(b.done) == msgs
			}, 10*time.Minute)
			if err != nil {
				t.Fatalf("seed %d: %v (completions %d/%d, delivered %d) a=%+v b=%+v", seed, err,
					len(a.comps)+len(b.comps), msgs, len(a.done)+len(b.done), a.e.Stats(), b.e.Stats())
			}
			for _, c := range append(a.comps, b.comps...) {
				if c.Err != nil {
					t.Fatalf("seed %d: completion error %v", seed, c.Err)
				}
			}
			for k, want := range sent {
				var got []byte
				var ok bool
				if k.from == a.addr {
					got, ok = b.done[rxKey{a.addr, k.id}]
				} else {
					got, ok = a.done[rxKey{b.addr, k.id}]
				}
				if !ok || !bytes.Equal(got, want) {
					t.Fatalf("seed %d: message %d from %v corrupted or missing (ok=%v)", seed, k.id, k.from, ok)
				}
			}
			// Rings kept for reuse are zeroed: an idle peer's is returned
			// without clearing, so every record must have been zeroed as
			// the stream passed it.
			pooled := 0
			for _, n := range []*node{a, b} {
				for _, r := range append(append([][]pktRec{}, n.e.rings...), n.e.smallRings...) {
					pooled++
					for i, rec := range r {
						if rec != (pktRec{}) {
							t.Fatalf("seed %d: a pooled ring's record %d is %+v", seed, i, rec)
						}
					}
				}
			}
			if pooled == 0 {
				t.Fatalf("seed %d: no ring was returned to the pool", seed)
			}
			t.Logf("virtual %v, a: %+v", net.Elapsed(), a.e.Stats())
		})
	}
}

// TestDeadPeer checks that a peer that stops answering fails the
// outstanding messages with a *PeerError within DeadTimeout.
func TestDeadPeer(t *testing.T) {
	net := simnet.New(7)
	cfg := Config{Seed: 7, DeadTimeout: 200 * time.Millisecond}
	a := newNode(t, "10.0.0.1:1", cfg)
	b := newNode(t, "10.0.0.2:1", cfg)
	l := link(1e9, 10*time.Microsecond, 0, 0, 0, 0)
	net.Attach(a.addr, a, l, l)
	net.Attach(b.addr, b, l, l)
	net.Detach(b.addr)
	h := wire.Header{Op: wire.OpWrite}
	if _, err := a.e.Send(PeerID{Addr: b.addr}, &h, make([]byte, 50000), 1); err != nil {
		t.Fatal(err)
	}
	net.Wake(a.addr)
	if err := net.RunUntil(func() bool { return len(a.comps) == 1 }, time.Second); err != nil {
		t.Fatal(err)
	}
	var pe *PeerError
	if !errors.As(a.comps[0].Err, &pe) || !errors.Is(a.comps[0].Err, ErrPeerDead) || pe.Peer.Addr != b.addr {
		t.Fatalf("got %v", a.comps[0].Err)
	}
	if el := net.Elapsed(); el > 300*time.Millisecond {
		t.Fatalf("took %v of virtual time", el)
	}
	if a.e.Peers() != 0 {
		t.Fatalf("dead peer state kept")
	}
}

// TestBoundedQueue checks Send refuses work beyond MaxMessages.
func TestBoundedQueue(t *testing.T) {
	e, err := New(Config{MaxMessages: 4, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	to := PeerID{Addr: netip.MustParseAddrPort("10.0.0.9:9")}
	h := wire.Header{Op: wire.OpWrite}
	for i := 0; i < 4; i++ {
		if _, err := e.Send(to, &h, []byte("x"), 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Send(to, &h, []byte("x"), 0); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("got %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []Config{{MTU: 50}, {SendWindow: 1000}, {RecvWindow: 3}, {MinRTO: time.Second, MaxRTO: time.Millisecond}, {MinCwnd: 0.5}}
	for _, c := range bad {
		if _, err := New(c); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: got %v", c, err)
		}
	}
}

// TestMalformedCounted feeds garbage to Receive.
func TestMalformedCounted(t *testing.T) {
	e, _ := New(Config{Seed: 3})
	from := netip.MustParseAddrPort("10.0.0.9:9")
	rng := rand.New(rand.NewPCG(3, 3))
	for i := 0; i < 1000; i++ {
		b := make([]byte, rng.IntN(300))
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		if _, ok := e.Receive(time.Unix(0, 0), netio.Datagram{Addr: from, Buf: b}, Admission{}); ok {
			t.Fatal("garbage delivered")
		}
	}
	if e.Stats().Malformed != 1000 {
		t.Fatalf("malformed %d", e.Stats().Malformed)
	}
}

// TestPeerIDString: a point-to-point peer is its address; a group stream
// says group, member (or switch) and mode in words.
func TestPeerIDString(t *testing.T) {
	a := netip.MustParseAddrPort("10.0.0.1:7471")
	for _, c := range []struct {
		id   PeerID
		want string
	}{
		{PeerID{Addr: a}, "10.0.0.1:7471"},
		{PeerID{Addr: a, Group: 3, Member: wire.MemberAll, Mode: wire.ModeMulticast}, "10.0.0.1:7471 (group 3, switch, multicast)"},
		{PeerID{Addr: a, Group: 3, Member: 2}, "10.0.0.1:7471 (group 3, member 2, unicast)"},
	} {
		if got := c.id.String(); got != c.want {
			t.Errorf("%q, want %q", got, c.want)
		}
	}
}

// TestVerified: an engine behind a security layer (Config.Verified)
// sends datagrams without a checksum and takes them so; an engine without
// it counts such a datagram malformed.
func TestVerified(t *testing.T) {
	aAddr := netip.MustParseAddrPort("10.0.0.1:1")
	cAddr := netip.MustParseAddrPort("10.0.0.2:1")
	now := time.Unix(1, 0)
	a, _ := New(Config{Seed: 1, Verified: true})
	c, _ := New(Config{Seed: 2, Verified: true})
	plain, _ := New(Config{Seed: 3})
	h := wire.Header{Op: wire.OpWrite}
	if _, err := a.Send(PeerID{Addr: cAddr}, &h, []byte("verified by the layer below"), 0); err != nil {
		t.Fatal(err)
	}
	out, _, _ := a.Poll(now, nil)
	if len(out) != 1 {
		t.Fatalf("%d datagrams, want 1", len(out))
	}
	if crc := out[0].Buf[92:96]; !bytes.Equal(crc, make([]byte, 4)) {
		t.Fatalf("checksum %x computed, want none", crc)
	}
	if _, ok := plain.Receive(now, netio.Datagram{Addr: aAddr, Buf: bytes.Clone(out[0].Buf)}, Admission{}); ok || plain.Stats().Malformed != 1 {
		t.Fatalf("an engine checking checksums took it (malformed %d)", plain.Stats().Malformed)
	}
	d, ok := c.Receive(now, netio.Datagram{Addr: aAddr, Buf: out[0].Buf}, Admission{})
	if !ok || string(d.Payload) != "verified by the layer below" {
		t.Fatalf("delivered %v %q", ok, d.Payload)
	}
}

// TestForgetGroup: ForgetGroup drops the streams of one group with one
// address, whatever their member and mode, failing what they had
// outstanding, and leaves the group's streams with other addresses and
// other groups' streams alone.
func TestForgetGroup(t *testing.T) {
	e, err := New(Config{GroupModes: true, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	sw := netip.MustParseAddrPort("10.0.0.1:7471")
	other := netip.MustParseAddrPort("10.0.0.2:7471")
	ids := []PeerID{
		{Addr: sw, Group: 5, Member: wire.MemberAll, Mode: wire.ModeAnycast},
		{Addr: sw, Group: 5, Member: 3, Mode: wire.ModeUnicast},
		{Addr: sw, Group: 5, Member: wire.MemberAll, Mode: wire.ModeAggregate},
		{Addr: other, Group: 5, Member: wire.MemberAll, Mode: wire.ModeAnycast},
		{Addr: sw, Group: 6, Member: wire.MemberAll, Mode: wire.ModeAnycast},
	}
	for i, id := range ids {
		h := wire.Header{Op: wire.OpData}
		if _, err := e.Send(id, &h, []byte("x"), uint64(i+1)); err != nil {
			t.Fatalf("send to %+v: %v", id, err)
		}
	}
	e.ForgetGroup(sw, 5, nil)
	for i, id := range ids {
		want := 1
		if i < 3 {
			want = 0
		}
		if got := e.PeerMessages(id); got != want {
			t.Errorf("%+v: %d messages outstanding after ForgetGroup, want %d", id, got, want)
		}
	}
	_, done, _ := e.Poll(t0, nil)
	failed := map[uint64]bool{}
	for _, c := range done {
		if c.Err != nil {
			failed[c.Token] = true
		}
	}
	if len(failed) != 3 || !failed[1] || !failed[2] || !failed[3] {
		t.Errorf("failed completions %v, want tokens 1, 2 and 3", failed)
	}
	e.ForgetGroup(sw, 99, nil) // no such group: nothing happens
}

// TestSelfStallNotPeersSilence: a sender whose own process stopped for
// longer than DeadTimeout with a message in flight (its Poll comes 3 s
// after the deadline it gave: it ran no timer and read nothing) does not
// take the peer for dead at once: the silence was its own. The peer is
// declared dead only when it stays silent for DeadTimeout of the
// sender's running time after that.
func TestSelfStallNotPeersSilence(t *testing.T) {
	e, err := New(Config{Seed: 8, DeadTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	to := PeerID{Addr: netip.MustParseAddrPort("10.0.0.9:9")}
	h := wire.Header{Op: wire.OpWrite}
	if _, err := e.Send(to, &h, make([]byte, 5000), 1); err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	_, comps, next := e.Poll(t0, nil)
	if len(comps) != 0 || next.IsZero() {
		t.Fatalf("first poll: %d completions, next %v", len(comps), next)
	}
	// Stopped: the next Poll comes 3 s after the deadline.
	resumed := next.Add(3 * time.Second)
	_, comps, _ = e.Poll(resumed, nil)
	if len(comps) != 0 {
		t.Fatalf("after its own stall: %v", comps[0].Err)
	}
	if st := e.Stats(); st.SelfStalls != 1 || st.PeersDead != 0 {
		t.Fatalf("after the stall: %+v", st)
	}
	// Silent for DeadTimeout of running time after it: dead.
	var failed []Completion
	for now := resumed; now.Before(resumed.Add(3*time.Second)) && len(failed) == 0; now = now.Add(10 * time.Millisecond) {
		_, comps, _ = e.Poll(now, nil)
		failed = append(failed, comps...)
	}
	if len(failed) != 1 || !errors.Is(failed[0].Err, ErrPeerDead) {
		t.Fatalf("a peer silent after the stall: %v", failed)
	}
}
