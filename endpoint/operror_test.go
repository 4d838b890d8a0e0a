package endpoint

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/ndma/ndma/wire"
)

// TestOpErrorText: an OpError names the op, the peer and, for a memory
// access, the address, and never the key (a capability that must not
// reach logs).
func TestOpErrorText(t *testing.T) {
	peer := netip.MustParseAddrPort("10.0.0.1:7470")
	for _, c := range []struct {
		err  OpError
		want string
	}{
		{OpError{Kind: KindRead, Peer: peer, Key: 0xdeadbeef, Addr: 0x1000, Err: wire.StatusBadKey}, "read 10.0.0.1:7470 at 0x1000: "},
		{OpError{Kind: KindControl, Peer: peer, Key: 0xdeadbeef, Err: ErrTimeout}, "control 10.0.0.1:7470: endpoint: operation timed out"},
		{OpError{Kind: KindMulticast, Peer: peer, Err: ErrTimeout}, "multicast 10.0.0.1:7470: "},
	} {
		got := c.err.Error()
		if !strings.HasPrefix(got, c.want) || strings.Contains(got, "deadbeef") || strings.Contains(got, "key=") {
			t.Errorf("%q, want it to start with %q and name no key", got, c.want)
		}
	}
}
