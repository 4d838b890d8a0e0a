package endpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/transport"
)

// TestSimMessages: two-sided messages between 4 cores over impaired links
// arrive whole, in per-(source, comm, tag) order, whether the receive is
// posted before or after the message arrives.
func TestSimMessages(t *testing.T) {
	for _, loss := range []float64{0, 0.05, 0.2} {
		t.Run(fmt.Sprintf("loss=%v", loss), func(t *testing.T) {
			seed := int64(300 + loss*100)
			t.Logf("seed %d", seed)
			net := simnet.New(seed)
			l := simnet.LinkConfig{Rate: 1e9, Latency: 5 * time.Microsecond, Loss: loss}
			if loss > 0 {
				l.Reorder, l.Dup, l.Corrupt = 0.05, 0.02, 0.01
			}
			const n = 4
			cores := make([]*Core, n)
			addrs := make([]netip.AddrPort, n)
			var done []*Op
			for i := range n {
				c, err := NewCore(Config{Transport: transport.Config{MTU: 1500, Seed: uint64(seed) + uint64(i)}, OpTimeout: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				cores[i] = c
				addrs[i] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), 1)
				net.Attach(addrs[i], simCore(c, func(_ time.Time, op *Op) { done = append(done, op) }, nil), l, l)
			}
			r := rand.New(rand.NewPCG(uint64(seed), 3))
			var sends, recvs []*Op
			want := map[*Op][]byte{}
			// Every ordered pair exchanges 20 messages on 2 tags; for half
			// the pairs the receives are posted only after the messages
			// began to arrive or arrived (unexpected messages).
			type lateRecv struct {
				dst int
				op  *Op
			}
			var late []lateRecv
			for src := range n {
				for dst := range n {
					if src == dst {
						continue
					}
					for j := range 20 {
						tag := uint64(j % 2)
						data := make([]byte, r.IntN(6000))
						for k := range data {
							data[k] = byte(r.Uint32())
						}
						s := &Op{Kind: KindSendMsg, Peer: addrs[dst], Comm: 7, Tag: tag, Buf: data}
						if err := cores[src].Post(net.Now(), s); err != nil {
							t.Fatal(err)
						}
						sends = append(sends, s)
						rv := &Op{Kind: KindRecvMsg, Peer: addrs[src], Comm: 7, Tag: tag, Buf: make([]byte, 6000)}
						want[rv] = data
						recvs = append(recvs, rv)
						if (src+dst)%2 == 0 {
							late = append(late, lateRecv{dst, rv})
							continue
						}
						if err := cores[dst].Post(net.Now(), rv); err != nil {
							t.Fatal(err)
						}
					}
					net.Wake(addrs[src])
				}
			}
			// The first half of the late receives are posted one by one while
			// the messages arrive (some find a message partly there), the
			// rest once everything arrived.
			half := len(late) / 2
			for i, lr := range late {
				if i < half {
					net.RunFor(40 * time.Microsecond)
				} else if i == half {
					net.RunFor(20 * time.Millisecond)
				}
				if err := cores[lr.dst].Post(net.Now(), lr.op); err != nil {
					t.Fatal(err)
				}
				net.Wake(addrs[lr.dst])
			}
			total := len(sends) + len(recvs)
			if err := net.RunUntil(func() bool { return len(done) == total }, time.Hour); err != nil {
				t.Fatalf("seed %d: %v (%d of %d done)", seed, err, len(done), total)
			}
			for _, rv := range recvs {
				if rv.Err != nil || !bytes.Equal(rv.Buf[:rv.N], want[rv]) {
					t.Fatalf("seed %d: receive from %v tag %d: err %v, %d bytes, match %v", seed, rv.Peer, rv.Tag, rv.Err, rv.N, bytes.Equal(rv.Buf[:rv.N], want[rv]))
				}
			}
			for _, s := range sends {
				if s.Err != nil {
					t.Fatalf("seed %d: send: %v", seed, s.Err)
				}
			}
		})
	}
}

// TestSimMessageTruncated: a message longer than the posted buffer fails
// the receive with ErrTruncated; the next message on the stream is fine.
func TestSimMessageTruncated(t *testing.T) {
	net := simnet.New(9)
	l := simnet.LinkConfig{Rate: 1e9, Latency: 5 * time.Microsecond}
	var done []*Op
	a, _ := NewCore(Config{Transport: transport.Config{MTU: 1500, Seed: 1}})
	b, _ := NewCore(Config{Transport: transport.Config{MTU: 1500, Seed: 2}})
	aa, ba := netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("10.0.0.2:1")
	net.Attach(aa, simCore(a, func(_ time.Time, op *Op) { done = append(done, op) }, nil), l, l)
	net.Attach(ba, simCore(b, func(_ time.Time, op *Op) { done = append(done, op) }, nil), l, l)
	for _, size := range []int{5000, 10} {
		if err := a.Post(net.Now(), &Op{Kind: KindSendMsg, Peer: ba, Tag: 1, Buf: make([]byte, size)}); err != nil {
			t.Fatal(err)
		}
	}
	r1 := &Op{Kind: KindRecvMsg, Peer: aa, Tag: 1, Buf: make([]byte, 100)}
	r2 := &Op{Kind: KindRecvMsg, Peer: aa, Tag: 1, Buf: make([]byte, 100)}
	_ = b.Post(net.Now(), r1)
	_ = b.Post(net.Now(), r2)
	net.Wake(aa)
	if err := net.RunUntil(func() bool { return len(done) == 4 }, time.Second); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(r1.Err, ErrTruncated) || r2.Err != nil || r2.N != 10 {
		t.Fatalf("r1 %v, r2 %v n=%d", r1.Err, r2.Err, r2.N)
	}
	if err := net.RunUntil(func() bool { return a.Idle() && b.Idle() }, time.Second); err != nil {
		t.Fatalf("state left behind: %v", err)
	}
}

// TestUDPMessages: SendMsg/RecvMsg over loopback.
func TestUDPMessages(t *testing.T) {
	a, b := listen(t), listen(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	data := bytes.Repeat([]byte("ndma"), 100000)
	errc := make(chan error, 1)
	go func() { errc <- a.SendMsg(ctx, b.LocalAddr(), 1, 42, data) }()
	buf := make([]byte, len(data)+10)
	n, err := b.RecvMsg(ctx, a.LocalAddr(), 1, 42, buf)
	if err != nil || n != len(data) || !bytes.Equal(buf[:n], data) {
		t.Fatalf("recv: %v n=%d", err, n)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestNoDefaultDeadline: a message receive has no default deadline (a
// collective takes as long as its data needs), while a one-sided READ
// with no Timeout of its own fails at OpTimeout; an explicit Timeout still
// bounds a receive.
func TestNoDefaultDeadline(t *testing.T) {
	c, err := NewCore(Config{Transport: transport.Config{Seed: 1}, OpTimeout: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	peer := netip.MustParseAddrPort("10.0.0.9:1")
	now := time.Unix(1000, 0)
	recv := &Op{Kind: KindRecvMsg, Peer: peer, Tag: 1, Buf: make([]byte, 8)}
	bounded := &Op{Kind: KindRecvMsg, Peer: peer, Tag: 2, Buf: make([]byte, 8), Timeout: 50 * time.Millisecond}
	read := &Op{Kind: KindRead, Peer: peer, Key: 1, Buf: make([]byte, 8)}
	for _, op := range []*Op{recv, bounded, read} {
		if err := c.Post(now, op); err != nil {
			t.Fatal(err)
		}
	}
	finished := map[*Op]bool{}
	for _, dt := range []time.Duration{20 * time.Millisecond, time.Second, time.Hour} {
		_, done, _ := c.Poll(now.Add(dt), nil)
		for _, op := range done {
			finished[op] = true
		}
	}
	if !finished[read] || !errors.Is(read.Err, ErrTimeout) {
		t.Errorf("READ: finished %v, err %v; want ErrTimeout", finished[read], read.Err)
	}
	if !finished[bounded] || !errors.Is(bounded.Err, ErrTimeout) {
		t.Errorf("receive with a Timeout: finished %v, err %v; want ErrTimeout", finished[bounded], bounded.Err)
	}
	if finished[recv] {
		t.Errorf("receive without a Timeout ended after an hour: %v", recv.Err)
	}
	c.Cancel(recv)
}
