package fabric

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ndma/ndma/wire/ctrl"
)

// TestStallIsNotSilence: a switch that itself stops running for three
// heartbeat timeouts (its process descheduled, its loop blocked) counts
// no member dead when it runs again, although the first thing it does
// is a Poll, before it steps the heartbeats that waited meanwhile; a
// member that then really goes silent is counted dead after the
// heartbeat timeout, with its silence in the event.
func TestStallIsNotSilence(t *testing.T) {
	const timeout = time.Second
	h := newCtlHarness(t, Config{HeartbeatTimeout: timeout})
	a, b := h.client(addrN(1), 9000), h.client(addrN(2), 9000)
	h.register(a, 0)
	group := h.register(b, 1)
	heartbeat := func(cs ...*ctlClient) {
		for i, c := range cs {
			h.send(c, &ctrl.Msg{Type: ctrl.Heartbeat, Group: group, Member: uint16(i)})
		}
	}
	for range 8 {
		heartbeat(a, b)
		h.pump(250 * time.Millisecond)
	}

	// The stall: three timeouts pass and the switch neither steps nor
	// polls; both members heartbeat at its end, and the switch polls
	// before it reads them.
	h.now = h.now.Add(3 * timeout)
	heartbeat(a, b)
	h.sw.Poll(h.now, nil)
	h.pump(250 * time.Millisecond)
	st := h.sw.Stats()
	if st.MembersDead != 0 {
		t.Fatalf("%d members counted dead after the switch's own stall, want 0", st.MembersDead)
	}
	if st.Stalls != 1 {
		t.Fatalf("%d stalls counted, want 1", st.Stalls)
	}

	// Rank 1 goes silent; rank 0 goes on.
	for range 8 {
		heartbeat(a)
		h.pump(250 * time.Millisecond)
	}
	st = h.sw.Stats()
	if st.MembersDead != 1 || st.Stalls != 1 {
		t.Fatalf("after rank 1 was silent for 2 s: %d dead, %d stalls; want 1 and 1", st.MembersDead, st.Stalls)
	}
	var dead []Event
	for _, e := range h.sw.Events(nil) {
		if e.Kind == EventMemberDead {
			dead = append(dead, e)
		}
	}
	if len(dead) != 1 || dead[0].Member != 1 || dead[0].Left {
		t.Fatalf("member-dead events %+v, want rank 1's", dead)
	}
	if s := dead[0].Silent; s <= timeout || s > timeout+timeout/4 {
		t.Fatalf("rank 1 counted dead after %v of silence, want just over %v", s, timeout)
	}
}

// TestIrregularHeartbeatsAreNotDeath: a member whose heartbeats arrive
// irregularly (a busy host: 100 to 900 ms apart where 250 ms is asked)
// outlives a 1.6 s silence that counts a member with regular heartbeats
// dead after just over the 1 s timeout; once it really goes silent it is
// counted dead too, within four timeouts.
func TestIrregularHeartbeatsAreNotDeath(t *testing.T) {
	const timeout = time.Second
	h := newCtlHarness(t, Config{HeartbeatTimeout: timeout})
	busy, calm := h.client(addrN(1), 9000), h.client(addrN(2), 9000)
	h.register(busy, 0)
	group := h.register(calm, 1)
	beat := func(c *ctlClient, id int) {
		h.send(c, &ctrl.Msg{Type: ctrl.Heartbeat, Group: group, Member: uint16(id)})
	}
	dead := func() map[uint16]time.Duration {
		out := map[uint16]time.Duration{}
		for _, e := range h.sw.Events(nil) {
			if e.Kind == EventMemberDead {
				out[e.Member] = e.Silent
			}
		}
		return out
	}
	// 30 s of heartbeats: the calm member's every 250 ms, the busy one's
	// 100 to 900 ms apart.
	r := rand.New(rand.NewPCG(1, 2))
	next, calmNext := h.now, h.now
	for end := h.now.Add(30 * time.Second); h.now.Before(end); {
		if !h.now.Before(next) {
			beat(busy, 0)
			next = h.now.Add(time.Duration(100+r.IntN(801)) * time.Millisecond)
		}
		if !h.now.Before(calmNext) {
			beat(calm, 1)
			calmNext = h.now.Add(250 * time.Millisecond)
		}
		h.pump(10 * time.Millisecond)
	}
	if d := dead(); len(d) != 0 {
		t.Fatalf("counted dead while heartbeating: %v", d)
	}
	// Both fall silent for 1.6 s, then heartbeat again.
	h.pump(1600 * time.Millisecond)
	beat(busy, 0)
	beat(calm, 1)
	h.pump(10 * time.Millisecond)
	d := dead()
	if s, ok := d[1]; !ok || s <= timeout || s > timeout+timeout/4 {
		t.Fatalf("calm member: dead %v after %v of silence, want just over %v", ok, s, timeout)
	}
	if _, ok := d[0]; ok {
		t.Fatal("the busy member (irregular heartbeats) counted dead after a 1.6 s silence")
	}
	// The busy member goes silent for good: dead within four timeouts.
	h.pump(maxSilenceFactor*timeout + timeout/2)
	d = dead()
	if s, ok := d[0]; !ok || s > maxSilenceFactor*timeout+timeout/4 {
		t.Fatalf("busy member silent for good: dead %v after %v of silence, want within %v", ok, s, maxSilenceFactor*timeout)
	}
}
