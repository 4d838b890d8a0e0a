package dissect

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"
)

// TestWriterRecords checks the bytes of a capture: the file header, then
// for an IPv4 and an IPv6 datagram the record header, an IP header whose
// checksum (IPv4) verifies, and the UDP header and payload.
func TestWriterRecords(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1_700_000_000, 123_456_000)
	payload := []byte("ndma")
	if err := w.WriteUDP(at, netip.MustParseAddrPort("10.0.0.1:7471"), netip.MustParseAddrPort("10.0.0.2:40000"), payload); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteUDP(at, netip.MustParseAddrPort("[fd00::1]:1"), netip.MustParseAddrPort("10.0.0.2:2"), payload); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteUDP(at, netip.AddrPort{}, netip.MustParseAddrPort("10.0.0.2:2"), payload); err == nil {
		t.Error("an invalid address was recorded")
	}
	b := buf.Bytes()
	le, be := binary.LittleEndian, binary.BigEndian
	if le.Uint32(b) != pcapMagic || le.Uint16(b[4:]) != 2 || le.Uint16(b[6:]) != 4 || le.Uint32(b[20:]) != LinkTypeRaw {
		t.Fatalf("file header % x", b[:24])
	}
	r := b[24:]
	if le.Uint32(r) != 1_700_000_000 || le.Uint32(r[4:]) != 123_456 || le.Uint32(r[8:]) != 20+8+4 || le.Uint32(r[12:]) != 20+8+4 {
		t.Fatalf("IPv4 record header % x", r[:16])
	}
	ip := r[16:36]
	if ip[0] != 0x45 || ip[9] != protoUDP || be.Uint16(ip[2:]) != 32 || fold(sum16(0, ip)) != 0xffff {
		t.Errorf("IPv4 header % x", ip)
	}
	u := r[36:]
	if be.Uint16(u) != 7471 || be.Uint16(u[2:]) != 40000 || be.Uint16(u[4:]) != 12 || !bytes.Equal(u[8:12], payload) {
		t.Errorf("UDP header and payload % x", u[:12])
	}
	r = u[12:]
	if le.Uint32(r[8:]) != 40+8+4 {
		t.Fatalf("IPv6 record length %d", le.Uint32(r[8:]))
	}
	ip6 := r[16:56]
	want := netip.MustParseAddr("::ffff:10.0.0.2").As16()
	if ip6[0]>>4 != 6 || ip6[6] != protoUDP || be.Uint16(ip6[4:]) != 12 || !bytes.Equal(ip6[24:40], want[:]) {
		t.Errorf("IPv6 header % x", ip6)
	}
	// The UDP checksum over the pseudo-header verifies.
	var pseudo [8]byte
	be.PutUint32(pseudo[0:], 12)
	pseudo[7] = protoUDP
	if s := fold(sum16(sum16(sum16(sum16(0, ip6[8:24]), ip6[24:40]), pseudo[:]), r[56:68])); s != 0xffff {
		t.Errorf("UDP checksum does not verify: %#x", s)
	}
}
