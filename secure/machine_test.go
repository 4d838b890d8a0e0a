package secure

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/netio/loop"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/wire"
)

// chatter is a plain machine: it sends its queue at the next Poll and
// keeps what it receives.
type chatter struct {
	queue []netio.Datagram
	got   [][]byte
	from  []netip.AddrPort
}

func (c *chatter) Receive(now time.Time, d netio.Datagram) {
	c.got = append(c.got, bytes.Clone(d.Buf))
	c.from = append(c.from, d.Addr)
}

func (c *chatter) Poll(now time.Time, out []netio.Datagram) ([]netio.Datagram, time.Time) {
	out = append(out, c.queue...)
	c.queue = c.queue[:0]
	return out, time.Time{}
}

// wireTap records every datagram its machine receives off the network.
type wireTap struct {
	simnet.Node
	seen [][]byte
}

func (t *wireTap) Receive(now time.Time, d netio.Datagram) {
	t.seen = append(t.seen, bytes.Clone(d.Buf))
	t.Node.Receive(now, d)
}

// TestWrapOnSimnet: two machines wrapped by layers of one fabric talk on
// the simulated network: what one sends arrives at the other exactly as
// sent and in order, after a handshake the wrappers run on their own
// timers, and nothing crosses the network in clear.
func TestWrapOnSimnet(t *testing.T) {
	_, la, lb := newNet2(t)
	net := simnet.New(1)
	a, b := &chatter{}, &chatter{}
	const count = 40
	for i := range count {
		a.queue = append(a.queue, netio.Datagram{Addr: addrB, Buf: plainPacket(t, uint64(i+1), fmt.Sprintf("secret %d", i))})
	}
	tapB := &wireTap{Node: Wrap(b, lb)}
	link := simnet.LinkConfig{Latency: 10 * time.Microsecond}
	net.Attach(addrA, Wrap(a, la), link, link)
	net.Attach(addrB, tapB, link, link)
	net.Wake(addrA)
	if err := net.RunUntil(func() bool { return len(b.got) == count }, time.Second); err != nil {
		t.Fatalf("%v; %d of %d datagrams arrived", err, len(b.got), count)
	}
	for i, p := range b.got {
		if want := plainPacket(t, uint64(i+1), fmt.Sprintf("secret %d", i)); !bytes.Equal(p[:wire.HeaderLen-8], want[:wire.HeaderLen-8]) || !bytes.Equal(p[wire.HeaderLen:], want[wire.HeaderLen:]) || b.from[i] != addrA {
			t.Fatalf("datagram %d arrived as %x from %v, sent as %x", i, p, b.from[i], want)
		}
	}
	for _, w := range tapB.seen {
		if bytes.Contains(w, []byte("secret")) {
			t.Fatalf("a datagram crossed in clear: %q", w)
		}
	}
	if c, ok := lb.Peer(addrA); !ok || c.Name != "sw0" {
		t.Fatalf("B knows A as %+v, %v", c, ok)
	}
}

// TestWrapPollAndPollWrite: Poll and PollWrite seal the same datagrams,
// keep their Control marks, and report the layer's deadline when it is
// earlier than the machine's.
func TestWrapPollAndPollWrite(t *testing.T) {
	n, a, _ := newNet2(t)
	if err := a.Send(n.now, addrB, plainPacket(t, 1, "open")); err != nil {
		t.Fatal(err)
	}
	n.pump() // the handshake: a session to B from here on
	c := &chatter{}
	w := Wrap(c, a)
	send := func() {
		c.queue = append(c.queue,
			netio.Datagram{Addr: addrB, Buf: plainPacket(t, 2, "data")},
			netio.Datagram{Addr: addrB, Buf: plainPacket(t, 3, "ack"), Control: true})
	}
	send()
	out, next := w.Poll(n.now, nil)
	if len(out) != 2 || out[0].Control || !out[1].Control {
		t.Fatalf("Poll gave %d datagrams %+v; want 2, the second Control", len(out), out)
	}
	if next != a.Deadline() {
		t.Fatalf("Poll's deadline %v, the layer's %v", next, a.Deadline())
	}
	for _, d := range out {
		if d.Buf[3]&byte(wire.FlagAuth) == 0 {
			t.Fatalf("Poll gave an unsealed datagram %x", d.Buf)
		}
	}
	send()
	var written []netio.Datagram
	_, next = w.(loop.Streamer).PollWrite(n.now, nil, func(ds []netio.Datagram) { written = append(written, ds...) })
	if len(written) != 2 || written[0].Control || !written[1].Control || next != a.Deadline() {
		t.Fatalf("PollWrite wrote %+v, deadline %v", written, next)
	}
}
