package simnet

import (
	"fmt"
	"testing"
	"time"

	"github.com/ndma/ndma/netio"
)

// echoNode sends back every datagram it receives, reusing its buffers.
type echoNode struct {
	pending []netio.Datagram
	bufs    [][]byte
}

func (e *echoNode) Receive(_ time.Time, d netio.Datagram) {
	i := len(e.pending)
	if i == len(e.bufs) {
		e.bufs = append(e.bufs, make([]byte, netio.MaxDatagram))
	}
	b := e.bufs[i][:copy(e.bufs[i], d.Buf)]
	e.pending = append(e.pending, netio.Datagram{Addr: d.Addr, Buf: b})
}

func (e *echoNode) Poll(_ time.Time, out []netio.Datagram) ([]netio.Datagram, time.Time) {
	out = append(out, e.pending...)
	e.pending = e.pending[:0]
	return out, time.Time{}
}

// BenchmarkEvents measures event throughput: window datagrams of 1000
// bytes bounce between two echo nodes over 10 Gbit/s links with 2µs
// latency. One op is one event; every datagram hop costs three (crossbar,
// delivery, poll).
func BenchmarkEvents(b *testing.B) {
	for _, window := range []int{1, 64} {
		b.Run(fmt.Sprintf("window=%d", window), func(b *testing.B) {
			n := New(1)
			link := LinkConfig{Rate: 10e9, Latency: 2 * time.Microsecond}
			x, y := &echoNode{}, &echoNode{}
			n.Attach(ap(1), x, link, link)
			n.Attach(ap(2), y, link, link)
			for range window {
				x.Receive(time.Time{}, netio.Datagram{Addr: ap(2), Buf: make([]byte, 1000)})
			}
			for range 10 * window { // reach steady state
				n.Step()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if !n.Step() {
					b.Fatal("network went quiet")
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			if s := n.Stats(); s.Dropped() != 0 {
				b.Fatalf("drops: %+v", s)
			}
		})
	}
}
