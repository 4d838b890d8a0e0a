//go:build linux

package netio

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	// maxGSOSegments is the most datagrams coalesced into one GSO send.
	// The kernel's UDP_MAX_SEGMENTS is 64 on older kernels (128 since
	// 6.9); 64 is accepted everywhere.
	maxGSOSegments = 64
	// maxGSOBytes caps the payload of one GSO send, in bytes. The kernel
	// rejects a super-datagram whose UDP length exceeds the IPv4 limit
	// (65535 - 20 - 8 = 65507) with EMSGSIZE; IPv6 allows 65527, but one
	// cap keeps dual-stack sockets simple.
	maxGSOBytes = MaxDatagram
	// groBufSize is the size of each internal receive buffer when GRO is
	// on: the kernel coalesces up to 64 KiB of payload into one buffer,
	// and anything that does not fit is truncated.
	groBufSize = 1 << 16
)

var (
	// gsoOOBSpace is the control-message space for one UDP_SEGMENT cmsg
	// (a uint16 segment size).
	gsoOOBSpace = unix.CmsgSpace(2)
	// groOOBSpace is the control-message space reserved per received
	// message: room for the UDP_GRO cmsg (an int) and the receive time
	// (SO_TIMESTAMPNS: a struct timespec), with slack for others.
	groOOBSpace = 2*unix.CmsgSpace(4) + unix.CmsgSpace(16)
	// tosOOBSpace is the control-message space for one IP_TOS or
	// IPV6_TCLASS cmsg (an int).
	tosOOBSpace = unix.CmsgSpace(4)
	// wOOBSpace is the control-message space per send message: a
	// segment size and a TOS byte.
	wOOBSpace = gsoOOBSpace + tosOOBSpace
)

// putTOS writes an IP_TOS control message (IPV6_TCLASS for an IPv6
// destination, v6) carrying tos at the start of oob, which must hold
// tosOOBSpace bytes and be aligned for unix.Cmsghdr, and returns the
// written prefix.
func putTOS(oob []byte, tos int, v6 bool) []byte {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level, h.Type = unix.IPPROTO_IP, unix.IP_TOS
	if v6 {
		h.Level, h.Type = unix.IPPROTO_IPV6, unix.IPV6_TCLASS
	}
	h.SetLen(unix.CmsgLen(4))
	binary.NativeEndian.PutUint32(oob[unix.CmsgLen(0):], uint32(tos))
	return oob[:tosOOBSpace]
}

// is6 reports whether a is a native IPv6 address (not IPv4-mapped), which
// takes IPV6_TCLASS rather than IP_TOS.
func is6(a netip.AddrPort) bool {
	ip := a.Addr()
	return ip.Is6() && !ip.Is4In6()
}

// putGSOSize writes a UDP_SEGMENT control message for segment size seg
// (in bytes) at the start of oob, which must hold gsoOOBSpace bytes and be
// aligned for unix.Cmsghdr, and returns the written prefix.
func putGSOSize(oob []byte, seg int) []byte {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level = unix.SOL_UDP
	h.Type = unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], uint16(seg))
	return oob[:gsoOOBSpace]
}

// groSegmentSize parses received control messages for UDP_GRO and returns
// the segment size in bytes of a coalesced buffer, or 0 when the buffer
// holds one datagram (or the control data is malformed: then the buffer
// is delivered whole, the safe reading).
func groSegmentSize(oob []byte) int {
	seg, _ := parseRecvCmsgs(oob)
	return seg
}

// parseRecvCmsgs parses received control messages: the UDP_GRO segment
// size (as groSegmentSize) and the kernel's receive time
// (SCM_TIMESTAMPNS, Unix ns; 0 if absent or malformed).
func parseRecvCmsgs(oob []byte) (seg int, rx int64) {
	for len(oob) >= unix.SizeofCmsghdr {
		h, data, rest, err := unix.ParseOneSocketControlMessage(oob)
		if err != nil {
			return 0, 0
		}
		switch {
		case h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO:
			switch {
			case len(data) >= 4: // the kernel writes an int
				seg = int(int32(binary.NativeEndian.Uint32(data)))
			case len(data) >= 2:
				seg = int(binary.NativeEndian.Uint16(data))
			}
		case h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_TIMESTAMPNS && len(data) >= 16:
			sec := int64(binary.NativeEndian.Uint64(data))
			nsec := int64(binary.NativeEndian.Uint64(data[8:]))
			if sec > 0 && nsec >= 0 && nsec < 1e9 {
				rx = sec*1e9 + nsec
			}
		}
		oob = rest
	}
	return seg, rx
}

// socketOpts applies socket buffer sizes and probes/enables offloads on
// fd. It returns whether GSO and GRO are usable. Buffer-size failures are
// logged, not returned: the socket works with the kernel's default.
func (c *UDPConn) socketOpts(fd int, cfg UDPConfig) (gso, gro bool) {
	setBuf := func(force, plain int, name string) {
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, cfg.SocketBuffer) == nil {
			return
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, plain, cfg.SocketBuffer); err != nil {
			c.log.Warn("netio: cannot set socket buffer", "option", name, "bytes", cfg.SocketBuffer, "err", err)
		}
	}
	setBuf(unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, "SO_RCVBUF")
	setBuf(unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, "SO_SNDBUF")

	if !cfg.DisableGSO {
		// Kernels with UDP GSO (4.18+) answer getsockopt(UDP_SEGMENT).
		_, err := unix.GetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT)
		gso = err == nil
		if err != nil {
			c.log.Info("netio: UDP GSO unsupported", "err", err)
		}
	}
	if !cfg.DisableGRO {
		err := unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1)
		gro = err == nil
		if err != nil {
			c.log.Info("netio: UDP GRO unsupported", "err", err)
		}
	}
	if gro {
		// The kernel's receive time of each GRO buffer, for
		// Datagram.RxTime (room for it is in groOOBSpace).
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
			c.log.Info("netio: no receive timestamps", "err", err)
		}
	}
	return gso, gro
}

// sendErrno extracts the errno behind a send or receive error, or 0.
func sendErrno(err error) unix.Errno {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return 0
}

// isGSODisableErrno reports whether a failed GSO send means the path
// cannot do UDP GSO at all: EIO when the device lacks the checksum offload
// GSO needs, EINVAL for a kernel or configuration that rejects the cmsg
// (quic-go and wireguard-go react the same way).
func isGSODisableErrno(e unix.Errno) bool { return e == unix.EIO || e == unix.EINVAL }

// isDropErrno reports whether a send error concerns only the datagram
// being sent (routing, size, firewall, transient memory shortage), so that
// WriteBatch counts it as loss and carries on.
func isDropErrno(e unix.Errno) bool {
	switch e {
	case unix.EMSGSIZE, unix.ENOBUFS, unix.ENOMEM,
		unix.ECONNREFUSED, unix.EHOSTUNREACH, unix.ENETUNREACH,
		unix.EHOSTDOWN, unix.ENETDOWN, unix.EADDRNOTAVAIL,
		unix.EPERM, unix.EACCES:
		return true
	}
	return false
}
