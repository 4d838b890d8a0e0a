//go:build linux

package netio

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// tosReceiver is a plain UDP socket that reports each datagram's TOS byte
// (IPv4) or traffic class (IPv6), as a priority qdisc on the path sees it.
type tosReceiver struct {
	t  *testing.T
	pc *net.UDPConn
	v6 bool
}

func newTOSReceiver(t *testing.T, addr string) *tosReceiver {
	t.Helper()
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenUDP("udp", ua)
	if err != nil {
		t.Skipf("listen %s: %v (address family unavailable?)", addr, err)
	}
	t.Cleanup(func() { pc.Close() })
	r := &tosReceiver{t: t, pc: pc, v6: ua.IP.To4() == nil}
	rc, err := pc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		if r.v6 {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1)
		} else {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
		}
	}); err != nil || serr != nil {
		t.Fatalf("enable TOS reporting: %v %v", err, serr)
	}
	return r
}

func (r *tosReceiver) addr() netip.AddrPort { return r.pc.LocalAddr().(*net.UDPAddr).AddrPort() }

// next returns the next datagram's first byte and its TOS (-1 when the
// kernel reported none).
func (r *tosReceiver) next() (tag byte, tos int) {
	r.t.Helper()
	buf, oob := make([]byte, MaxDatagram), make([]byte, 256)
	r.pc.SetReadDeadline(time.Now().Add(waitTimeout))
	n, oobn, _, _, err := r.pc.ReadMsgUDPAddrPort(buf, oob)
	if err != nil {
		r.t.Fatalf("read: %v", err)
	}
	if n == 0 {
		r.t.Fatal("empty datagram")
	}
	tos = -1
	for o := oob[:oobn]; len(o) >= unix.SizeofCmsghdr; {
		h, data, rest, err := unix.ParseOneSocketControlMessage(o)
		if err != nil {
			r.t.Fatalf("control message: %v", err)
		}
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TOS && len(data) >= 1:
			tos = int(data[0])
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_TCLASS && len(data) >= 4:
			tos = int(binary.NativeEndian.Uint32(data))
		}
		o = rest
	}
	return buf[0], tos
}

// sendTagged sends, in one WriteBatch, equal-size datagrams tagged by their
// first byte, those in control marked Control.
func sendTagged(t *testing.T, c *UDPConn, to netip.AddrPort, n int, control ...int) {
	t.Helper()
	ds := make([]Datagram, n)
	for i := range ds {
		ds[i] = Datagram{Addr: to, Buf: make([]byte, 200)}
		ds[i].Buf[0] = byte(i)
	}
	for _, i := range control {
		ds[i].Control = true
	}
	if err := c.WriteBatch(ds); err != nil {
		t.Fatalf("WriteBatch: %v", err)
	}
}

// expectTOS reads n datagrams and checks that tagged ones (by first byte)
// in marked carry tos and the others the default 0.
func expectTOS(t *testing.T, r *tosReceiver, n, tos int, marked ...int) {
	t.Helper()
	want := make(map[byte]int, n)
	for i := range n {
		want[byte(i)] = 0
	}
	for _, i := range marked {
		want[byte(i)] = tos
	}
	for range n {
		tag, got := r.next()
		w, ok := want[tag]
		if !ok {
			t.Fatalf("unexpected datagram %d", tag)
		}
		if got != w {
			t.Errorf("datagram %d: TOS %#x, want %#x", tag, got, w)
		}
		delete(want, tag)
	}
}

// TestControlTOS: datagrams marked Control leave with UDPConfig.ControlTOS
// in their IP header (traffic class for IPv6), the others with 0, whether
// or not GSO coalesces their neighbours.
func TestControlTOS(t *testing.T) {
	t.Setenv(EnvControlTOS, "") // the test, not the environment, chooses
	for _, tc := range []struct {
		name, src, dst string
		cfg            UDPConfig
		tos            int
	}{
		{"ipv4-default", "127.0.0.1:0", "127.0.0.1:0", UDPConfig{}, DefaultControlTOS},
		{"ipv4-configured", "127.0.0.1:0", "127.0.0.1:0", UDPConfig{ControlTOS: 0xb8}, 0xb8},
		{"ipv4-no-gso", "127.0.0.1:0", "127.0.0.1:0", UDPConfig{DisableGSO: true}, DefaultControlTOS},
		{"dual-stack-to-ipv4", "[::]:0", "127.0.0.1:0", UDPConfig{}, DefaultControlTOS},
		{"ipv6", "[::1]:0", "[::1]:0", UDPConfig{}, DefaultControlTOS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := listenOrSkip(t, tc.src, tc.cfg)
			r := newTOSReceiver(t, tc.dst)
			sendTagged(t, src, r.addr(), 6, 2, 3, 5)
			expectTOS(t, r, 6, tc.tos, 2, 3, 5)
		})
	}
	t.Run("off", func(t *testing.T) {
		src := listen(t, "127.0.0.1:0", UDPConfig{ControlTOS: -1})
		r := newTOSReceiver(t, "127.0.0.1:0")
		sendTagged(t, src, r.addr(), 3, 0, 1, 2)
		expectTOS(t, r, 3, 0)
	})
	if _, err := ListenUDP("127.0.0.1:0", UDPConfig{ControlTOS: 256}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("ControlTOS 256: %v, want ErrInvalidConfig", err)
	}
}

// TestControlTOSEnv: NDMA_CONTROL_TOS replaces the configured TOS, or
// turns the marking off, and a malformed value is refused.
func TestControlTOSEnv(t *testing.T) {
	for _, tc := range []struct {
		env string
		tos int // 0: unmarked
	}{
		{"0xb8", 0xb8},
		{"32", 32},
		{"0", 0},
		{"off", 0},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(EnvControlTOS, tc.env)
			src := listen(t, "127.0.0.1:0", UDPConfig{ControlTOS: 0x28})
			r := newTOSReceiver(t, "127.0.0.1:0")
			sendTagged(t, src, r.addr(), 2, 1)
			if tc.tos == 0 {
				expectTOS(t, r, 2, 0)
			} else {
				expectTOS(t, r, 2, tc.tos, 1)
			}
		})
	}
	for _, bad := range []string{"256", "-1", "lowdelay", "0x1ff"} {
		t.Setenv(EnvControlTOS, bad)
		if _, err := ListenUDP("127.0.0.1:0", UDPConfig{}); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s=%q: %v, want ErrInvalidConfig", EnvControlTOS, bad, err)
		}
	}
}

// TestControlTOSRefused: a kernel that rejects the TOS control message
// (EINVAL) must not lose the Control datagrams: they go unmarked from then
// on, and the rest of the batch arrives.
func TestControlTOSRefused(t *testing.T) {
	t.Setenv(EnvControlTOS, "")
	src := listen(t, "127.0.0.1:0", UDPConfig{})
	r := newTOSReceiver(t, "127.0.0.1:0")
	refused := 0
	sendFault(src, failFirst(unix.EINVAL, func(m *ipv4.Message) bool {
		if hasTOS(m.OOB) {
			refused++
			return true
		}
		return false
	}))
	sendTagged(t, src, r.addr(), 4, 1, 3)
	expectTOS(t, r, 4, 0)
	sendTagged(t, src, r.addr(), 2, 0, 1)
	expectTOS(t, r, 2, 0)
	if refused != 1 {
		t.Errorf("%d sends refused, want 1 (marking off after the first)", refused)
	}
	if s := src.Stats(); s.SendDrops != 0 {
		t.Errorf("%d datagrams dropped, want 0", s.SendDrops)
	}
}

// TestControlTOSUnroutable: EINVAL for a Control datagram the kernel
// cannot route (not for its TOS) drops that datagram only; the marking
// stays on for the rest.
func TestControlTOSUnroutable(t *testing.T) {
	t.Setenv(EnvControlTOS, "")
	src := listen(t, "127.0.0.1:0", UDPConfig{})
	r := newTOSReceiver(t, "127.0.0.1:0")
	bad := netip.MustParseAddrPort("127.0.0.1:9")
	sendFault(src, failFirst(unix.EINVAL, func(m *ipv4.Message) bool {
		return m.Addr.(*net.UDPAddr).AddrPort() == bad
	}))
	ds := []Datagram{
		{Addr: r.addr(), Buf: []byte{0}, Control: true},
		{Addr: bad, Buf: []byte{1}, Control: true},
		{Addr: r.addr(), Buf: []byte{2}, Control: true},
	}
	if err := src.WriteBatch(ds); err != nil {
		t.Fatalf("WriteBatch: %v", err)
	}
	for range 2 {
		if tag, tos := r.next(); tos != DefaultControlTOS || tag == 1 {
			t.Errorf("datagram %d: TOS %#x, want %#x", tag, tos, DefaultControlTOS)
		}
	}
	if s := src.Stats(); s.SendDrops != 1 {
		t.Errorf("%d datagrams dropped, want 1 (the unroutable one)", s.SendDrops)
	}
	if src.tos != DefaultControlTOS {
		t.Errorf("marking %d after an unroutable destination, want it on (%#x)", src.tos, DefaultControlTOS)
	}
}

// hasTOS reports whether oob holds an IP_TOS or IPV6_TCLASS cmsg.
func hasTOS(oob []byte) bool {
	for len(oob) >= unix.SizeofCmsghdr {
		h, _, rest, err := unix.ParseOneSocketControlMessage(oob)
		if err != nil {
			return false
		}
		if (h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TOS) || (h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_TCLASS) {
			return true
		}
		oob = rest
	}
	return false
}
