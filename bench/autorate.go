package bench

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/ndma/ndma/coll"
	"github.com/ndma/ndma/testbed"
	"github.com/ndma/ndma/testbed/fidelity"
)

// Defaults of an automatic rate search (AutoRateConfig).
const (
	// DefaultAutoRateMax is the first rate tried: 10 Gbit/s.
	DefaultAutoRateMax = 10e9
	// DefaultAutoRateMin is the lowest rate tried: 1 Mbit/s.
	DefaultAutoRateMin = 1e6
	// DefaultAutoRateSize is the probe jobs' message: 16 MiB, the
	// suite's heaviest.
	DefaultAutoRateSize = 16 << 20
	// autoRateRefine is the steps that narrow the rate between the
	// highest faithful one found by halving and the one above it.
	autoRateRefine = 2
)

// ErrNoFaithfulRate is returned by AutoRate when the probe jobs are not
// faithful even at the lowest rate tried.
var ErrNoFaithfulRate = errors.New("no link rate keeps the probe jobs faithful")

// AutoRateConfig configures an automatic choice of the links' rate.
type AutoRateConfig struct {
	// Testbed is the testbed the probes run on; its Rate (and HostRate)
	// is what the search sets.
	Testbed testbed.Config
	// Ops and Algos are the probe jobs, each operation with each
	// algorithm (empty: Allreduce, in the network and with the ring:
	// the suite's heaviest jobs).
	Ops   []coll.Operation
	Algos []coll.Algo
	// Gloo adds Gloo's Allreduce to the probes (the suite will run the
	// Gloo rows at the rate chosen).
	Gloo bool
	// Size is the probe jobs' message per rank (zero:
	// DefaultAutoRateSize); Iters their measured calls (zero: by size).
	Size, Iters int
	// Max and Min bound the rates tried, in bits per second (zero:
	// DefaultAutoRateMax and DefaultAutoRateMin).
	Max, Min uint64
	// Fidelity is the rule the probes are judged by.
	Fidelity fidelity.Rule
	// Step, if not nil, is told each rate tried and how it went.
	Step func(AutoRateStep)
}

// AutoRateStep is one rate an AutoRate search tried.
type AutoRateStep struct {
	RateBits uint64 `json:"rate_bits"`
	Faithful bool   `json:"faithful"`
	// Reason is the verdict of the first probe that was not faithful
	// (empty when all were).
	Reason string     `json:"reason,omitempty"`
	Rows   []SuiteRow `json:"rows"`
}

// AutoRate finds the highest link rate at which the probe jobs are
// faithful on this machine (Gloo's too, with Gloo): it tries Max, halves the rate until every
// probe job is faithful, then narrows the step to the next higher rate
// twice (at the geometric middle). It returns the rate and every step.
// Each step builds the testbed at its rate, runs the probes and takes it
// down.
func AutoRate(ctx context.Context, cfg AutoRateConfig) (uint64, []AutoRateStep, error) {
	if cfg.Max == 0 {
		cfg.Max = DefaultAutoRateMax
	}
	if cfg.Min == 0 {
		cfg.Min = DefaultAutoRateMin
	}
	if cfg.Size == 0 {
		cfg.Size = DefaultAutoRateSize
	}
	if len(cfg.Ops) == 0 {
		cfg.Ops = []coll.Operation{coll.OpAllreduce}
	}
	if len(cfg.Algos) == 0 {
		cfg.Algos = []coll.Algo{coll.AlgoInNet, coll.AlgoRing}
		if cfg.Gloo {
			cfg.Algos = append(cfg.Algos, AlgoGloo)
		}
	}
	if cfg.Min < 8e3 || cfg.Max < cfg.Min {
		return 0, nil, fmt.Errorf("bench: auto rate: from %s to %s: want 8kbit <= min <= max", testbed.FormatRate(cfg.Min), testbed.FormatRate(cfg.Max))
	}
	var steps []AutoRateStep
	probe := func(rate uint64) (bool, error) {
		step, err := autoRateProbe(ctx, &cfg, rate)
		if err != nil {
			return false, err
		}
		steps = append(steps, step)
		if cfg.Step != nil {
			cfg.Step(step)
		}
		return step.Faithful, nil
	}
	rate, err := searchRate(cfg.Max, cfg.Min, probe)
	return rate, steps, err
}

// searchRate is AutoRate's search over probe, a test of one rate.
func searchRate(hi, lo uint64, probe func(uint64) (bool, error)) (uint64, error) {
	var good, bad uint64
	for r := hi; ; r = max(roundRate(r/2), lo) {
		ok, err := probe(r)
		if err != nil {
			return 0, err
		}
		if ok {
			good = r
			break
		}
		bad = r
		if r == lo {
			break
		}
	}
	if good == 0 {
		return 0, fmt.Errorf("bench: auto rate: %w down to %s", ErrNoFaithfulRate, testbed.FormatRate(lo))
	}
	for range autoRateRefine {
		if bad == 0 {
			break
		}
		mid := roundRate(uint64(math.Sqrt(float64(good) * float64(bad))))
		if mid <= good || mid >= bad {
			break
		}
		ok, err := probe(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			good = mid
		} else {
			bad = mid
		}
	}
	return good, nil
}

// roundRate rounds a rate down to two significant digits (in bits per
// second), so the rates tried read as tc writes them: 625mbit, 39mbit.
func roundRate(r uint64) uint64 {
	p := uint64(1)
	for r/p >= 100 {
		p *= 10
	}
	return r / p * p
}

// autoRateProbe builds the testbed at rate and runs the probe jobs.
func autoRateProbe(ctx context.Context, cfg *AutoRateConfig, rate uint64) (AutoRateStep, error) {
	tb := cfg.Testbed
	tb.Rate, tb.HostRate, tb.PeakRate = testbed.FormatRate(rate), "", ""
	rows, err := RunSuite(ctx, SuiteConfig{Testbed: tb, Ops: cfg.Ops, Algos: cfg.Algos, Sizes: []int{cfg.Size},
		Iters: cfg.Iters, Fidelity: cfg.Fidelity, Gloo: cfg.Gloo})
	if err != nil {
		return AutoRateStep{}, fmt.Errorf("bench: auto rate: probing %s: %w", testbed.FormatRate(rate), err)
	}
	step := AutoRateStep{RateBits: rate, Faithful: len(rows) > 0, Rows: rows}
	for _, r := range rows {
		if r.Fidelity == nil || !r.Fidelity.Faithful {
			step.Faithful = false
			if r.Fidelity != nil && step.Reason == "" {
				step.Reason = fmt.Sprintf("%s/%s: %s", r.Op, r.Algo, r.Fidelity.Reason)
			}
		}
	}
	return step, nil
}
