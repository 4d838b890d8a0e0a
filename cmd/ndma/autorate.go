package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ndma/ndma/bench"
	"github.com/ndma/ndma/testbed"
	"github.com/ndma/ndma/testbed/fidelity"
)

// rateAuto is the --rate value that asks for the rate search.
const rateAuto = "auto"

// rateAutoHelp is the help text of --rate auto.
const rateAutoHelp = `--rate auto picks the links' rate on this machine: it builds the
testbed at 10gbit, runs the heaviest jobs (16 MiB Allreduce, in the
network and with the ring, and Gloo's with --gloo, on every host) under
the fidelity monitor,
halves the rate until both are faithful, then narrows the step twice;
it prints every rate tried with its verdict and uses the highest
faithful one. --host-rate and --peak-rate cannot be given with it.`

// chooseRate runs the rate search for tb (its Rate "auto") and returns
// tb with the chosen rate, reporting each step to w.
func chooseRate(ctx context.Context, tb testbed.Config, rule fidelity.Rule, gloo bool, w io.Writer) (testbed.Config, error) {
	if tb.HostRate != "" || tb.PeakRate != "" {
		return tb, errors.New("--rate auto: --host-rate and --peak-rate cannot be given with it (the search sets every link's rate)")
	}
	fmt.Fprintln(w, "choosing the link rate: the heaviest jobs at falling rates until they are faithful")
	rate, _, err := bench.AutoRate(ctx, bench.AutoRateConfig{Testbed: tb, Fidelity: rule, Gloo: gloo, Step: func(s bench.AutoRateStep) {
		verdict := "faithful"
		if !s.Faithful {
			verdict = "not faithful: " + s.Reason
		}
		fmt.Fprintf(w, "  %-8s %s\n", testbed.FormatRate(s.RateBits), verdict)
	}})
	if err != nil {
		return tb, err
	}
	fmt.Fprintf(w, "chose %s: the highest rate tried at which the heaviest jobs were faithful\n", testbed.FormatRate(rate))
	tb.Rate = testbed.FormatRate(rate)
	return tb, nil
}

// isRateAuto reports whether a --rate value asks for the search.
func isRateAuto(s string) bool { return strings.EqualFold(strings.TrimSpace(s), rateAuto) }
