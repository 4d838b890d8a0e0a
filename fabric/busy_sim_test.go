package fabric_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio/simnet"
)

// TestSimBusyMemberIsNotDead: on simnet, one member of a group is now
// and then not scheduled (simnet.Network.Stall) for 100-700 ms, as a
// process on a busy host; another runs smoothly. Neither is counted dead
// while they heartbeat so. Then both stop for 1.2 s: the smooth one,
// whose heartbeats came like clockwork, is counted dead after the 1 s
// timeout; the busy one, whose heartbeats have come irregularly, is not.
// Crashed for good, the busy one is counted dead within four timeouts.
// One seed in CI; FABRIC_BUSY_SEEDS=A-B runs those.
func TestSimBusyMemberIsNotDead(t *testing.T) {
	first, last := int64(17), int64(17)
	if v := os.Getenv("FABRIC_BUSY_SEEDS"); v != "" {
		if _, err := fmt.Sscanf(v, "%d-%d", &first, &last); err != nil || last < first {
			t.Fatalf("FABRIC_BUSY_SEEDS=%q: want A-B", v)
		}
	}
	for seed := first; seed <= last; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { busyMember(t, seed) })
	}
}

func busyMember(t *testing.T, seed int64) {
	const timeout = time.Second
	f := newSimFabric(t, seed, simnet.LinkConfig{Rate: 1e9, Latency: 20 * time.Microsecond}, fabric.Config{HeartbeatTimeout: timeout})
	ms := f.addMembers(3)
	f.join("busy", ms)
	busy, calm := ms[1], ms[2]
	dead := func() map[uint16]time.Duration {
		out := map[uint16]time.Duration{}
		for _, e := range f.sw.Events(nil) {
			if e.Kind == fabric.EventMemberDead {
				out[e.Member] = e.Silent
			}
		}
		return out
	}
	r := rand.New(rand.NewPCG(uint64(f.seed), 5))
	for end := f.net.Now().Add(30 * time.Second); f.net.Now().Before(end); {
		stall := time.Duration(100+r.IntN(601)) * time.Millisecond
		f.net.Stall(busy.addr, stall)
		f.net.RunFor(stall + time.Duration(200+r.IntN(601))*time.Millisecond)
	}
	if d := dead(); len(d) != 0 {
		t.Fatalf("seed %d: counted dead while heartbeating: %v", f.seed, d)
	}
	f.net.Stall(busy.addr, 1200*time.Millisecond)
	f.net.Stall(calm.addr, 1200*time.Millisecond)
	f.net.RunFor(1500 * time.Millisecond)
	d := dead()
	if s, ok := d[2]; !ok || s <= timeout || s > timeout+timeout/4 {
		t.Fatalf("seed %d: the smooth member stopped 1.2 s: dead %v after %v of silence, want just over %v", f.seed, ok, s, timeout)
	}
	if s, ok := d[1]; ok {
		t.Fatalf("seed %d: the busy member counted dead after %v of silence (a 1.2 s stop)", f.seed, s)
	}
	f.crash(busy)
	f.net.RunFor(4*timeout + timeout/2)
	if s, ok := dead()[1]; !ok || s > 4*timeout+timeout/4 {
		t.Fatalf("seed %d: the busy member crashed: dead %v after %v of silence, want within %v", f.seed, ok, s, 4*timeout)
	}
}
