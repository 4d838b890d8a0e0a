package jepsen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fakeSystem is a system whose faults only mark themselves active, and
// check the nemesis's promises as they start.
type fakeSystem struct {
	t         *testing.T
	mu        sync.Mutex
	active    map[string]bool
	maxActive int
	targets   map[string]string
	starts    int
	failStart string
}

func newFake(t *testing.T, maxActive int) *fakeSystem {
	return &fakeSystem{t: t, active: map[string]bool{}, maxActive: maxActive, targets: map[string]string{}}
}

// faults are crash and loss faults on n nodes (one target each) and a
// switch crash.
func (s *fakeSystem) faults(n int) []Fault {
	var fs []Fault
	add := func(name, kind, target string) {
		s.targets[name] = target
		fs = append(fs, Fault{Name: name, Kind: kind, Target: target,
			Start: func() error {
				s.mu.Lock()
				defer s.mu.Unlock()
				if s.active[name] {
					s.t.Errorf("%s started while active", name)
				}
				s.active[name] = true
				s.starts++
				if len(s.active) > s.maxActive {
					s.t.Errorf("%d faults active, max %d", len(s.active), s.maxActive)
				}
				for other := range s.active {
					if other != name && target != "" && s.targets[other] == target {
						s.t.Errorf("%s and %s active at once on %s", name, other, target)
					}
				}
				if name == s.failStart {
					return errors.New("half done")
				}
				return nil
			},
			Stop: func() error {
				s.mu.Lock()
				defer s.mu.Unlock()
				if !s.active[name] {
					s.t.Errorf("%s stopped while not active", name)
				}
				delete(s.active, name)
				return nil
			}})
	}
	// Out of order on purpose: the schedule must not depend on it.
	for i := n - 1; i >= 0; i-- {
		add(fmt.Sprintf("crash node %d", i), "crash node", fmt.Sprintf("node %d", i))
		add(fmt.Sprintf("loss node %d", i), "loss", fmt.Sprintf("node %d", i))
	}
	add("crash switch", "", "")
	return fs
}

func testConfig(fs []Fault) NemesisConfig {
	return NemesisConfig{Faults: fs, Total: time.Minute, MinGap: 100 * time.Millisecond, MaxGap: 3 * time.Second,
		MinDuration: time.Second, MaxDuration: 10 * time.Second, MaxActive: 3}
}

func TestNemesisDeterministic(t *testing.T) {
	fs := newFake(t, 3).faults(3)
	plan := func(seed uint64, fs []Fault) []Step {
		n, err := NewNemesis(rand.New(rand.NewPCG(seed, 0)), testConfig(fs), nil)
		if err != nil {
			t.Fatal(err)
		}
		return n.Plan()
	}
	a := plan(1, fs)
	rev := slices.Clone(fs)
	slices.Reverse(rev)
	if b := plan(1, rev); !slices.Equal(a, b) {
		t.Errorf("one seed, two schedules:\n%v\n%v", a, b)
	}
	if c := plan(2, fs); slices.Equal(a, c) {
		t.Errorf("seeds 1 and 2 drew one schedule: %v", a)
	}
	if len(a) < 10 {
		t.Errorf("a minute of faults has %d steps: %v", len(a), a)
	}
}

// TestNemesisSchedule: over many seeds, the schedule keeps its bounds,
// overlaps faults, and heals each before the end.
func TestNemesisSchedule(t *testing.T) {
	overlapped := false
	for seed := range uint64(50) {
		fs := newFake(t, 3)
		cfg := testConfig(fs.faults(3))
		n, err := NewNemesis(rand.New(rand.NewPCG(seed, 0)), cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		started := map[string]time.Duration{}
		var last time.Duration
		for _, s := range n.Plan() {
			if s.At < last || s.At > cfg.Total {
				t.Fatalf("seed %d: step %v out of order or past the end", seed, s)
			}
			last = s.At
			if s.Stop {
				d := s.At - started[s.Fault]
				if d > cfg.MaxDuration || d < cfg.MinDuration && s.At != cfg.Total {
					t.Errorf("seed %d: %s lasted %v", seed, s.Fault, d)
				}
				delete(started, s.Fault)
				continue
			}
			if _, on := started[s.Fault]; on {
				t.Fatalf("seed %d: %s started twice", seed, s.Fault)
			}
			started[s.Fault] = s.At
			overlapped = overlapped || len(started) > 1
			if len(started) > cfg.MaxActive {
				t.Errorf("seed %d: %d active at %v", seed, len(started), s.At)
			}
			for other := range started {
				if other != s.Fault && fs.targets[other] != "" && fs.targets[other] == fs.targets[s.Fault] {
					t.Errorf("seed %d: %s and %s at once", seed, s.Fault, other)
				}
			}
		}
		if len(started) != 0 {
			t.Errorf("seed %d: never healed: %v", seed, started)
		}
	}
	if !overlapped {
		t.Errorf("no schedule overlaps two faults")
	}
}

// TestNemesisRun: the run follows the schedule in (virtual) time,
// records each fault, and leaves nothing active, also when cut short or
// when a fault fails to start.
func TestNemesisRun(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cut       time.Duration
		failStart string
	}{{"whole", 0, ""}, {"cut short", 20 * time.Second, ""}, {"start fails", 0, "crash switch"}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fs := newFake(t, 3)
				fs.failStart = tc.failStart
				cfg := testConfig(fs.faults(3))
				h := NewHistory(nil)
				n, err := NewNemesis(rand.New(rand.NewPCG(7, 0)), cfg, h)
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if tc.cut > 0 {
					time.AfterFunc(tc.cut, cancel)
				}
				err = n.Run(ctx)
				took := time.Since(h.Start())
				if len(fs.active) != 0 {
					t.Errorf("still active after the run: %v", fs.active)
				}
				plan := n.Plan()
				var starts []Step
				for _, s := range plan {
					if !s.Stop && (tc.cut == 0 || s.At < tc.cut) {
						starts = append(starts, s)
					}
				}
				evs := h.Faults()
				if len(evs) != len(starts) || fs.starts != len(starts) {
					t.Fatalf("%d faults recorded, %d started, want %d", len(evs), fs.starts, len(starts))
				}
				for i, ev := range evs {
					if ev.Name != starts[i].Fault || h.Since(ev.Start) != starts[i].At || ev.Stop.Before(ev.Start) || !ev.stopped {
						t.Errorf("fault %d: %s from %v to %v, want %v", i, ev.Name, h.Since(ev.Start), h.Since(ev.Stop), starts[i])
					}
				}
				switch {
				case tc.cut > 0 && took != tc.cut:
					t.Errorf("cut at %v, returned at %v", tc.cut, took)
				case tc.cut == 0 && took != plan[len(plan)-1].At:
					t.Errorf("returned at %v, the schedule ends at %v", took, plan[len(plan)-1].At)
				}
				if tc.failStart == "" && err != nil {
					t.Errorf("run: %v", err)
				}
				if tc.failStart != "" {
					if err == nil || !strings.Contains(err.Error(), "half done") {
						t.Errorf("run: %v, want the start's error", err)
					}
					r := Check(h, CheckOptions{})
					if r.Faults["crash switch"] == 0 || !strings.Contains(r.String(), "half done") {
						t.Errorf("report does not show the failed start:\n%v", r)
					}
				}
			})
		})
	}
}

func TestNemesisConfig(t *testing.T) {
	ok := func() error { return nil }
	for _, cfg := range []NemesisConfig{
		{},
		{Total: time.Second, MinGap: 2 * time.Second, MaxGap: time.Second},
		{Total: time.Second, Faults: []Fault{{Name: "a", Start: ok, Stop: ok}, {Name: "a", Start: ok, Stop: ok}}},
		{Total: time.Second, Faults: []Fault{{Name: "a", Start: ok}}},
	} {
		if _, err := NewNemesis(rand.New(rand.NewPCG(1, 0)), cfg, nil); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
}
