package fabric

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/transport"
)

// TestAnyGoneBounded: the set of ended relays holds at most anyGoneMax
// entries (the oldest go first) and forgets an entry after anyGoneLife.
func TestAnyGoneBounded(t *testing.T) {
	var g anyGone
	t0 := time.Unix(1000, 0)
	key := func(i int) anyKey {
		return anyKey{peer: transport.PeerID{Addr: netip.MustParseAddrPort("10.0.0.2:9000")}, msgID: uint64(i)}
	}
	if g.has(key(1), t0) {
		t.Fatal("empty set has an entry")
	}
	for i := range anyGoneMax + 10 {
		g.add(key(i), t0)
	}
	if len(g.at) != anyGoneMax || g.n != anyGoneMax {
		t.Fatalf("%d entries (%d in the ring), want %d", len(g.at), g.n, anyGoneMax)
	}
	if g.has(key(0), t0) || g.has(key(9), t0) || !g.has(key(10), t0) || !g.has(key(anyGoneMax+9), t0) {
		t.Fatal("the oldest entries are not the ones forgotten")
	}
	g.add(key(10), t0) // again: no second entry
	if g.n != anyGoneMax {
		t.Fatalf("re-adding made %d entries", g.n)
	}
	later := t0.Add(anyGoneLife + time.Second)
	if g.has(key(10), later) {
		t.Fatal("an entry outlives anyGoneLife")
	}
	g.add(key(-1), later) // expired entries are dropped as new ones come
	if g.n != 1 || len(g.at) != 1 || !g.has(key(-1), later) {
		t.Fatalf("after expiry: %d entries (%d in the map)", g.n, len(g.at))
	}
}
