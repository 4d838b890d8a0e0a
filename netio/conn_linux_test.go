//go:build linux

package netio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// kernelOffloads asks the kernel directly, on a fresh probe socket,
// whether it offers UDP GSO (getsockopt UDP_SEGMENT answers) and UDP GRO
// (setsockopt UDP_GRO succeeds and reads back as on).
func kernelOffloads(t *testing.T) (gso, gro bool) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("probe socket: %v", err)
	}
	defer unix.Close(fd)
	_, err = unix.GetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT)
	gso = err == nil
	if unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1) == nil {
		v, err := unix.GetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO)
		gro = err == nil && v == 1
	}
	return gso, gro
}

// socketGRO reads UDP_GRO back from c's own socket.
func socketGRO(t *testing.T, c *UDPConn) bool {
	t.Helper()
	rc, err := c.pc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_GRO) }); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		return false // a kernel without UDP_GRO
	}
	return v == 1
}

// TestOffloadsActive: a socket reports exactly the offloads the kernel
// offers a probe socket (GRO also switched on at the socket itself), and
// none when the configuration turns them off. The round-trip tests assert
// that reported offloads are actually used.
func TestOffloadsActive(t *testing.T) {
	t.Setenv(EnvDisableGSO, "") // the test, not the environment, chooses
	gso, gro := kernelOffloads(t)
	t.Logf("kernel UDP GSO %v, GRO %v", gso, gro)
	c := listen(t, "127.0.0.1:0", UDPConfig{})
	if s := c.Stats(); s.GSOEnabled != gso || s.GROEnabled != gro {
		t.Errorf("socket reports GSO %v, GRO %v; the kernel offers GSO %v, GRO %v", s.GSOEnabled, s.GROEnabled, gso, gro)
	}
	if on := socketGRO(t, c); on != gro {
		t.Errorf("UDP_GRO on the socket is %v, want %v", on, gro)
	}
	off := listen(t, "127.0.0.1:0", UDPConfig{DisableGSO: true, DisableGRO: true})
	if s := off.Stats(); s.GSOEnabled || s.GROEnabled {
		t.Errorf("offloads configured off, but the socket reports GSO %v, GRO %v", s.GSOEnabled, s.GROEnabled)
	}
	if socketGRO(t, off) {
		t.Error("GRO configured off, but UDP_GRO is on at the socket")
	}
}

func TestPackCoalescing(t *testing.T) {
	c := listen(t, "127.0.0.1:0", UDPConfig{BatchSize: 64})
	c.gso.Store(true)
	a := netip.MustParseAddrPort("127.0.0.1:1000")
	b := netip.MustParseAddrPort("127.0.0.1:2000")
	type dg struct {
		to   netip.AddrPort
		size int
	}
	rep := func(n int, d dg) []dg {
		s := make([]dg, n)
		for i := range s {
			s[i] = d
		}
		return s
	}
	for _, tc := range []struct {
		name    string
		maxSeg  int
		in      []dg
		control []int // indices of datagrams marked Control
		want    []sendSpan
	}{
		{
			name:   "runs",
			maxSeg: MaxDatagram,
			in: []dg{
				{a, 100}, {a, 100}, {a, 50}, // shorter tail closes the run
				{a, 100},           // alone: next has another destination
				{b, 100}, {b, 100}, // then a zero-length datagram
				{b, 0},
				{b, 200}, {b, 200}, {b, 100},
				{b, 300}, // longer than the run's segments: a new run
			},
			want: []sendSpan{
				{0, 3, 100, 250, false}, {3, 1, 100, 100, false}, {4, 2, 100, 200, false},
				{6, 1, 0, 0, false}, {7, 3, 200, 500, false}, {10, 1, 300, 300, false},
			},
		},
		{
			name:   "segment-limit",
			maxSeg: MaxDatagram,
			in:     rep(70, dg{a, 10}),
			want:   []sendSpan{{0, 64, 10, 640, false}, {64, 6, 10, 60, false}},
		},
		{
			name:   "byte-limit",
			maxSeg: MaxDatagram,
			in:     rep(5, dg{a, 30000}),
			want:   []sendSpan{{0, 2, 30000, 60000, false}, {2, 2, 30000, 60000, false}, {4, 1, 30000, 30000, false}},
		},
		{
			// Control datagrams carry a TOS cmsg, so a run does not mix
			// them with data.
			name:    "control",
			maxSeg:  MaxDatagram,
			in:      []dg{{a, 100}, {a, 100}, {a, 100}, {a, 100}, {a, 100}, {b, 100}},
			control: []int{2, 3, 5},
			want: []sendSpan{
				{0, 2, 100, 200, false}, {2, 2, 100, 200, true}, {4, 1, 100, 100, false}, {5, 1, 100, 100, true},
			},
		},
		{
			name:   "segment-cap",
			maxSeg: 99,
			in:     []dg{{a, 100}, {a, 100}, {a, 99}, {a, 99}},
			want:   []sendSpan{{0, 1, 100, 100, false}, {1, 1, 100, 100, false}, {2, 2, 99, 198, false}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.gsoMaxSeg = tc.maxSeg
			ds := make([]Datagram, len(tc.in))
			for i, d := range tc.in {
				ds[i] = Datagram{Addr: d.to, Buf: make([]byte, d.size)}
			}
			for _, i := range tc.control {
				ds[i].Control = true
			}
			// pack consumes at most BatchSize datagrams; repack the rest
			// as WriteBatch does.
			var got []sendSpan
			for off := 0; off < len(ds); {
				n := c.pack(ds[off:])
				for i, sp := range c.wspan[:n] {
					m := c.wmsgs[i]
					if len(m.Buffers) != sp.n {
						t.Errorf("span %+v: %d iovecs", sp, len(m.Buffers))
					}
					want := 0
					if sp.n > 1 {
						want += gsoOOBSpace
					}
					if sp.tos {
						want += tosOOBSpace
					}
					if len(m.OOB) != want {
						t.Errorf("span %+v: OOB %x, want %d bytes", sp, m.OOB, want)
						continue
					}
					oob := m.OOB
					if sp.n > 1 {
						if seg := binary.NativeEndian.Uint16(oob[unix.CmsgLen(0):]); int(seg) != sp.seg {
							t.Errorf("span %+v: UDP_SEGMENT %d", sp, seg)
						}
						oob = oob[gsoOOBSpace:]
					}
					if sp.tos {
						h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
						v := binary.NativeEndian.Uint32(oob[unix.CmsgLen(0):])
						if h.Level != unix.IPPROTO_IP || h.Type != unix.IP_TOS || v != DefaultControlTOS {
							t.Errorf("span %+v: TOS cmsg level %d type %d value %#x", sp, h.Level, h.Type, v)
						}
					}
					sp.first += off
					got = append(got, sp)
				}
				last := c.wspan[n-1]
				off += last.first + last.n
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("spans %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("batch-limit", func(t *testing.T) {
		small := listen(t, "127.0.0.1:0", UDPConfig{BatchSize: 4})
		small.gso.Store(true)
		ds := make([]Datagram, 10)
		for i := range ds {
			ds[i] = Datagram{Addr: a, Buf: make([]byte, 10)}
		}
		if n := small.pack(ds); n != 1 || small.wspan[0].n != 10 {
			t.Errorf("equal datagrams: %d messages, first %+v; want 1 of 10 datagrams", n, small.wspan[0])
		}
		small.gso.Store(false)
		if n := small.pack(ds); n != 4 || small.wspan[3].first != 3 {
			t.Errorf("without GSO: %d messages, last %+v; want 4 of one datagram", n, small.wspan[n-1])
		}
		small.gso.Store(true)
		for i := range ds {
			ds[i].Buf = make([]byte, 10+i)
		}
		if n := small.pack(ds); n != 4 {
			t.Errorf("distinct datagrams: %d messages, want 4", n)
		}
	})
}

func TestGROSegmentSize(t *testing.T) {
	cmsg := func(level, typ int32, data []byte) []byte {
		b := make([]byte, unix.CmsgSpace(len(data)))
		h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		h.Level, h.Type = level, typ
		h.SetLen(unix.CmsgLen(len(data)))
		copy(b[unix.CmsgLen(0):], data)
		return b
	}
	i32 := make([]byte, 4)
	binary.NativeEndian.PutUint32(i32, 1200)
	other := cmsg(unix.SOL_SOCKET, unix.SCM_TIMESTAMP, make([]byte, 16))
	for _, tc := range []struct {
		name string
		oob  []byte
		want int
	}{
		{"none", nil, 0},
		{"gro", cmsg(unix.SOL_UDP, unix.UDP_GRO, i32), 1200},
		{"after-other", append(other, cmsg(unix.SOL_UDP, unix.UDP_GRO, i32)...), 1200},
		{"other-only", other, 0},
		{"truncated", cmsg(unix.SOL_UDP, unix.UDP_GRO, i32)[:unix.SizeofCmsghdr+1], 0},
	} {
		if got := groSegmentSize(tc.oob); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// sendFault wraps a conn's sendmmsg with a fault injector, which is
// handed the messages and the real send.
func sendFault(c *UDPConn, f func(ms []ipv4.Message, send func([]ipv4.Message) (int, error)) (int, error)) {
	real := c.sendmsgs
	c.sendmsgs = func(ms []ipv4.Message) (int, error) { return f(ms, real) }
}

// errnoErr wraps e the way x/net reports a failed sendmmsg.
func errnoErr(e unix.Errno) error {
	return &net.OpError{Op: "write", Net: "udp", Err: os.NewSyscallError("sendmmsg", e)}
}

// failFirstGSO sends the messages before the first GSO message, then fails
// with e as the kernel would; when is consulted for each GSO message.
func failFirstGSO(e unix.Errno, when func(m *ipv4.Message) bool) func([]ipv4.Message, func([]ipv4.Message) (int, error)) (int, error) {
	return failFirst(e, func(m *ipv4.Message) bool { return len(m.OOB) > 0 && when(m) })
}

// failFirst sends the messages before the first one fail selects, then
// fails with e as the kernel would.
func failFirst(e unix.Errno, fail func(m *ipv4.Message) bool) func([]ipv4.Message, func([]ipv4.Message) (int, error)) (int, error) {
	return func(ms []ipv4.Message, send func([]ipv4.Message) (int, error)) (int, error) {
		for i := range ms {
			if fail(&ms[i]) {
				n := 0
				if i > 0 {
					var err error
					if n, err = send(ms[:i]); err != nil || n < i {
						return n, err
					}
				}
				return n, errnoErr(e)
			}
		}
		return send(ms)
	}
}

func gsoSender(t *testing.T) *UDPConn {
	t.Helper()
	c := listen(t, "127.0.0.1:0", UDPConfig{})
	if !c.Stats().GSOEnabled {
		t.Skip("kernel lacks UDP GSO")
	}
	return c
}

// TestGSOFallbackEIO: a device without checksum offload fails GSO sends
// with EIO. GSO must switch off for good and the batch still arrive.
func TestGSOFallbackEIO(t *testing.T) {
	for _, e := range []unix.Errno{unix.EIO, unix.EINVAL} {
		t.Run(e.Error(), func(t *testing.T) {
			src := gsoSender(t)
			dst := listen(t, "127.0.0.1:0", UDPConfig{})
			sendFault(src, failFirstGSO(e, func(*ipv4.Message) bool { return true }))
			roundTrip(t, src, dst, dst.LocalAddr())
			if s := src.Stats(); s.GSOEnabled || s.GSOSends != 0 {
				t.Errorf("after %v: GSO enabled %v, %d GSO sends; want off, 0", e, s.GSOEnabled, s.GSOSends)
			}
		})
	}
}

// TestGSOFallbackEMSGSIZE: a path MTU below the segment size fails that
// GSO send with EMSGSIZE. The segment cap must drop below it while GSO
// stays on for smaller datagrams, and the batch still arrive.
func TestGSOFallbackEMSGSIZE(t *testing.T) {
	src := gsoSender(t)
	dst := listen(t, "127.0.0.1:0", UDPConfig{})
	const mtuPayload = 1000
	sendFault(src, failFirstGSO(unix.EMSGSIZE, func(m *ipv4.Message) bool {
		return len(m.Buffers[0]) > mtuPayload
	}))
	roundTrip(t, src, dst, dst.LocalAddr())
	s := src.Stats()
	if !s.GSOEnabled || s.GSOSends == 0 {
		t.Errorf("GSO enabled %v with %d sends; want on and used", s.GSOEnabled, s.GSOSends)
	}
	if src.gsoMaxSeg > mtuPayload {
		t.Errorf("segment cap %d, want at most %d", src.gsoMaxSeg, mtuPayload)
	}
}

// TestPartialWrites: sendmmsg may accept fewer messages than offered;
// WriteBatch must carry on with the rest.
func TestPartialWrites(t *testing.T) {
	for _, oc := range offloadCases {
		t.Run(oc.name, func(t *testing.T) {
			src := listen(t, "127.0.0.1:0", oc.sendCfg)
			dst := listen(t, "127.0.0.1:0", oc.recvCfg)
			calls := 0
			sendFault(src, func(ms []ipv4.Message, send func([]ipv4.Message) (int, error)) (int, error) {
				calls++
				return send(ms[:1])
			})
			roundTrip(t, src, dst, dst.LocalAddr())
			if calls == 0 {
				t.Fatal("fault injector never called")
			}
		})
	}
}

// TestSendErrors: an errno that concerns one datagram drops it and goes
// on; any other fails WriteBatch.
func TestSendErrors(t *testing.T) {
	src := listen(t, "127.0.0.1:0", UDPConfig{DisableGSO: true})
	dst := listen(t, "127.0.0.1:0", UDPConfig{})
	out, stop := startReader(t, dst, 4)
	defer stop()

	var failAt = 1
	fault := unix.EHOSTUNREACH
	sendFault(src, func(ms []ipv4.Message, send func([]ipv4.Message) (int, error)) (int, error) {
		if failAt < 0 || failAt >= len(ms) {
			return send(ms)
		}
		i := failAt
		failAt = -1
		n := 0
		if i > 0 {
			var err error
			if n, err = send(ms[:i]); err != nil || n < i {
				return n, err
			}
		}
		return n, errnoErr(fault)
	})
	batch := make([]Datagram, 3)
	for i := range batch {
		batch[i] = Datagram{Addr: dst.LocalAddr(), Buf: make([]byte, 10+i)}
		fill(batch[i].Buf, uint32(i))
	}
	if err := src.WriteBatch(batch); err != nil {
		t.Fatalf("WriteBatch with an unreachable datagram: %v", err)
	}
	for _, want := range []uint32{0, 2} {
		select {
		case d := <-out:
			if s, err := check(d.buf); err != nil || s != want {
				t.Fatalf("got seq %d (%v), want %d", s, err, want)
			}
		case <-time.After(waitTimeout):
			t.Fatalf("seq %d missing", want)
		}
	}
	if s := src.Stats(); s.SendDrops != 1 || s.DatagramsSent != 2 {
		t.Errorf("drops %d, sent %d; want 1, 2", s.SendDrops, s.DatagramsSent)
	}

	failAt, fault = 0, unix.EBADF
	if err := src.WriteBatch(batch); !errors.Is(err, unix.EBADF) {
		t.Fatalf("WriteBatch on a failing socket: %v, want EBADF", err)
	}
}

// TestReceiveTruncated: an IPv6 datagram larger than MaxDatagram does not
// fit a caller's buffer; it is dropped and counted, and the next one
// delivered.
func TestReceiveTruncated(t *testing.T) {
	for _, oc := range offloadCases {
		t.Run(oc.name, func(t *testing.T) {
			src := listenOrSkip(t, "[::1]:0", oc.sendCfg)
			dst := listenOrSkip(t, "[::1]:0", oc.recvCfg)
			out, stop := startReader(t, dst, 4)
			defer stop()
			big := make([]byte, MaxDatagram+13)
			small := make([]byte, 100)
			fill(small, 7)
			if err := src.WriteBatch([]Datagram{{Addr: dst.LocalAddr(), Buf: big}, {Addr: dst.LocalAddr(), Buf: small}}); err != nil {
				t.Fatal(err)
			}
			select {
			case d := <-out:
				if s, err := check(d.buf); err != nil || s != 7 || len(d.buf) != len(small) {
					t.Fatalf("got seq %d, %d bytes (%v); want the 100-byte seq 7", s, len(d.buf), err)
				}
			case <-time.After(waitTimeout):
				t.Fatal("datagram after the oversized one missing")
			}
			if s := dst.Stats(); s.ReceiveDrops != 1 || s.DatagramsReceived != 1 {
				t.Errorf("receive drops %d, received %d; want 1, 1", s.ReceiveDrops, s.DatagramsReceived)
			}
		})
	}
}

// TestWriteBatchAllocs: the send path allocates nothing, with or without
// GSO.
func TestWriteBatchAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, oc := range offloadCases {
		t.Run(oc.name, func(t *testing.T) {
			src := listen(t, "127.0.0.1:0", oc.sendCfg)
			dst := listen(t, "127.0.0.1:0", UDPConfig{SocketBuffer: 1 << 20})
			ds := benchBatch(dst.LocalAddr())
			ds = append(ds, ds[:10]...) // a second run and more than one sendmmsg
			if a := testing.AllocsPerRun(50, func() {
				if err := src.WriteBatch(ds); err != nil {
					t.Fatal(err)
				}
			}); a != 0 {
				t.Errorf("WriteBatch: %v allocs per call, want 0", a)
			}
		})
	}
}

func TestReadBatchAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, oc := range offloadCases {
		t.Run(oc.name, func(t *testing.T) {
			src := listen(t, "127.0.0.1:0", oc.sendCfg)
			dst := listen(t, "127.0.0.1:0", oc.recvCfg)
			one := []Datagram{{Addr: dst.LocalAddr(), Buf: make([]byte, 1000)}}
			ds := []Datagram{{Buf: make([]byte, MaxDatagram)}}
			if a := testing.AllocsPerRun(50, func() {
				if err := src.WriteBatch(one); err != nil {
					t.Fatal(err)
				}
				if n, err := dst.ReadBatch(ds); err != nil || n != 1 || len(ds[0].Buf) != 1000 || ds[0].Addr != src.LocalAddr() {
					t.Fatalf("ReadBatch: %d datagrams (%d bytes from %v), %v", n, len(ds[0].Buf), ds[0].Addr, err)
				}
				ds[0].Buf = ds[0].Buf[:cap(ds[0].Buf)]
			}); a != 0 {
				t.Errorf("WriteBatch+ReadBatch: %v allocs per call, want 0", a)
			}
		})
	}
}

// TestRawSockaddr encodes destinations as each socket family wants and
// decodes them back as a receiver would.
func TestRawSockaddr(t *testing.T) {
	cases := []struct {
		v6   bool
		addr string
		ok   bool
		want string
	}{
		{false, "10.1.2.3:9000", true, "10.1.2.3:9000"},
		{false, "[::ffff:10.1.2.3]:65535", true, "10.1.2.3:65535"},
		{false, "[2001:db8::1]:1", false, ""},
		{true, "10.1.2.3:9000", true, "[::ffff:10.1.2.3]:9000"},
		{true, "[2001:db8::1]:1", true, "[2001:db8::1]:1"},
		{true, "[::1]:258", true, "[::1]:258"},
	}
	for _, tc := range cases {
		r := &rawBatch{v6: tc.v6}
		r.wname = make([]unix.RawSockaddrInet6, 1)
		r.rname = make([]unix.RawSockaddrInet6, 1)
		r.raddr = make([]net.UDPAddr, 1)
		r.rip = make([][16]byte, 1)
		ua := net.UDPAddrFromAddrPort(netip.MustParseAddrPort(tc.addr))
		l, ok := r.putSockaddr(0, ua)
		if ok != tc.ok {
			t.Errorf("v6=%v %s: encoded %v, want %v", tc.v6, tc.addr, ok, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		r.rname[0] = r.wname[0]
		got, isUDP := r.sockaddr(0, l).(*net.UDPAddr)
		if !isUDP || got.AddrPort().String() != tc.want {
			t.Errorf("v6=%v %s: decoded %v, want %s", tc.v6, tc.addr, got, tc.want)
		}
		if a := r.sockaddr(0, l-1); a != nil {
			t.Errorf("v6=%v %s: short name decoded as %v, want nil", tc.v6, tc.addr, a)
		}
	}
	r := &rawBatch{rname: make([]unix.RawSockaddrInet6, 1), raddr: make([]net.UDPAddr, 1), rip: make([][16]byte, 1)}
	r.rname[0].Family = unix.AF_UNIX
	if a := r.sockaddr(0, unix.SizeofSockaddrInet6); a != nil {
		t.Errorf("AF_UNIX name decoded as %v, want nil", a)
	}
}

// TestRawZones maps IPv6 scope ids to interface names and back, as net
// does, with numbers for interfaces that do not exist.
func TestRawZones(t *testing.T) {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skipf("no loopback interface: %v", err)
	}
	r := &rawBatch{v6: true}
	if z := r.zone(uint32(lo.Index)); z != "lo" {
		t.Errorf("zone(%d) = %q, want lo", lo.Index, z)
	}
	if z := r.zone(0); z != "" {
		t.Errorf("zone(0) = %q, want none", z)
	}
	if z := r.zone(987654); z != "987654" {
		t.Errorf("zone of a missing interface = %q, want its number", z)
	}
	if id := r.scopeID("lo"); id != uint32(lo.Index) {
		t.Errorf("scopeID(lo) = %d, want %d", id, lo.Index)
	}
	if id := r.scopeID("7"); id != 7 {
		t.Errorf("scopeID(7) = %d, want 7", id)
	}
	if id := r.scopeID("no-such-if"); id != 0 {
		t.Errorf("scopeID of a missing interface = %d, want 0", id)
	}
	r.wname = make([]unix.RawSockaddrInet6, 1)
	if _, ok := r.putSockaddr(0, &net.UDPAddr{IP: net.ParseIP("fe80::1"), Port: 9, Zone: "lo"}); !ok || r.wname[0].Scope_id != uint32(lo.Index) {
		t.Errorf("fe80::1%%lo encoded with scope %d, want %d", r.wname[0].Scope_id, lo.Index)
	}
}

// TestUnroutableLoggedOnce: datagrams the kernel refuses with EINVAL (a
// socket bound to 127.0.0.1 sending to another host) are dropped and
// counted without failing the rest of the batch or the batches after, and
// logged once, not once per batch.
func TestUnroutableLoggedOnce(t *testing.T) {
	var logs bytes.Buffer
	src := listen(t, "127.0.0.1:0", UDPConfig{DisableGSO: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	dst := listen(t, "127.0.0.1:0", UDPConfig{})
	out, stop := startReader(t, dst, 64)
	defer stop()
	remote := netip.MustParseAddrPort("192.0.2.1:7471") // TEST-NET-1
	sendFault(src, func(ms []ipv4.Message, send func([]ipv4.Message) (int, error)) (int, error) {
		for i := range ms {
			if ms[i].Addr.(*net.UDPAddr).AddrPort() == remote {
				n := 0
				if i > 0 {
					var err error
					if n, err = send(ms[:i]); err != nil || n < i {
						return n, err
					}
				}
				return n, errnoErr(unix.EINVAL) // what Linux answers
			}
		}
		return send(ms)
	})
	const batches = 40
	for b := range batches {
		batch := []Datagram{
			{Addr: remote, Buf: make([]byte, 10)},
			{Addr: dst.LocalAddr(), Buf: make([]byte, 10)},
		}
		fill(batch[1].Buf, uint32(b))
		if err := src.WriteBatch(batch); err != nil {
			t.Fatalf("batch %d: WriteBatch: %v", b, err)
		}
	}
	for b := range batches {
		select {
		case d := <-out:
			if s, err := check(d.buf); err != nil || s != uint32(b) {
				t.Fatalf("got seq %d (%v), want %d", s, err, b)
			}
		case <-time.After(waitTimeout):
			t.Fatalf("seq %d missing", b)
		}
	}
	if s := src.Stats(); s.SendDrops != batches || s.DatagramsSent != batches {
		t.Errorf("drops %d, sent %d; want %d each", s.SendDrops, s.DatagramsSent, batches)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "0.0.0.0") {
		t.Errorf("%d warnings, want 1 saying to listen on a routable address:\n%s", n, logs.String())
	}
}

// TestReusePort: sockets with ReusePort bind one address and share its
// traffic; without it a second socket cannot bind the address.
func TestReusePort(t *testing.T) {
	a, err := ListenUDP("127.0.0.1:0", UDPConfig{ReusePort: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := ListenUDP(a.LocalAddr().String(), UDPConfig{ReusePort: true})
	if err != nil {
		t.Fatalf("second socket with ReusePort: %v", err)
	}
	defer b.Close()
	if b.LocalAddr() != a.LocalAddr() {
		t.Fatalf("bound %v and %v", a.LocalAddr(), b.LocalAddr())
	}
	if c, err := ListenUDP(a.LocalAddr().String(), UDPConfig{}); err == nil {
		c.Close()
		t.Fatal("a socket without ReusePort bound the address too")
	}
	// Datagrams from 32 source ports, spread by the kernel over the two
	// sockets, each arrive exactly once.
	var got atomic.Int64
	var wg sync.WaitGroup
	for _, c := range []*UDPConn{a, b} {
		wg.Go(func() {
			ds := []Datagram{{Buf: make([]byte, MaxDatagram)}}
			for {
				k, err := c.ReadBatch(ds)
				if err != nil {
					return
				}
				got.Add(int64(k))
				ds[0].Buf = ds[0].Buf[:cap(ds[0].Buf)]
			}
		})
	}
	const senders = 32
	for range senders {
		s, err := ListenUDP("127.0.0.1:0", UDPConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.WriteBatch([]Datagram{{Addr: a.LocalAddr(), Buf: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for got.Load() < senders && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	a.Close()
	b.Close()
	wg.Wait()
	if n := got.Load(); n != senders {
		t.Fatalf("%d datagrams received, want %d", n, senders)
	}
}

// TestReadBatchView: datagrams a GRO buffer coalesced come out as views
// of it, with the right contents and senders; the next read reuses the
// caller's buffers as before. Without GRO it reads into them.
func TestReadBatchView(t *testing.T) {
	for _, gro := range []bool{true, false} {
		r := listen(t, "127.0.0.1:0", UDPConfig{DisableGRO: !gro})
		s := listen(t, "127.0.0.1:0", UDPConfig{})
		const n, size = 16, 1000
		ds := make([]Datagram, n)
		for i := range ds {
			b := make([]byte, size)
			for j := range b {
				b[j] = byte(i + j)
			}
			ds[i] = Datagram{Addr: r.LocalAddr(), Buf: b}
		}
		if err := s.WriteBatch(ds); err != nil {
			t.Fatal(err)
		}
		bufs := make([][]byte, n)
		got := make([]Datagram, n)
		for i := range bufs {
			bufs[i] = make([]byte, MaxDatagram)
		}
		seen := 0
		for seen < n {
			for i := range got {
				got[i].Buf = bufs[i]
			}
			k, err := r.ReadBatchView(got[:n-seen])
			if err != nil {
				t.Fatal(err)
			}
			for i := range k {
				d := got[i]
				if d.Addr != s.LocalAddr() || len(d.Buf) != size || d.Buf[0] != byte(seen) || d.Buf[size-1] != byte(seen+size-1) {
					t.Fatalf("gro=%v: datagram %d: from %v, %d bytes, %d...%d", gro, seen, d.Addr, len(d.Buf), d.Buf[0], d.Buf[len(d.Buf)-1])
				}
				inCaller := &d.Buf[0] == &bufs[i][0]
				if gro && r.gro && inCaller || !r.gro && !inCaller {
					t.Fatalf("gro=%v: datagram %d in the caller's buffer: %v", gro, seen, inCaller)
				}
				seen++
			}
		}
	}
}

// TestWriteBatchTail: a datagram's Tail goes out after its Buf, with GSO
// runs (equal lengths to one address) and without, beside datagrams that
// have none; the receiver gets each whole.
func TestWriteBatchTail(t *testing.T) {
	for _, gso := range []bool{true, false} {
		r := listen(t, "127.0.0.1:0", UDPConfig{})
		s := listen(t, "127.0.0.1:0", UDPConfig{DisableGSO: !gso})
		shared := bytes.Repeat([]byte{0xab}, 900)
		var ds []Datagram
		var want [][]byte
		for i := range 20 {
			head := bytes.Repeat([]byte{byte(i)}, 96)
			d := Datagram{Addr: r.LocalAddr(), Buf: head}
			if i%5 != 4 {
				d.Tail = shared
			} else {
				d.Buf = append(head, shared[:100]...)
			}
			ds = append(ds, d)
			want = append(want, append(append([]byte{}, d.Buf...), d.Tail...))
		}
		if err := s.WriteBatch(ds); err != nil {
			t.Fatal(err)
		}
		got := make([]Datagram, len(ds))
		for i := range got {
			got[i].Buf = make([]byte, MaxDatagram)
		}
		seen := 0
		for seen < len(ds) {
			k, err := r.ReadBatch(got[:len(ds)-seen])
			if err != nil {
				t.Fatal(err)
			}
			for i := range k {
				if !bytes.Equal(got[i].Buf, want[seen]) {
					t.Fatalf("gso=%v: datagram %d: %d bytes, want %d", gso, seen, len(got[i].Buf), len(want[seen]))
				}
				got[i].Buf = got[i].Buf[:cap(got[i].Buf)]
				seen++
			}
		}
		if st := s.Stats(); st.DatagramsSent != uint64(len(ds)) || gso && s.gso.Load() && st.GSOSends == 0 {
			t.Errorf("gso=%v: stats %+v", gso, st)
		}
	}
}

// TestReadBatchFixed: over rounds of different datagrams (sizes, senders,
// one truncated), ReadBatchFixed, which resets only what the kernel
// wrote on its previous call, reports each message as a fresh
// ReadBatch does: length, sender, flags (MSG_TRUNC on the truncated one
// only) and control data (IP_PKTINFO on every message); and before each
// call its headers are exactly those a fresh fill gives.
func TestReadBatchFixed(t *testing.T) {
	pc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	rc, err := pc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_PKTINFO, 1) }); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	rb, err := newRawBatch(pc, false)
	if err != nil {
		t.Fatal(err)
	}
	const slots, bufSize = 4, 256
	ms := make([]ipv4.Message, slots)
	for i := range ms {
		ms[i].Buffers = [][]byte{make([]byte, bufSize)}
		ms[i].OOB = make([]byte, 128)
	}
	senders := []*net.UDPConn{}
	for range 2 {
		s, err := net.DialUDP("udp4", nil, pc.LocalAddr().(*net.UDPAddr))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		senders = append(senders, s)
	}
	rounds := [][]struct{ from, size int }{
		{{0, 10}, {1, 200}, {0, 30}},
		{{1, 300}}, // truncated
		{{0, 5}, {0, 6}, {1, 7}, {1, 8}},
		{{1, 1}},
	}
	for r, round := range rounds {
		for _, d := range round {
			if _, err := senders[d.from].Write(make([]byte, d.size)); err != nil {
				t.Fatal(err)
			}
		}
		got := 0
		deadline := time.Now().Add(waitTimeout)
		for got < len(round) && time.Now().Before(deadline) {
			n, err := rb.ReadBatchFixed(ms, 0)
			if err != nil {
				t.Fatal(err)
			}
			for i := range n {
				want := round[got+i]
				m := &ms[i]
				trunc := m.Flags&unix.MSG_TRUNC != 0
				wantN := min(want.size, bufSize)
				if m.N != wantN || trunc != (want.size > bufSize) || m.NN == 0 || m.Flags&unix.MSG_CTRUNC != 0 ||
					m.Addr.String() != senders[want.from].LocalAddr().String() {
					t.Fatalf("round %d message %d: %d bytes from %v, flags %#x, %d control bytes; want %d bytes from %v",
						r, got+i, m.N, m.Addr, m.Flags, m.NN, wantN, senders[want.from].LocalAddr())
				}
			}
			got += n
		}
		if got != len(round) {
			t.Fatalf("round %d: %d of %d datagrams", r, got, len(round))
		}
		// What the next call would pass the kernel, against a fresh fill
		// (equal, so the fixed state stays as it is).
		reset := slices.Clone(rb.prepareFixed(ms))
		rb.fillRead(ms)
		for i := range reset {
			if reset[i] != rb.rhdr[i] {
				t.Fatalf("after round %d, header %d: %+v, a fresh fill gives %+v", r, i, reset[i], rb.rhdr[i])
			}
		}
	}
}

// TestRxTime: with GRO, a received datagram carries the kernel's receive
// time, after it was sent and before the read returned; without GRO, and
// after a datagram without one, it is zero.
func TestRxTime(t *testing.T) {
	_, gro := kernelOffloads(t)
	if !gro {
		t.Skip("no UDP GRO on this kernel")
	}
	src := listen(t, "127.0.0.1:0", UDPConfig{})
	dst := listen(t, "127.0.0.1:0", UDPConfig{})
	plain := listen(t, "127.0.0.1:0", UDPConfig{DisableGRO: true})
	for _, c := range []struct {
		conn *UDPConn
		want bool
	}{{dst, true}, {plain, false}, {dst, true}} {
		t0 := time.Now()
		if err := src.WriteBatch([]Datagram{{Addr: c.conn.LocalAddr(), Buf: []byte("tick")}}); err != nil {
			t.Fatal(err)
		}
		ds := []Datagram{{Buf: make([]byte, MaxDatagram), RxTime: 42}}
		n, err := c.conn.ReadBatch(ds)
		t1 := time.Now()
		if err != nil || n != 1 {
			t.Fatalf("ReadBatch: %d, %v", n, err)
		}
		rx := ds[0].RxTime
		if !c.want {
			if rx != 0 {
				t.Fatalf("without GRO: RxTime %d, want 0", rx)
			}
			continue
		}
		if rx < t0.UnixNano() || rx > t1.UnixNano() {
			t.Fatalf("RxTime %v not between the send (%v) and the read's return (%v)", time.Unix(0, rx), t0, t1)
		}
	}
}
