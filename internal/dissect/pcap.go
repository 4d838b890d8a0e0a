package dissect

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"
)

// LinkTypeRaw is the pcap link type of captures a Writer makes: every
// record is a bare IPv4 or IPv6 packet (LINKTYPE_RAW).
const LinkTypeRaw = 101

// pcap file constants: the microsecond-resolution magic number, format
// version 2.4, and the largest record a reader is told to expect.
const (
	pcapMagic   = 0xa1b2c3d4
	pcapSnapLen = 262144
	ipv4HdrLen  = 20
	ipv6HdrLen  = 40
	udpHdrLen   = 8
	protoUDP    = 17
)

// ErrDatagram reports a datagram a Writer cannot record: invalid
// addresses, or a payload too large for one UDP datagram.
var ErrDatagram = errors.New("dissect: datagram cannot be recorded")

// Writer writes UDP datagrams as a classic (libpcap 2.4) capture, each one
// wrapped in synthetic IPv4 or IPv6 and UDP headers, as if captured on
// the wire between its two addresses.
type Writer struct {
	w   io.Writer
	buf []byte
	id  uint16 // IPv4 identification, one per datagram
}

// NewWriter writes the capture's file header to w and returns a Writer
// that appends records to it.
func NewWriter(w io.Writer) (*Writer, error) {
	var h [24]byte
	le := binary.LittleEndian
	le.PutUint32(h[0:], pcapMagic)
	le.PutUint16(h[4:], 2)
	le.PutUint16(h[6:], 4)
	// thiszone and sigfigs (8..15) are zero.
	le.PutUint32(h[16:], pcapSnapLen)
	le.PutUint32(h[20:], LinkTypeRaw)
	if _, err := w.Write(h[:]); err != nil {
		return nil, err
	}
	return &Writer{w: w}, nil
}

// WriteUDP records payload as a UDP datagram from src to dst captured at
// t. Both addresses IPv4 (or IPv4-mapped) give an IPv4 packet, otherwise
// IPv6 (an IPv4 address mapped into it).
func (pw *Writer) WriteUDP(t time.Time, src, dst netip.AddrPort, payload []byte) error {
	if !src.IsValid() || !dst.IsValid() {
		return fmt.Errorf("%w: address %v -> %v", ErrDatagram, src, dst)
	}
	s, d := src.Addr().Unmap(), dst.Addr().Unmap()
	v4 := s.Is4() && d.Is4()
	ipLen := ipv6HdrLen
	if v4 {
		ipLen = ipv4HdrLen
	}
	udpLen := udpHdrLen + len(payload)
	if udpLen > 0xffff || ipLen+udpLen > pcapSnapLen || (v4 && ipLen+udpLen > 0xffff) {
		return fmt.Errorf("%w: %d payload bytes", ErrDatagram, len(payload))
	}
	n := 16 + ipLen + udpLen
	if cap(pw.buf) < n {
		pw.buf = make([]byte, n)
	}
	b := pw.buf[:n]
	le, be := binary.LittleEndian, binary.BigEndian
	us := t.UnixMicro()
	le.PutUint32(b[0:], uint32(us/1e6))
	le.PutUint32(b[4:], uint32(us%1e6))
	le.PutUint32(b[8:], uint32(ipLen+udpLen))
	le.PutUint32(b[12:], uint32(ipLen+udpLen))
	ip := b[16 : 16+ipLen]
	clear(ip)
	if v4 {
		pw.id++
		ip[0] = 0x45
		be.PutUint16(ip[2:], uint16(ipLen+udpLen))
		be.PutUint16(ip[4:], pw.id)
		ip[8] = 64 // TTL
		ip[9] = protoUDP
		sa, da := s.As4(), d.As4()
		copy(ip[12:16], sa[:])
		copy(ip[16:20], da[:])
		be.PutUint16(ip[10:], ipv4Checksum(ip))
	} else {
		ip[0] = 0x60
		be.PutUint16(ip[4:], uint16(udpLen))
		ip[6] = protoUDP
		ip[7] = 64 // hop limit
		sa, da := s.As16(), d.As16()
		copy(ip[8:24], sa[:])
		copy(ip[24:40], da[:])
	}
	u := b[16+ipLen:]
	be.PutUint16(u[0:], src.Port())
	be.PutUint16(u[2:], dst.Port())
	be.PutUint16(u[4:], uint16(udpLen))
	be.PutUint16(u[6:], 0)
	copy(u[udpHdrLen:], payload)
	if !v4 {
		// A UDP checksum is mandatory over IPv6 (RFC 8200 §8.1).
		be.PutUint16(u[6:], udp6Checksum(ip[8:24], ip[24:40], u))
	}
	_, err := pw.w.Write(b)
	return err
}

// ipv4Checksum is the Internet checksum of an IPv4 header whose checksum
// field is zero.
func ipv4Checksum(h []byte) uint16 {
	return ^fold(sum16(0, h))
}

func udp6Checksum(src, dst, u []byte) uint16 {
	var pseudo [8]byte
	binary.BigEndian.PutUint32(pseudo[0:], uint32(len(u)))
	pseudo[7] = protoUDP
	s := sum16(sum16(sum16(0, src), dst), pseudo[:])
	c := ^fold(sum16(s, u))
	if c == 0 {
		return 0xffff
	}
	return c
}

func sum16(s uint32, b []byte) uint32 {
	for len(b) >= 2 {
		s += uint32(b[0])<<8 | uint32(b[1])
		s = s&0xffff + s>>16
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
		s = s&0xffff + s>>16
	}
	return s
}

func fold(s uint32) uint16 {
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}
