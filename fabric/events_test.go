package fabric

import "testing"

// TestEventsBounded: the event queue holds at most MaxEvents between two
// calls of Events; more are dropped and counted, and Events empties it.
func TestEventsBounded(t *testing.T) {
	s, err := New(Config{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range MaxEvents + 5 {
		s.logEvent(Event{Kind: EventMemberDead, Member: uint16(i)})
	}
	got := s.Events(nil)
	if len(got) != MaxEvents || got[0].Member != 0 || got[MaxEvents-1].Member != MaxEvents-1 {
		t.Fatalf("Events returned %d events, want the first %d", len(got), MaxEvents)
	}
	if d := s.Stats().EventsDropped; d != 5 {
		t.Errorf("EventsDropped = %d, want 5", d)
	}
	if got := s.Events(nil); len(got) != 0 {
		t.Errorf("second Events returned %d events, want none", len(got))
	}
}
