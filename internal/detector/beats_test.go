package detector

import (
	"testing"
	"time"
)

// TestBeatsAllowed: the silence allowed grows with the spread of the
// gaps and stays within [timeout, most]; before eight gaps it is the
// timeout.
func TestBeatsAllowed(t *testing.T) {
	const timeout, most = time.Second, 4 * time.Second
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		name string
		gaps []time.Duration
		want func(time.Duration) bool
	}{
		{"none", nil, func(d time.Duration) bool { return d == timeout }},
		{"few", []time.Duration{time.Second, 10 * time.Millisecond, time.Second}, func(d time.Duration) bool { return d == timeout }},
		{"regular", repeat(250*time.Millisecond, 40), func(d time.Duration) bool { return d == timeout }},
		{"irregular", alternate(100*time.Millisecond, 900*time.Millisecond, 40), func(d time.Duration) bool { return d > 2*timeout && d <= most }},
		{"wild", alternate(10*time.Millisecond, 3*time.Second, 40), func(d time.Duration) bool { return d == most }},
	} {
		var b Beats
		at := t0
		b.Beat(at)
		for _, g := range c.gaps {
			at = at.Add(g)
			b.Beat(at)
		}
		if got := b.Allowed(timeout, most); !c.want(got) {
			t.Errorf("%s: allowed %v (mean + 6 sd of the gaps: %v)", c.name, got, b.allow)
		}
	}
}

// TestBeatsAllowedBound: a bound below the timeout allows the timeout.
func TestBeatsAllowedBound(t *testing.T) {
	var b Beats
	at := time.Unix(1000, 0)
	for i, g := range alternate(10*time.Millisecond, 3*time.Second, 40) {
		at = at.Add(g)
		b.Beat(at)
		if got := b.Allowed(time.Second, time.Second/2); got != time.Second {
			t.Fatalf("after %d gaps: allowed %v with timeout 1s, bound 0.5s", i, got)
		}
	}
}

func repeat(d time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

func alternate(a, b time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = a
		if i%2 == 1 {
			out[i] = b
		}
	}
	return out
}
