package wire

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

// ReplyToLen is the length of the reply-to trailer FlagReplyTo announces:
// a 16-byte IPv6 address (IPv4 as ::ffff:a.b.c.d) and a 2-byte port.
const ReplyToLen = 18

// ErrReplyTo reports a reply-to trailer that names no usable address.
var ErrReplyTo = errors.New("wire: bad reply-to address")

// AppendReplyTo appends ap's reply-to trailer to b.
func AppendReplyTo(b []byte, ap netip.AddrPort) []byte {
	a := ap.Addr().As16()
	b = append(b, a[:]...)
	return binary.BigEndian.AppendUint16(b, ap.Port())
}

// SplitReplyTo splits the payload of a FlagReplyTo packet into the
// request's own payload and the address its response goes to. An
// IPv4-mapped address comes back as IPv4; an unspecified address or a
// zero port is ErrReplyTo.
func SplitReplyTo(payload []byte) ([]byte, netip.AddrPort, error) {
	if len(payload) < ReplyToLen {
		return nil, netip.AddrPort{}, ErrReplyTo
	}
	n := len(payload) - ReplyToLen
	t := payload[n:]
	a := netip.AddrFrom16([16]byte(t[:16])).Unmap()
	port := binary.BigEndian.Uint16(t[16:])
	if a.IsUnspecified() || port == 0 {
		return nil, netip.AddrPort{}, ErrReplyTo
	}
	return payload[:n], netip.AddrPortFrom(a, port), nil
}
