package netio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"
)

// Conn is implemented by UDPConn on every platform.
var _ Conn = (*UDPConn)(nil)

// waitTimeout bounds every wait on the network in these tests. Loopback
// delivers in microseconds; the bound only turns a lost datagram or a
// hung reader into a failure instead of a stuck test binary.
const waitTimeout = 10 * time.Second

func listen(t testing.TB, addr string, cfg UDPConfig) *UDPConn {
	t.Helper()
	c, err := ListenUDP(addr, cfg)
	if err != nil {
		t.Fatalf("ListenUDP(%q): %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// listenOrSkip is listen for address families the host may lack.
func listenOrSkip(t testing.TB, addr string, cfg UDPConfig) *UDPConn {
	t.Helper()
	c, err := ListenUDP(addr, cfg)
	if err != nil {
		t.Skipf("ListenUDP(%q): %v (address family unavailable?)", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// fill writes datagram seq's deterministic payload into b: a 4-byte
// sequence number, then a pattern that depends on seq and offset.
func fill(b []byte, seq uint32) {
	binary.BigEndian.PutUint32(b, seq)
	for i := 4; i < len(b); i++ {
		b[i] = byte(uint32(i)*31 + seq*7)
	}
}

// check returns the sequence number in b, or an error if its pattern is
// not fill's.
func check(b []byte) (uint32, error) {
	if len(b) < 4 {
		return 0, fmt.Errorf("%d-byte datagram too short for a sequence number", len(b))
	}
	seq := binary.BigEndian.Uint32(b)
	for i := 4; i < len(b); i++ {
		if want := byte(uint32(i)*31 + seq*7); b[i] != want {
			return seq, fmt.Errorf("seq %d: byte %d is %#x, want %#x", seq, i, b[i], want)
		}
	}
	return seq, nil
}

// workload returns rounds of datagram sizes, one WriteBatch each, chosen
// to exercise GSO coalescing (runs of equal sizes, with and without a
// shorter tail, over the 64-segment and 65507-byte limits), runs broken
// by size changes, maximum-size datagrams, and batches longer than
// BatchSize.
func workload(rng *rand.Rand) [][]int {
	rep := func(n, size int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = size
		}
		return s
	}
	cat := func(parts ...[]int) []int {
		var s []int
		for _, p := range parts {
			s = append(s, p...)
		}
		return s
	}
	random := make([]int, 150)
	for i := range random {
		random[i] = 4 + rng.IntN(9000)
	}
	return [][]int{
		rep(64, 1200),                               // over 65507 bytes: two GSO sends
		cat(rep(20, 3000), []int{500}),              // shorter tail joins the run
		cat(rep(5, 1000), rep(5, 1001), rep(3, 10)), // longer datagram starts a run
		random,
		cat(rep(3, 30000), []int{MaxDatagram, 4, MaxDatagram}),
		rep(200, 100), // more than BatchSize datagrams
		rep(74, 1000), // more than 64 segments of GSO
	}
}

type received struct {
	buf  []byte
	addr netip.AddrPort
}

// startReader reads from c with a few slots at a time (fewer than one GRO
// buffer can hold, so remainders carry over between calls) and forwards
// copies. The returned function closes c and waits for the reader.
func startReader(t *testing.T, c *UDPConn, slots int) (<-chan received, func()) {
	t.Helper()
	out := make(chan received, 1024)
	done := make(chan error, 1)
	go func() {
		ds := make([]Datagram, slots)
		for i := range ds {
			ds[i].Buf = make([]byte, MaxDatagram)
		}
		for {
			n, err := c.ReadBatch(ds)
			if err != nil {
				done <- err
				return
			}
			for _, d := range ds[:n] {
				out <- received{buf: append([]byte(nil), d.Buf...), addr: d.Addr}
			}
		}
	}()
	stop := func() {
		c.Close()
		select {
		case err := <-done:
			if !errors.Is(err, ErrClosed) {
				t.Errorf("reader ended with %v, want ErrClosed", err)
			}
		case <-time.After(waitTimeout):
			t.Fatal("reader did not return after Close")
		}
	}
	return out, stop
}

// roundTrip sends the workload from src to dst (whose address as seen by
// src is to) and checks that every datagram arrives once, intact, from
// src's address.
func roundTrip(t *testing.T, src, dst *UDPConn, to netip.AddrPort) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	out, stop := startReader(t, dst, 7)
	defer stop()

	var seq uint32
	var total, bytes uint64
	for r, sizes := range workload(rng) {
		ds := make([]Datagram, len(sizes))
		want := make(map[uint32]int, len(sizes))
		for i, s := range sizes {
			ds[i] = Datagram{Addr: to, Buf: make([]byte, s)}
			fill(ds[i].Buf, seq)
			want[seq] = s
			seq++
			bytes += uint64(s)
		}
		total += uint64(len(ds))
		if err := src.WriteBatch(ds); err != nil {
			t.Fatalf("round %d: WriteBatch: %v", r, err)
		}
		timeout := time.After(waitTimeout)
		for len(want) > 0 {
			select {
			case d := <-out:
				s, err := check(d.buf)
				if err != nil {
					t.Fatalf("round %d: %v", r, err)
				}
				size, ok := want[s]
				if !ok {
					t.Fatalf("round %d: unexpected or duplicate datagram seq %d", r, s)
				}
				if len(d.buf) != size {
					t.Fatalf("round %d: seq %d has %d bytes, want %d", r, s, len(d.buf), size)
				}
				if d.addr != src.LocalAddr() {
					t.Fatalf("round %d: seq %d from %v, want %v", r, s, d.addr, src.LocalAddr())
				}
				delete(want, s)
			case <-timeout:
				t.Fatalf("round %d: %d of %d datagrams missing after %v; sender %+v, receiver %+v",
					r, len(want), len(sizes), waitTimeout, src.Stats(), dst.Stats())
			}
		}
	}

	ss, rs := src.Stats(), dst.Stats()
	t.Logf("sender %+v", ss)
	t.Logf("receiver %+v", rs)
	if ss.DatagramsSent != total || ss.BytesSent != bytes || ss.SendDrops != 0 {
		t.Errorf("sender counted %d datagrams, %d bytes, %d drops; want %d, %d, 0",
			ss.DatagramsSent, ss.BytesSent, ss.SendDrops, total, bytes)
	}
	if rs.DatagramsReceived != total || rs.BytesReceived != bytes || rs.ReceiveDrops != 0 {
		t.Errorf("receiver counted %d datagrams, %d bytes, %d drops; want %d, %d, 0",
			rs.DatagramsReceived, rs.BytesReceived, rs.ReceiveDrops, total, bytes)
	}
	if ss.GSOEnabled && ss.GSOSends == 0 {
		t.Error("GSO enabled but no GSO sends")
	}
	if !ss.GSOEnabled && ss.GSOSends != 0 {
		t.Errorf("GSO disabled but %d GSO sends", ss.GSOSends)
	}
	// Loopback hands a GSO super-datagram to a GRO socket unsegmented.
	if ss.GSOEnabled && rs.GROEnabled && rs.GROReceives == 0 {
		t.Error("GSO sender to GRO receiver, but no coalesced receives")
	}
	if !rs.GROEnabled && rs.GROReceives != 0 {
		t.Errorf("GRO disabled but %d coalesced receives", rs.GROReceives)
	}
}

type offloads struct {
	name    string
	sendCfg UDPConfig
	recvCfg UDPConfig
}

var offloadCases = []offloads{
	{"gso+gro", UDPConfig{}, UDPConfig{}},
	{"gso-only", UDPConfig{DisableGRO: true}, UDPConfig{DisableGRO: true}},
	{"gro-only", UDPConfig{DisableGSO: true}, UDPConfig{DisableGSO: true}},
	{"none", UDPConfig{DisableGSO: true, DisableGRO: true}, UDPConfig{DisableGSO: true, DisableGRO: true}},
}

func TestRoundTripIPv4(t *testing.T) {
	for _, oc := range offloadCases {
		t.Run(oc.name, func(t *testing.T) {
			src := listen(t, "127.0.0.1:0", oc.sendCfg)
			dst := listen(t, "127.0.0.1:0", oc.recvCfg)
			roundTrip(t, src, dst, dst.LocalAddr())
		})
	}
}

// TestRoundTripSmallBatch runs the workload with a BatchSize far below
// the run lengths, so batches are split across many system calls.
func TestRoundTripSmallBatch(t *testing.T) {
	for _, bs := range []int{1, 3} {
		t.Run(fmt.Sprint(bs), func(t *testing.T) {
			src := listen(t, "127.0.0.1:0", UDPConfig{BatchSize: bs})
			dst := listen(t, "127.0.0.1:0", UDPConfig{BatchSize: bs})
			roundTrip(t, src, dst, dst.LocalAddr())
		})
	}
}

func TestRoundTripIPv6(t *testing.T) {
	for _, oc := range offloadCases {
		t.Run(oc.name, func(t *testing.T) {
			src := listenOrSkip(t, "[::1]:0", oc.sendCfg)
			dst := listenOrSkip(t, "[::1]:0", oc.recvCfg)
			roundTrip(t, src, dst, dst.LocalAddr())
		})
	}
}

// TestRoundTripDualStack sends between an IPv4 socket and a wildcard
// (dual-stack) socket in both directions: IPv4 peers must be reported
// unmapped, and the dual-stack socket must reach IPv4 destinations.
func TestRoundTripDualStack(t *testing.T) {
	{
		v4 := listen(t, "127.0.0.1:0", UDPConfig{})
		ds := listenOrSkip(t, ":0", UDPConfig{})
		if ds.LocalAddr().Addr().Is4() {
			t.Skipf("wildcard socket is IPv4-only (%v)", ds.LocalAddr())
		}
		loop := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), ds.LocalAddr().Port())
		t.Run("v4-to-dual", func(t *testing.T) { roundTrip(t, v4, ds, loop) })
		// The reader above closed ds; open fresh sockets for the reverse.
		v4 = listen(t, "127.0.0.1:0", UDPConfig{})
		ds = listen(t, ":0", UDPConfig{})
		t.Run("dual-to-v4", func(t *testing.T) {
			out, stop := startReader(t, v4, 4)
			defer stop()
			b := make([]byte, 1000)
			fill(b, 42)
			batch := []Datagram{{Addr: v4.LocalAddr(), Buf: b}, {Addr: v4.LocalAddr(), Buf: b}}
			if err := ds.WriteBatch(batch); err != nil {
				t.Fatalf("WriteBatch from dual-stack socket to IPv4: %v", err)
			}
			for range batch {
				select {
				case d := <-out:
					if s, err := check(d.buf); err != nil || s != 42 || len(d.buf) != len(b) {
						t.Fatalf("got seq %d, %d bytes, err %v", s, len(d.buf), err)
					}
					if want := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), ds.LocalAddr().Port()); d.addr != want {
						t.Fatalf("sender %v, want %v", d.addr, want)
					}
				case <-time.After(waitTimeout):
					t.Fatal("datagram from dual-stack socket missing")
				}
			}
		})
	}
}

func TestEmptyDatagram(t *testing.T) {
	for _, oc := range offloadCases {
		t.Run(oc.name, func(t *testing.T) {
			src := listen(t, "127.0.0.1:0", oc.sendCfg)
			dst := listen(t, "127.0.0.1:0", oc.recvCfg)
			out, stop := startReader(t, dst, 4)
			defer stop()
			batch := []Datagram{
				{Addr: dst.LocalAddr(), Buf: nil},
				{Addr: dst.LocalAddr(), Buf: []byte{}},
				{Addr: dst.LocalAddr(), Buf: []byte{1, 2, 3}},
			}
			if err := src.WriteBatch(batch); err != nil {
				t.Fatal(err)
			}
			var lens []int
			for range batch {
				select {
				case d := <-out:
					lens = append(lens, len(d.buf))
				case <-time.After(waitTimeout):
					t.Fatalf("got %v, datagrams missing", lens)
				}
			}
			if fmt.Sprint(lens) != "[0 0 3]" {
				t.Fatalf("received lengths %v, want [0 0 3]", lens)
			}
		})
	}
}

// TestCloseUnblocksRead closes a conn while its reader waits in
// ReadBatch; the reader must return ErrClosed.
func TestCloseUnblocksRead(t *testing.T) {
	for _, oc := range offloadCases {
		t.Run(oc.name, func(t *testing.T) {
			c := listen(t, "127.0.0.1:0", oc.recvCfg)
			src := listen(t, "127.0.0.1:0", oc.sendCfg)
			first := make(chan struct{})
			done := make(chan error, 1)
			go func() {
				ds := []Datagram{{Buf: make([]byte, MaxDatagram)}}
				if _, err := c.ReadBatch(ds); err != nil {
					done <- err
					return
				}
				close(first)
				_, err := c.ReadBatch(ds) // nothing more arrives: blocks
				done <- err
			}()
			if err := src.WriteBatch([]Datagram{{Addr: c.LocalAddr(), Buf: []byte("x")}}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-first:
			case err := <-done:
				t.Fatalf("first ReadBatch: %v", err)
			case <-time.After(waitTimeout):
				t.Fatal("first datagram not received")
			}
			if err := c.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			select {
			case err := <-done:
				if !errors.Is(err, ErrClosed) {
					t.Fatalf("blocked ReadBatch returned %v, want ErrClosed", err)
				}
			case <-time.After(waitTimeout):
				t.Fatal("ReadBatch still blocked after Close")
			}
			if err := c.Close(); err != nil {
				t.Errorf("second Close: %v, want nil", err)
			}
			if _, err := c.ReadBatch([]Datagram{{Buf: make([]byte, MaxDatagram)}}); !errors.Is(err, ErrClosed) {
				t.Errorf("ReadBatch after Close: %v, want ErrClosed", err)
			}
			if err := c.WriteBatch([]Datagram{{Addr: src.LocalAddr(), Buf: []byte("x")}}); !errors.Is(err, ErrClosed) {
				t.Errorf("WriteBatch after Close: %v, want ErrClosed", err)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	for _, cfg := range []UDPConfig{
		{BatchSize: -1},
		{BatchSize: MaxBatchSize + 1},
		{SocketBuffer: -1},
		{SocketBuffer: 1 << 40},
		{BusyPoll: -time.Microsecond},
		{BusyPoll: MaxBusyPoll + 1},
	} {
		c, err := ListenUDP("127.0.0.1:0", cfg)
		if !errors.Is(err, ErrInvalidConfig) {
			if c != nil {
				c.Close()
			}
			t.Errorf("ListenUDP with %+v: %v, want ErrInvalidConfig", cfg, err)
		}
	}
	c := listen(t, "127.0.0.1:0", UDPConfig{})
	if c.BatchSize() != DefaultBatchSize {
		t.Errorf("default BatchSize %d, want %d", c.BatchSize(), DefaultBatchSize)
	}
	c = listen(t, "127.0.0.1:0", UDPConfig{BatchSize: 3})
	if c.BatchSize() != 3 {
		t.Errorf("BatchSize %d, want 3", c.BatchSize())
	}
}

func TestEnvDisablesOffloads(t *testing.T) {
	t.Setenv(EnvDisableGSO, "1")
	c := listen(t, "127.0.0.1:0", UDPConfig{})
	if s := c.Stats(); s.GSOEnabled || s.GROEnabled {
		t.Errorf("%s=1 but GSO %v, GRO %v", EnvDisableGSO, s.GSOEnabled, s.GROEnabled)
	}
	t.Setenv(EnvDisableGSO, "perhaps")
	if c, err := ListenUDP("127.0.0.1:0", UDPConfig{}); !errors.Is(err, ErrInvalidConfig) {
		if c != nil {
			c.Close()
		}
		t.Errorf("%s=perhaps: %v, want ErrInvalidConfig", EnvDisableGSO, err)
	}
}

func TestReadBatchShortBuffer(t *testing.T) {
	c := listen(t, "127.0.0.1:0", UDPConfig{})
	ds := []Datagram{{Buf: make([]byte, MaxDatagram)}, {Buf: make([]byte, 1500)}}
	if _, err := c.ReadBatch(ds); !errors.Is(err, ErrShortBuffer) {
		t.Fatalf("ReadBatch with a 1500-byte buffer: %v, want ErrShortBuffer", err)
	}
	if n, err := c.ReadBatch(nil); n != 0 || err != nil {
		t.Fatalf("ReadBatch(nil) = %d, %v; want 0, nil", n, err)
	}
}

func TestWriteBatchUnsupportedAddr(t *testing.T) {
	c := listen(t, "127.0.0.1:0", UDPConfig{})
	for _, a := range []netip.AddrPort{
		{},
		netip.MustParseAddrPort("127.0.0.1:0"),
		netip.MustParseAddrPort("[::1]:9"),
	} {
		err := c.WriteBatch([]Datagram{{Addr: c.LocalAddr(), Buf: []byte("ok")}, {Addr: a, Buf: []byte("x")}})
		if !errors.Is(err, ErrUnsupportedAddr) {
			t.Errorf("WriteBatch to %v on an IPv4 socket: %v, want ErrUnsupportedAddr", a, err)
		}
	}
	if s := c.Stats(); s.DatagramsSent != 0 {
		t.Errorf("rejected batches sent %d datagrams, want 0", s.DatagramsSent)
	}
}

// benchBatch is the datagram batch the benchmarks move: 64 MTU-sized
// datagrams to one destination, the case GSO coalesces.
func benchBatch(to netip.AddrPort) []Datagram {
	ds := make([]Datagram, 64)
	for i := range ds {
		ds[i] = Datagram{Addr: to, Buf: make([]byte, 1200)}
		fill(ds[i].Buf, uint32(i))
	}
	return ds
}

func benchOffloads(b *testing.B, f func(b *testing.B, cfg UDPConfig)) {
	for _, bc := range []struct {
		name string
		cfg  UDPConfig
	}{
		{"offload", UDPConfig{}},
		{"plain", UDPConfig{DisableGSO: true, DisableGRO: true}},
	} {
		b.Run(bc.name, func(b *testing.B) { f(b, bc.cfg) })
	}
}

// BenchmarkUDPWriteBatch measures the send path alone: the receiver is
// never read, so the kernel drops what overflows its buffer.
func BenchmarkUDPWriteBatch(b *testing.B) {
	benchOffloads(b, func(b *testing.B, cfg UDPConfig) {
		src := listen(b, "127.0.0.1:0", cfg)
		dst := listen(b, "127.0.0.1:0", UDPConfig{SocketBuffer: 1 << 20})
		ds := benchBatch(dst.LocalAddr())
		b.SetBytes(int64(len(ds) * len(ds[0].Buf)))
		b.ReportAllocs()
		for b.Loop() {
			if err := src.WriteBatch(ds); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(src.Stats().GSOSends)/float64(b.N), "gso-sends/op")
	})
}

// BenchmarkUDPBatch measures a full batch over loopback: one WriteBatch
// of 64 datagrams, then ReadBatch until all 64 are back.
func BenchmarkUDPBatch(b *testing.B) {
	benchOffloads(b, func(b *testing.B, cfg UDPConfig) {
		src := listen(b, "127.0.0.1:0", cfg)
		dst := listen(b, "127.0.0.1:0", cfg)
		ds := benchBatch(dst.LocalAddr())
		rx := make([]Datagram, len(ds))
		for i := range rx {
			rx[i].Buf = make([]byte, MaxDatagram)
		}
		b.SetBytes(int64(len(ds) * len(ds[0].Buf)))
		b.ReportAllocs()
		for b.Loop() {
			if err := src.WriteBatch(ds); err != nil {
				b.Fatal(err)
			}
			for got := 0; got < len(ds); {
				n, err := dst.ReadBatch(rx)
				if err != nil {
					b.Fatal(err)
				}
				got += n
			}
		}
		s := dst.Stats()
		if s.ReceiveDrops != 0 {
			b.Fatalf("%d receive drops", s.ReceiveDrops)
		}
		b.ReportMetric(float64(s.GROReceives)/float64(b.N), "gro-recvs/op")
	})
}
