package endpoint

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire"
)

// handshakePacket wraps a handshake message in a HANDSHAKE packet.
func handshakePacket(msg []byte) []byte {
	h := wire.Header{Version: wire.Version, Op: wire.OpHandshake, MsgLen: uint32(len(msg))}
	b, err := wire.AppendPacket(nil, &h, msg)
	if err != nil {
		panic(err)
	}
	return b
}

// helloFlood sends HELLOs without cookies to target at rate a second,
// from 64 addresses of 127/8 that never read an answer (as spoofed
// sources would), until stop is closed.
func helloFlood(b *testing.B, target netip.AddrPort, rate int, stop <-chan struct{}, sent *atomic.Int64) {
	var conns []*net.UDPConn
	for i := range 64 {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 200, byte(1+i))})
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
	}
	eph := make([]byte, 32)
	rand.Read(eph)
	eph[31] &= 0x7f
	to := net.UDPAddrFromAddrPort(target)
	go func() {
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		const tick = time.Millisecond
		per := max(rate/int(time.Second/tick), 1)
		t := time.NewTicker(tick)
		defer t.Stop()
		var said uint32
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			for range per {
				said++
				msg := binary.BigEndian.AppendUint32(append([]byte{1}, eph...), said)
				conns[said%64].WriteToUDP(handshakePacket(append(msg, 0)), to)
				sent.Add(1)
			}
		}
	}()
}

// cookieFlood opens half-open handshakes at target from one address at
// rate a second: it answers each RETRY with the cookie, as a host that
// receives at its address can, and never sends FINISH.
func cookieFlood(b *testing.B, target netip.AddrPort, rate int, stop <-chan struct{}, opened *atomic.Int64) {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 201, 1)})
	if err != nil {
		b.Fatal(err)
	}
	to := net.UDPAddrFromAddrPort(target)
	eph := make([]byte, 32)
	rand.Read(eph)
	eph[31] &= 0x7f
	pending := make(chan uint32, 1<<16) // the SAIDs of HELLOs sent, in order
	// Answer each RETRY with its cookie; count RESPONSEs.
	go func() {
		buf := make([]byte, 2048)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			var h wire.Header
			p, _, err := wire.Parse(buf[:n], &h)
			if err != nil || len(p) == 0 {
				continue
			}
			switch {
			case p[0] == 2 && len(p) == 17: // RETRY, for the oldest HELLO (loopback keeps the order)
				select {
				case said := <-pending:
					core := binary.BigEndian.AppendUint32(append([]byte{1}, eph...), said)
					c.WriteToUDP(handshakePacket(append(append(core, 16), p[1:]...)), to)
				default:
				}
			case p[0] == 3:
				opened.Add(1)
			}
		}
	}()
	go func() {
		defer c.Close()
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		per := max(rate/1000, 1)
		var said uint32
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			for range per {
				said++
				select {
				case pending <- said:
				default:
					continue
				}
				core := binary.BigEndian.AppendUint32(append([]byte{1}, eph...), said)
				c.WriteToUDP(handshakePacket(append(core, 0)), to)
			}
		}
	}()
}

// BenchmarkHandshakeUnderFlood: how long a new client takes from its
// start to its first 64 B READ of a sealed memory node (socket, Dial with
// its handshake, the READ), with no flood and under a flood of 60,000
// cookieless HELLOs a second from 64 addresses that never answer, plus
// HELLOs from one address at 8,000 a second. Reports p50 and p99 in ms
// and the clients that failed (any failure fails the run). Figures only
// on an otherwise idle machine.
func BenchmarkHandshakeUnderFlood(b *testing.B) {
	a := testAuthority(b)
	for _, flood := range []bool{false, true} {
		name := "quiet"
		if flood {
			name = "flood"
		}
		b.Run(name, func(b *testing.B) {
			srv, err := Listen("127.0.0.1:0", Config{}, Options{Security: testIdentity(b, a, secure.RoleMemoryNode, "mem0"), SecurityOptions: secure.Options{}})
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			key, err := srv.Register(make([]byte, 4096), wire.PermAll, 0)
			if err != nil {
				b.Fatal(err)
			}
			target := srv.LocalAddr()
			stop := make(chan struct{})
			var sent, opened atomic.Int64
			if flood {
				helloFlood(b, target, 60000, stop, &sent)
				cookieFlood(b, target, 8000, stop, &opened)
				time.Sleep(200 * time.Millisecond)
			}
			cliID := testIdentity(b, a, secure.RoleClient, "bench")
			var lat []time.Duration
			var mu sync.Mutex
			failed := 0
			start := time.Now()
			for b.Loop() {
				t0 := time.Now()
				cli, err := Listen("127.0.0.1:0", Config{}, Options{Security: cliID, SecurityOptions: secure.Options{}})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				r, err := cli.Dial(ctx, target.String())
				if err == nil {
					err = r.Read(ctx, key, 0, make([]byte, 64))
				}
				cancel()
				d := time.Since(t0)
				cli.Close()
				mu.Lock()
				if err != nil {
					failed++
				} else {
					lat = append(lat, d)
				}
				mu.Unlock()
			}
			elapsed := time.Since(start)
			close(stop)
			slices.Sort(lat)
			q := func(p float64) float64 {
				if len(lat) == 0 {
					return 0
				}
				return float64(lat[min(int(p*float64(len(lat))), len(lat)-1)]) / 1e6
			}
			b.ReportMetric(q(0.5), "p50-ms")
			b.ReportMetric(q(0.99), "p99-ms")
			b.ReportMetric(float64(failed), "failed")
			if flood {
				b.ReportMetric(float64(sent.Load())/elapsed.Seconds(), "flood-hello/s")
				st := srv.SecurityStats()
				b.Logf("flood: %d cookieless HELLOs sent, %d half-open opened from one address; target: %+v", sent.Load(), opened.Load(), st)
			}
			if failed > 0 {
				b.Errorf("%d of %d new clients failed", failed, failed+len(lat))
			}
		})
	}
}
