package endpoint

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire"
)

// benchPair returns a client's handle on a 2 MiB region of another
// endpoint over loopback UDP, both with identities (sealed, payloads
// encrypted) or neither.
func benchPair(b *testing.B, sealed bool) (*Remote, uint64) {
	var srvID, cliID *secure.Identity
	if sealed {
		a := testAuthority(b)
		srvID, cliID = testIdentity(b, a, secure.RoleMemoryNode, "mem0"), testIdentity(b, a, secure.RoleClient, "bench")
	}
	srv, cli := listenBare(b, srvID), listenBare(b, cliID)
	key, err := srv.Register(make([]byte, 2<<20), wire.PermAll, 0)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := cli.Dial(ctx, srv.LocalAddr().String())
	if err != nil {
		b.Fatal(err)
	}
	return r, key
}

func securityModes() []struct {
	name   string
	sealed bool
} {
	return []struct {
		name   string
		sealed bool
	}{{"off", false}, {"on", true}}
}

// BenchmarkSecureWrite1MiB: goodput of 1 MiB WRITEs over loopback with
// the security layer off and on (run with -count to interleave them).
func BenchmarkSecureWrite1MiB(b *testing.B) {
	for _, m := range securityModes() {
		b.Run(m.name, func(b *testing.B) {
			r, key := benchPair(b, m.sealed)
			data := make([]byte, 1<<20)
			ctx := context.Background()
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if err := r.Write(ctx, key, 0, data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSecureRead64: latency of 64-byte READs over loopback with the
// security layer off and on; p50-ns is the median of the operations.
func BenchmarkSecureRead64(b *testing.B) {
	for _, m := range securityModes() {
		b.Run(m.name, func(b *testing.B) {
			r, key := benchPair(b, m.sealed)
			buf := make([]byte, 64)
			ctx := context.Background()
			var lat []time.Duration
			b.ReportAllocs()
			for b.Loop() {
				t := time.Now()
				if err := r.Read(ctx, key, 0, buf); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
		})
	}
}

// BenchmarkSecureCost measures what the security layer costs, off and on
// interleaved in one loop so that both see the same machine: each
// iteration is a 1 MiB WRITE and 16 64-byte READs on a plain pair of
// endpoints, then the same on a sealed pair. It reports the goodput of
// the WRITEs and the median READ latency of each, and their ratios (on
// over off).
func BenchmarkSecureCost(b *testing.B) {
	var pairs [2]struct {
		r     *Remote
		key   uint64
		write time.Duration
		lat   []time.Duration
	}
	for i := range pairs {
		pairs[i].r, pairs[i].key = benchPair(b, i == 1)
	}
	data, buf := make([]byte, 1<<20), make([]byte, 64)
	ctx := context.Background()
	writes := 0
	for b.Loop() {
		for i := range pairs {
			p := &pairs[i]
			t := time.Now()
			if err := p.r.Write(ctx, p.key, 0, data); err != nil {
				b.Fatal(err)
			}
			p.write += time.Since(t)
			for range 16 {
				t := time.Now()
				if err := p.r.Read(ctx, p.key, 0, buf); err != nil {
					b.Fatal(err)
				}
				p.lat = append(p.lat, time.Since(t))
			}
		}
		writes++
	}
	var mbps, p50 [2]float64
	for i := range pairs {
		p := &pairs[i]
		slices.Sort(p.lat)
		mbps[i] = float64(writes) * float64(len(data)) / p.write.Seconds() / 1e6
		p50[i] = float64(p.lat[len(p.lat)/2].Nanoseconds())
	}
	b.ReportMetric(mbps[0], "write-off-MB/s")
	b.ReportMetric(mbps[1], "write-on-MB/s")
	b.ReportMetric(mbps[1]/mbps[0], "write-on/off")
	b.ReportMetric(p50[0], "read-off-p50-ns")
	b.ReportMetric(p50[1], "read-on-p50-ns")
	b.ReportMetric(p50[1]/p50[0], "read-on/off")
}

// BenchmarkSecureFirstOp: from two endpoints' start (sockets opened,
// identities loaded) to the first completed 64 B WRITE between them —
// Dial's NOP and the WRITE, the handshake included when sealed — with the
// layer off and on.
func BenchmarkSecureFirstOp(b *testing.B) {
	for _, m := range securityModes() {
		b.Run(m.name, func(b *testing.B) {
			var srvID, cliID *secure.Identity
			if m.sealed {
				a := testAuthority(b)
				srvID, cliID = testIdentity(b, a, secure.RoleMemoryNode, "mem0"), testIdentity(b, a, secure.RoleClient, "bench")
			}
			data := make([]byte, 64)
			for b.Loop() {
				opts := func(id *secure.Identity) Options {
					if id == nil {
						return Options{}
					}
					return Options{Security: id, SecurityOptions: secure.Options{}}
				}
				srv, err := Listen("127.0.0.1:0", Config{}, opts(srvID))
				if err != nil {
					b.Fatal(err)
				}
				cli, err := Listen("127.0.0.1:0", Config{}, opts(cliID))
				if err != nil {
					b.Fatal(err)
				}
				key, err := srv.Register(make([]byte, 4096), wire.PermAll, 0)
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				r, err := cli.Dial(ctx, srv.LocalAddr().String())
				if err == nil {
					err = r.Write(ctx, key, 0, data)
				}
				cancel()
				if err != nil {
					b.Fatal(err)
				}
				cli.Close()
				srv.Close()
			}
		})
	}
}

// listenBare is listenTapped without the tap: nothing keeps copies of
// the datagrams written.
func listenBare(b *testing.B, id *secure.Identity) *Endpoint {
	b.Helper()
	ep, err := Listen("127.0.0.1:0", Config{}, Options{Security: id, SecurityOptions: secure.Options{}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ep.Close() })
	return ep
}
