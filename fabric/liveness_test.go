package fabric

import (
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
