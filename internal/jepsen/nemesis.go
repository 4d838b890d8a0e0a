package jepsen

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Fault is one thing a Nemesis can do to the system under test and undo.
type Fault struct {
	// Name tells the fault from every other (say, "crash node 1").
	Name string
	// Kind groups faults in the report (say, "crash node"); empty: Name.
	Kind string
	// Target is what the fault acts on: faults with the same non-empty
	// Target are never active at once (crashing a node and cutting its
	// link, say).
	Target string
	// Start injects the fault and Stop heals it. Stop is called once
	// after every Start, also when Start returned an error (it may have
	// done half its work).
	Start, Stop func() error
}

// NemesisConfig configures a Nemesis.
type NemesisConfig struct {
	Faults []Fault
	// Total is how long the schedule lasts: every fault is healed by
	// then. It must be positive.
	Total time.Duration
	// MinGap and MaxGap bound the time between one fault's start and the
	// next's. Zero MaxGap means Total/10; MinGap at most MaxGap.
	MinGap, MaxGap time.Duration
	// MinDuration and MaxDuration bound how long one fault lasts (cut
	// short at Total). Zero MaxDuration means Total/4; MinDuration at most
	// MaxDuration.
	MinDuration, MaxDuration time.Duration
	// MaxActive bounds the faults active at once. Zero means 2.
	MaxActive int
}

func (c *NemesisConfig) validate() error {
	if c.Total <= 0 {
		return fmt.Errorf("jepsen: nemesis: Total %v, want > 0", c.Total)
	}
	if c.MaxGap == 0 {
		c.MaxGap = c.Total / 10
	}
	if c.MaxDuration == 0 {
		c.MaxDuration = c.Total / 4
	}
	if c.MaxActive == 0 {
		c.MaxActive = 2
	}
	switch {
	case c.MinGap < 0 || c.MaxGap <= 0 || c.MinGap > c.MaxGap:
		return fmt.Errorf("jepsen: nemesis: gap from %v to %v", c.MinGap, c.MaxGap)
	case c.MinDuration < 0 || c.MaxDuration <= 0 || c.MinDuration > c.MaxDuration:
		return fmt.Errorf("jepsen: nemesis: duration from %v to %v", c.MinDuration, c.MaxDuration)
	case c.MaxActive < 0:
		return fmt.Errorf("jepsen: nemesis: MaxActive %d", c.MaxActive)
	}
	seen := map[string]bool{}
	for _, f := range c.Faults {
		if f.Name == "" || seen[f.Name] {
			return fmt.Errorf("jepsen: nemesis: fault name %q empty or repeated", f.Name)
		}
		if f.Start == nil || f.Stop == nil {
			return fmt.Errorf("jepsen: nemesis: fault %q without Start or Stop", f.Name)
		}
		seen[f.Name] = true
	}
	return nil
}

// Step is one step of a nemesis schedule: at At after the run's start,
// Fault starts or (Stop) heals.
type Step struct {
	At    time.Duration
	Fault string
	Stop  bool
}

func (s Step) String() string {
	what := "start"
	if s.Stop {
		what = "stop"
	}
	return fmt.Sprintf("%v %s %s", s.At, what, s.Fault)
}

// Nemesis injects faults on a schedule drawn from a seeded generator: a
// fault starts after a random gap, picked at random among those not
// active and whose Target is free, while fewer than MaxActive are, and
// lasts a random duration; several overlap. The schedule is fixed before
// the run and depends only on the generator and the config (faults are
// drawn in order of name), so a seed reproduces it.
type Nemesis struct {
	faults map[string]*Fault
	plan   []Step
	h      *History
}

// NewNemesis draws a schedule from rng for cfg; the run records each
// fault in h (nil: nowhere).
func NewNemesis(rng *rand.Rand, cfg NemesisConfig, h *History) (*Nemesis, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	n := &Nemesis{faults: map[string]*Fault{}, h: h}
	byName := slices.Clone(cfg.Faults)
	slices.SortFunc(byName, func(a, b Fault) int { return cmp.Compare(a.Name, b.Name) })
	for i := range byName {
		n.faults[byName[i].Name] = &byName[i]
	}
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	ends := map[string]time.Duration{} // active faults: when they stop
	for at := between(cfg.MinGap, cfg.MaxGap); at < cfg.Total; at += between(cfg.MinGap, cfg.MaxGap) {
		for name, end := range ends {
			if end <= at {
				delete(ends, name)
			}
		}
		if len(ends) >= cfg.MaxActive {
			continue
		}
		var free []*Fault
		for i := range byName {
			f := &byName[i]
			if _, on := ends[f.Name]; on {
				continue
			}
			busy := false
			for name := range ends {
				if f.Target != "" && n.faults[name].Target == f.Target {
					busy = true
				}
			}
			if !busy {
				free = append(free, f)
			}
		}
		if len(free) == 0 {
			continue
		}
		f := free[rng.IntN(len(free))]
		end := min(at+between(cfg.MinDuration, cfg.MaxDuration), cfg.Total)
		ends[f.Name] = end
		n.plan = append(n.plan, Step{At: at, Fault: f.Name}, Step{At: end, Fault: f.Name, Stop: true})
	}
	// In time order; at one instant, heal before injecting, and otherwise
	// keep the order drawn.
	slices.SortStableFunc(n.plan, func(a, b Step) int {
		if c := cmp.Compare(a.At, b.At); c != 0 {
			return c
		}
		return -cmp.Compare(boolInt(a.Stop), boolInt(b.Stop))
	})
	return n, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ErrSkip, wrapped by the error of a Fault's Start, says that the fault
// does not apply now (its target is down already, say): it is recorded
// with the error, and Run does not count it as a failure.
var ErrSkip = errors.New("jepsen: fault skipped")

// Plan is the schedule, in order.
func (n *Nemesis) Plan() []Step { return slices.Clone(n.plan) }

// Run carries out the schedule from now, waiting on the time package's
// timers (virtual inside a synctest bubble), and returns when every fault
// it started is healed: at the end of the schedule, or when ctx is done,
// after stopping what is active (the latest started first). It returns
// the errors of the faults' Start (but ErrSkip) and Stop.
func (n *Nemesis) Run(ctx context.Context) error {
	start := time.Now()
	type active struct {
		f  *Fault
		ev *FaultEvent
	}
	var on []active
	var errs []error
	stop := func(i int) {
		a := on[i]
		on = slices.Delete(on, i, i+1)
		err := a.f.Stop()
		if err != nil {
			errs = append(errs, fmt.Errorf("jepsen: healing %s: %w", a.f.Name, err))
		}
		if n.h != nil {
			n.h.faultStop(a.ev, err)
		}
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for _, s := range n.plan {
		if wait := time.Until(start.Add(s.At)); wait > 0 {
			t.Reset(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			break
		}
		f := n.faults[s.Fault]
		if s.Stop {
			if i := slices.IndexFunc(on, func(a active) bool { return a.f == f }); i >= 0 {
				stop(i)
			}
			continue
		}
		kind := f.Kind
		if kind == "" {
			kind = f.Name
		}
		var ev *FaultEvent
		if n.h != nil {
			ev = n.h.faultStart(f.Name, kind)
		}
		on = append(on, active{f, ev})
		if err := f.Start(); err != nil {
			if !errors.Is(err, ErrSkip) {
				errs = append(errs, fmt.Errorf("jepsen: injecting %s: %w", f.Name, err))
			}
			if n.h != nil {
				n.h.faultErr(ev, err)
			}
		}
	}
	for len(on) > 0 {
		stop(len(on) - 1)
	}
	return errors.Join(errs...)
}
