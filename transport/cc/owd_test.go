package cc

import (
	"testing"
	"time"
)

func TestOWDBase(t *testing.T) {
	var o OWD
	t0 := time.Unix(1000, 0)
	for i, c := range []struct {
		at   time.Duration // since t0
		in   bool          // SampleIn, else SampleOut
		owd  int64
		full bool
		want int64
	}{
		{0, false, 500, false, 0},                // a small packet sets no base
		{0, false, 700, true, 700},               // the first full one does
		{time.Second, false, 900, true, 700},     // higher: the base stands
		{time.Second, false, 300, false, 700},    // lower but small: no effect
		{2 * time.Second, false, 600, true, 600}, // lower and full
		{2 * time.Second, true, 50, true, 50},    // the other direction has its own base
		{OWDBucket, true, 80, true, 50},          // a new bucket: the old one still counts
		{OWDBucket, false, 650, false, 600},      // rotated together with In
		{OWDBucket + time.Second, false, 800, true, 600},
		{2 * OWDBucket, false, 900, true, 800}, // 600's bucket aged out
		{2 * OWDBucket, true, 90, false, 80},   // In rotated with Out: 50's bucket aged out
	} {
		now := t0.Add(c.at)
		var got int64
		if c.in {
			got = o.SampleIn(now, c.owd, c.full)
		} else {
			got = o.SampleOut(now, c.owd, c.full)
		}
		if got != c.want {
			t.Errorf("step %d: base %d, want %d", i, got, c.want)
		}
	}
}
