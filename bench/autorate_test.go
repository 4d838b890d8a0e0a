package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ndma/ndma/testbed"
)

// TestSearchRate runs the rate search against machines whose faithful
// rates end at a known limit and checks the rates it tries and the one
// it picks: the highest tried at or under the limit.
func TestSearchRate(t *testing.T) {
	for _, c := range []struct {
		limit      uint64
		want       uint64
		wantTried  []uint64
		wantNoRate bool
	}{
		// 10g, 5g, 2.5g, 1.2g, 600m fails... 300m ok; then sqrt(300m*600m)=424m→420m ok, sqrt(420*600)=501m→500m fails.
		{limit: 450e6, want: 420e6, wantTried: []uint64{10e9, 5e9, 2.5e9, 1.2e9, 600e6, 300e6, 420e6, 500e6}},
		{limit: 20e9, want: 10e9, wantTried: []uint64{10e9}},
		{limit: 10e9, want: 10e9, wantTried: []uint64{10e9}},
		{limit: 1e6, want: 1e6, wantTried: []uint64{10e9, 5e9, 2.5e9, 1.2e9, 600e6, 300e6, 150e6, 75e6, 37e6, 18e6, 9e6, 4.5e6, 2.2e6, 1.1e6, 1e6}},
		{limit: 999e3, wantNoRate: true},
	} {
		var tried []uint64
		got, err := searchRate(10e9, 1e6, func(r uint64) (bool, error) {
			tried = append(tried, r)
			return r <= c.limit, nil
		})
		if c.wantNoRate {
			if !errors.Is(err, ErrNoFaithfulRate) {
				t.Errorf("limit %d: %d, %v; want ErrNoFaithfulRate", c.limit, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("limit %d: got %d, %v; want %d", c.limit, got, err, c.want)
		}
		if c.wantTried != nil && !slices.Equal(tried, c.wantTried) {
			t.Errorf("limit %d: tried %v, want %v", c.limit, tried, c.wantTried)
		}
	}
	boom := errors.New("testbed failed")
	if _, err := searchRate(10e9, 1e6, func(uint64) (bool, error) { return false, boom }); !errors.Is(err, boom) {
		t.Errorf("a failing probe: %v", err)
	}
}

// TestAutoRateTestbed runs the rate search on a small testbed (2 hosts,
// 64 KiB probes, 400 to 50 Mbit/s) and checks that its answer is
// consistent with its steps: the rate chosen was tried and faithful, and
// every higher rate tried was not; or, when no rate was faithful (a busy
// machine), that none of the steps was. It asserts no figure.
func TestAutoRateTestbed(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds testbeds of network namespaces and runs rank processes on them")
	}
	prefix := fmt.Sprintf("ndmaar%d", os.Getpid()%100000)
	if err := testbed.Check(t.Context(), prefix); err != nil {
		t.Skipf("no testbed here: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	var seen []AutoRateStep
	rate, steps, err := AutoRate(ctx, AutoRateConfig{
		Testbed: testbed.Config{Prefix: prefix, Hosts: 2, MTU: 9000, StateDir: filepath.Join(t.TempDir(), "state"), Binary: ndmaBinary(t)},
		Size:    64 << 10, Iters: 3, Max: 400e6, Min: 50e6,
		Step: func(s AutoRateStep) { seen = append(seen, s) },
	})
	if len(seen) != len(steps) || len(steps) == 0 {
		t.Fatalf("%d steps reported, %d returned (err %v)", len(seen), len(steps), err)
	}
	for _, s := range steps {
		t.Logf("%s: faithful %v %s", testbed.FormatRate(s.RateBits), s.Faithful, s.Reason)
		if len(s.Rows) != 2 {
			t.Errorf("%d rows at %d bit/s, want the in-network and the ring Allreduce", len(s.Rows), s.RateBits)
		}
		for _, r := range s.Rows {
			if r.RateBits != s.RateBits || r.Fidelity == nil {
				t.Errorf("row %s/%s at %d bit/s in the step of %d, verdict %v", r.Op, r.Algo, r.RateBits, s.RateBits, r.Fidelity)
			}
		}
	}
	if errors.Is(err, ErrNoFaithfulRate) {
		for _, s := range steps {
			if s.Faithful {
				t.Errorf("no rate chosen, but %d bit/s was faithful", s.RateBits)
			}
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range steps {
		switch {
		case s.RateBits == rate:
			found = s.Faithful
		case s.RateBits > rate && s.Faithful:
			t.Errorf("chose %d bit/s, but the higher %d bit/s was faithful", rate, s.RateBits)
		}
	}
	if !found {
		t.Errorf("chose %d bit/s, not a faithful step of %+v", rate, steps)
	}
}
