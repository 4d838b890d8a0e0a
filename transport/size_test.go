package transport

import (
	"testing"
	"unsafe"
)

// TestPeerStateSize pins the per-peer state documented in
// docs/ARCHITECTURE.md, so a change to it is a conscious one.
func TestPeerStateSize(t *testing.T) {
	p := unsafe.Sizeof(peer{})
	r := unsafe.Sizeof(pktRec{})
	t.Logf("peer struct %d bytes, send record %d bytes, receive bitmap %d bytes at RecvWindow=%d",
		p, r, (DefaultRecvWindow/64+1)*8, DefaultRecvWindow)
	if p > 584 || r > 48 {
		t.Fatalf("per-peer state grew: peer %d B, record %d B", p, r)
	}
}
