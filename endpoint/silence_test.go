package endpoint

import (
	"testing"
	"time"
)

// silenceRun drives a silence as Group.heartbeats does, at every interval
// from start: check, then send; the switch answers each heartbeat rtt
// later while answers(at) says so. It returns the first tick at which
// the switch counts as gone (zero if none before end) and the silence
// reported then.
func silenceRun(s *silence, iv time.Duration, start, end time.Time, ticks func(at time.Time) bool, answers func(at time.Time) bool) (gone time.Time, quiet time.Duration) {
	const rtt = 100 * time.Microsecond
	for at := start; at.Before(end); at = at.Add(iv) {
		if !ticks(at) {
			continue // this member does not run
		}
		if q, g := s.check(at); g {
			return at, q
		}
		s.sent(at)
		if answers(at) {
			s.answer(at.Add(rtt))
		}
	}
	return time.Time{}, 0
}

func always(time.Time) bool { return true }

// TestSilenceDeadSwitch: a switch that answered every heartbeat and then
// none counts as gone at the first check past 4 intervals of silence
// (1 s with the default 250 ms), within twice the switch's heartbeat
// timeout; one whose answers came irregularly is given longer, up to 6
// intervals, and still counts as gone within twice the timeout.
func TestSilenceDeadSwitch(t *testing.T) {
	const iv = 250 * time.Millisecond
	t0 := time.Unix(1000, 0)
	died := t0.Add(30 * time.Second)
	for _, c := range []struct {
		name     string
		answers  func(time.Time) bool
		min, max time.Duration // the silence when it counts as gone
	}{
		{"regular", func(at time.Time) bool { return at.Before(died) }, 4 * iv, 5 * iv},
		// Every third answer missing: gaps of 1 and 2 intervals.
		{"irregular", func(at time.Time) bool { return at.Before(died) && at.Sub(t0)/iv%3 != 0 }, 6 * iv, 7 * iv},
	} {
		s := newSilence(iv, t0, t0)
		at, quiet := silenceRun(s, iv, t0.Add(iv), t0.Add(time.Minute), always, c.answers)
		if at.IsZero() {
			t.Fatalf("%s: the dead switch never counted as gone", c.name)
		}
		t.Logf("%s: gone %v after the switch died, silent for %v", c.name, at.Sub(died), quiet)
		if at.Before(died) || quiet <= c.min || quiet > c.max {
			t.Errorf("%s: gone at %v (switch died at %v), silent for %v; want more than %v, at most %v",
				c.name, at.Sub(t0), died.Sub(t0), quiet, c.min, c.max)
		}
		if after := at.Sub(died); after > 2*time.Second {
			t.Errorf("%s: gone %v after the switch died, want within 2s (twice its heartbeat timeout)", c.name, after)
		}
	}
}

// TestSilencePausedMember: a member that was paused itself (no ticks,
// no answers read) for longer than the threshold does not take its
// switch for gone on its first check after the pause: the switch had no
// heartbeat to answer. It still finds a switch that died meanwhile gone,
// 4 intervals after it resumed. A member that could not send its
// heartbeats (none handed to the transport) is treated the same.
func TestSilencePausedMember(t *testing.T) {
	const iv = 250 * time.Millisecond
	t0 := time.Unix(1000, 0)
	paused, resumed := t0.Add(10*time.Second), t0.Add(13*time.Second+iv/2)
	running := func(at time.Time) bool { return at.Before(paused) || !at.Before(resumed) }

	s := newSilence(iv, t0, t0)
	if at, q := silenceRun(s, iv, t0.Add(iv), t0.Add(time.Minute), running, always); !at.IsZero() {
		t.Fatalf("a live switch counted as gone at %v (silent for %v) after its member's pause", at.Sub(t0), q)
	}

	s = newSilence(iv, t0, t0)
	dead := func(at time.Time) bool { return at.Before(paused) }
	at, q := silenceRun(s, iv, t0.Add(iv), t0.Add(time.Minute), running, dead)
	first := resumed.Add(-resumed.Sub(t0) % iv).Add(iv) // the first tick after the pause
	if at.IsZero() || at.Sub(first) <= 4*iv || at.Sub(first) > 5*iv {
		t.Fatalf("a switch dead during its member's pause counted as gone %v after the member ran again (silent for %v), want after 4 to 5 intervals",
			at.Sub(first), q)
	}

	// Heartbeats not sent (the transport's queue full, say) from 10 s
	// to 13 s: a switch that answers again at once is not gone.
	s = newSilence(iv, t0, t0)
	for at := t0.Add(iv); at.Before(t0.Add(20 * time.Second)); at = at.Add(iv) {
		if _, g := s.check(at); g {
			t.Fatalf("gone at %v: the member sent no heartbeat for 3 s", at.Sub(t0))
		}
		if !at.Before(paused) && at.Before(resumed) {
			continue
		}
		s.sent(at)
		s.answer(at.Add(time.Millisecond))
	}
}

// TestSilenceDataIsLife: a switch whose answers to heartbeats are all
// lost or late, but which sends other datagrams (data, acknowledgements),
// is alive; once it sends nothing at all it is gone 4 to 5 intervals
// later.
func TestSilenceDataIsLife(t *testing.T) {
	const iv = 250 * time.Millisecond
	t0 := time.Unix(1000, 0)
	stopped := t0.Add(20 * time.Second)
	s := newSilence(iv, t0, t0)
	for at := t0.Add(iv); at.Before(t0.Add(time.Minute)); at = at.Add(iv) {
		if at.Before(stopped) && at.Sub(t0)/iv%2 == 0 {
			s.heard(at.Add(-iv / 3)) // a datagram every other interval
		}
		quiet, gone := s.check(at)
		if gone {
			if at.Before(stopped) || at.Sub(stopped) > 5*iv || quiet <= 4*iv {
				t.Fatalf("gone at %v, silent for %v; the switch sent its last datagram before %v", at.Sub(t0), quiet, stopped.Sub(t0))
			}
			return
		}
		s.sent(at)
	}
	t.Fatal("a switch that sent nothing for 40 s was never gone")
}
