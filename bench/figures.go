package bench

import (
	"bufio"
	"fmt"
	"slices"
	"strings"

	"github.com/ndma/ndma/coll"
)

// Figure is one of the testbed's targets computed from suite rows:
// what was measured against what was asked, so that a suite run on any
// machine says at once which targets it reaches.
type Figure struct {
	Ranks    int     `json:"ranks"`
	RateBits uint64  `json:"rate_bits"`
	PeakBits uint64  `json:"peak_rate_bits,omitempty"`
	Prio     bool    `json:"priority_queues,omitempty"`
	Name     string  `json:"name"`
	Target   string  `json:"target"`
	Value    float64 `json:"value"` // the measured ratio the target bounds
	Met      bool    `json:"met"`
	Detail   string  `json:"detail"` // the rows the value comes from
	// NotJudged, when not empty, says why the figure was not judged: the
	// rows it needs were measured in jobs that were not faithful (their
	// verdicts); Value and Met are then zero.
	NotJudged string `json:"not_judged,omitempty"`
	// Excluded lists rows the figure would have drawn on that were left
	// out as not faithful, the figure judged on the others.
	Excluded []string `json:"excluded,omitempty"`

	key  string   // which figure, the same whatever rows it comes from
	from []string // the rows it drew on (rowLabel)
	// cpu: a CPU figure, what the processes cost against peers in the
	// same suite, judged on its rows whether or not they were faithful
	// (a CPU-bound job still did the same work with the CPU it used).
	cpu bool
}

// The testbed's targets (8 hosts, 100 Mbit/s, MTU 9000).
const (
	figBcastBound     = 1.15 // in-network Bcast of 16 MiB within this times S/B
	figAllreduceBound = 1.2  // in-network Allreduce of 16 MiB within this times S/B
	figAllreduceHost  = 1.5  // in-network Allreduce this much faster than the best host algorithm
	figBcastCPU       = 2    // rank CPU of a 16 MiB chain Bcast over an in-network one
	figSmallMax       = 64 << 10
	figLarge          = 16 << 20
	figDDPSpeedup     = 1.6 // in-network DDP's samples/s over Gloo's
	// In-network Allgather at least as fast as the best host algorithm
	// from figAllgatherMin to figAllgatherMax blocks.
	figAllgatherMin = 1 << 20
	figAllgatherMax = 4 << 20
)

// SuiteFigures computes the testbed targets from rows, for each
// (ranks, link rate) the rows hold, in the order those first appear. A
// figure whose rows are missing (an operation, size or algorithm the
// suite did not run) is left out. Only faithful rows count (and rows
// without a verdict, from before the monitor): a figure whose rows were
// all measured in jobs that were not faithful is listed as not judged,
// with their verdicts, and one judged without some rows names them. CPU
// figures (what NDMA's processes cost against a peer's in the same
// suite) are judged on every row, naming those not faithful.
func SuiteFigures(rows []SuiteRow) []Figure {
	type setup struct {
		ranks, perHost int
		rate, peak     uint64
		prio           bool
	}
	var setups []setup
	for _, r := range rows {
		if s := (setup{r.Ranks, r.PerHost, r.RateBits, r.PeakRateBits, r.PriorityQueues}); !slices.Contains(setups, s) {
			setups = append(setups, s)
		}
	}
	var figs []Figure
	for _, s := range setups {
		var mine []SuiteRow
		for _, r := range rows {
			if r.Ranks == s.ranks && r.PerHost == s.perHost && r.RateBits == s.rate && r.PeakRateBits == s.peak && r.PriorityQueues == s.prio {
				mine = append(mine, r)
			}
		}
		for _, f := range faithfulFigures(mine) {
			f.Ranks, f.RateBits, f.PeakBits, f.Prio = s.ranks, s.rate, s.peak, s.prio
			figs = append(figs, f)
		}
	}
	return figs
}

// faithfulFigures computes the figures of one setup's rows from its
// faithful ones, and says which figures rows that were not faithful
// kept from being judged or were left out of.
func faithfulFigures(rows []SuiteRow) []Figure {
	var good []SuiteRow
	bad := map[string]SuiteRow{}
	for _, r := range rows {
		if r.Fidelity != nil && !r.Fidelity.Faithful {
			bad[rowLabel(r)] = r
			continue
		}
		good = append(good, r)
	}
	if len(bad) == 0 {
		return setupFigures(rows)
	}
	judged := map[string]Figure{}
	for _, f := range setupFigures(good) {
		judged[f.key] = f
	}
	var figs []Figure
	for _, f := range setupFigures(rows) {
		var left []string
		for _, l := range f.from {
			if _, ok := bad[l]; ok && !slices.Contains(left, l) {
				left = append(left, l)
			}
		}
		if f.cpu {
			if len(left) > 0 {
				f.Detail += "; a CPU figure, judged on rows not faithful too: " + strings.Join(left, ", ")
			}
			figs = append(figs, f)
			continue
		}
		if g, ok := judged[f.key]; ok {
			g.Excluded = left
			figs = append(figs, g)
			continue
		}
		why := make([]string, len(left))
		for i, l := range left {
			why[i] = fmt.Sprintf("%s %s (%s)", l, bad[l].Fidelity.Class, bad[l].Fidelity.Reason)
		}
		f.Value, f.Met, f.Detail, f.Excluded = 0, false, "", nil
		f.NotJudged = "rows not faithful: " + strings.Join(why, "; ")
		figs = append(figs, f)
	}
	return figs
}

// setupFigures computes the figures from the rows of one setup.
func setupFigures(rows []SuiteRow) []Figure {
	// find is the row of op and algo at size (any size: negative).
	find := func(op coll.Operation, algo coll.Algo, size int) *SuiteRow {
		for i := range rows {
			if r := &rows[i]; r.Op == string(op) && r.Algo == string(algo) && (r.Size == size || size < 0) {
				return r
			}
		}
		return nil
	}
	// bestHost is the fastest of NDMA's host-based algorithms at size.
	bestHost := func(op coll.Operation, size int) *SuiteRow {
		var best *SuiteRow
		for i := range rows {
			r := &rows[i]
			if r.Op != string(op) || r.Size != size || !isHostAlgo(r.Algo) {
				continue
			}
			if best == nil || r.AvgUS < best.AvgUS {
				best = r
			}
		}
		return best
	}
	var figs []Figure
	bound := func(op coll.Operation, target float64) {
		r := find(op, coll.AlgoInNet, figLarge)
		if r == nil || r.BoundUS <= 0 {
			return
		}
		v := r.AvgUS / r.BoundUS
		figs = append(figs, Figure{
			key: "bound " + string(op), from: []string{rowLabel(*r)},
			Name:   fmt.Sprintf("in-network %s %s, over S/B", opTitle(op), FormatSize(figLarge)),
			Target: fmt.Sprintf("≤ %.2f×", target), Value: v, Met: v <= target,
			Detail: fmt.Sprintf("%.0f µs, bound %.0f µs", r.AvgUS, r.BoundUS),
		})
	}
	bound(coll.OpBcast, figBcastBound)
	bound(coll.OpAllreduce, figAllreduceBound)
	for _, size := range []int{4 << 20, figLarge} {
		in, host := find(coll.OpAllreduce, coll.AlgoInNet, size), bestHost(coll.OpAllreduce, size)
		if in == nil || host == nil || in.AvgUS <= 0 {
			continue
		}
		v := host.AvgUS / in.AvgUS
		figs = append(figs, Figure{
			key: fmt.Sprint("host allreduce ", size), from: []string{rowLabel(*in), rowLabel(*host)},
			Name:   fmt.Sprintf("in-network Allreduce %s, best host algorithm / in-network", FormatSize(size)),
			Target: fmt.Sprintf("≥ %.1f×", figAllreduceHost), Value: v, Met: v >= figAllreduceHost,
			Detail: fmt.Sprintf("%s %.0f µs, in-network %.0f µs", host.Algo, host.AvgUS, in.AvgUS),
		})
	}
	// worstSpeedup adds the figure of op's in-network rows of minSize to
	// maxSize bytes against the best host algorithm at each size: the
	// worst size decides.
	worstSpeedup := func(op coll.Operation, minSize, maxSize int, name string) {
		var worst *Figure
		var from []string
		sizes := 0
		for i := range rows {
			in := &rows[i]
			if in.Op != string(op) || in.Algo != string(coll.AlgoInNet) || in.Size < minSize || in.Size > maxSize || in.AvgUS <= 0 {
				continue
			}
			host := bestHost(op, in.Size)
			if host == nil {
				continue
			}
			sizes++
			from = append(from, rowLabel(*in), rowLabel(*host))
			v := host.AvgUS / in.AvgUS
			if worst == nil || v < worst.Value {
				worst = &Figure{Value: v, Detail: fmt.Sprintf("worst at %s: %s %.0f µs, in-network %.0f µs", FormatSize(in.Size), host.Algo, host.AvgUS, in.AvgUS)}
			}
		}
		if worst != nil {
			worst.Name = fmt.Sprintf("%s, best host algorithm / in-network (%d sizes)", name, sizes)
			worst.Target = "≥ 1× at every size"
			worst.Met = worst.Value >= 1
			worst.key, worst.from = "speedup "+string(op), from
			figs = append(figs, *worst)
		}
	}
	worstSpeedup(coll.OpBcast, 0, figSmallMax, "in-network Bcast ≤ "+FormatSize(figSmallMax))
	worstSpeedup(coll.OpAllgather, figAllgatherMin, figAllgatherMax,
		fmt.Sprintf("in-network Allgather %s–%s", FormatSize(figAllgatherMin), FormatSize(figAllgatherMax)))
	in, chain := find(coll.OpBcast, coll.AlgoInNet, figLarge), find(coll.OpBcast, coll.AlgoChain, figLarge)
	if in != nil && chain != nil && in.CPURanksS > 0 {
		perCall := func(r *SuiteRow) float64 { return r.CPURanksS / float64(r.Warmup+r.Iters) }
		v := perCall(chain) / perCall(in)
		figs = append(figs, Figure{
			key: "cpu bcast", from: []string{rowLabel(*in), rowLabel(*chain)}, cpu: true,
			Name:   fmt.Sprintf("rank CPU per %s Bcast, chain / in-network", FormatSize(figLarge)),
			Target: fmt.Sprintf("≥ %d×", figBcastCPU), Value: v, Met: v >= figBcastCPU,
			Detail: fmt.Sprintf("chain %.2f s, in-network %.2f s per call", perCall(chain), perCall(in)),
		})
	}
	ddpIn, ddpGloo := find(OpDDP, coll.AlgoInNet, -1), find(OpDDP, AlgoGloo, -1)
	if ddpIn != nil && ddpGloo != nil && ddpIn.Size == ddpGloo.Size && ddpGloo.SamplesPerS > 0 && ddpIn.CPUPerCallUS > 0 {
		from := []string{rowLabel(*ddpIn), rowLabel(*ddpGloo)}
		v := ddpIn.SamplesPerS / ddpGloo.SamplesPerS
		figs = append(figs, Figure{
			key: "ddp speed", from: from,
			Name:   "in-network DDP samples/s over Gloo's",
			Target: fmt.Sprintf("≥ %.1f×", figDDPSpeedup), Value: v, Met: v >= figDDPSpeedup,
			Detail: fmt.Sprintf("in-network %.0f, Gloo %.0f samples/s", ddpIn.SamplesPerS, ddpGloo.SamplesPerS),
		})
		v = ddpGloo.CPUPerCallUS / ddpIn.CPUPerCallUS
		figs = append(figs, Figure{
			key: "ddp cpu", from: from, cpu: true,
			Name:   "DDP CPU per step (ranks + switch), Gloo / in-network",
			Target: "≥ 1×", Value: v, Met: v >= 1,
			Detail: fmt.Sprintf("Gloo %.1f ms, in-network %.1f ms per step", ddpGloo.CPUPerCallUS/1e3, ddpIn.CPUPerCallUS/1e3),
		})
	}
	return figs
}

// isHostAlgo reports whether algo is one of NDMA's host-based algorithms
// (not in-network, not the tuner's choice, not Open MPI's or Gloo's).
func isHostAlgo(algo string) bool {
	a := coll.Algo(algo)
	return a != coll.AlgoInNet && a != coll.AlgoAuto && !IsMPI(a) && a != AlgoGloo
}

func opTitle(op coll.Operation) string {
	switch op {
	case coll.OpBcast:
		return "Bcast"
	case coll.OpAllreduce:
		return "Allreduce"
	}
	return string(op)
}

// writeFigures writes figs as a Markdown section, a table per setup.
func writeFigures(w *bufio.Writer, figs []Figure) {
	for i, f := range figs {
		if i == 0 || f.Ranks != figs[i-1].Ranks || f.RateBits != figs[i-1].RateBits || f.PeakBits != figs[i-1].PeakBits || f.Prio != figs[i-1].Prio {
			fmt.Fprintf(w, "\n### Testbed targets, %d ranks, %s\n\n", f.Ranks, LinksText(f.RateBits, f.PeakBits, f.Prio))
			fmt.Fprintln(w, "| Figure | Target | Measured | | From |")
			fmt.Fprintln(w, "|---|---|--:|---|---|")
		}
		if f.NotJudged != "" {
			fmt.Fprintf(w, "| %s | %s | – | not judged | %s |\n", f.Name, f.Target, f.NotJudged)
			continue
		}
		verdict := "missed"
		if f.Met {
			verdict = "met"
		}
		detail := f.Detail
		if len(f.Excluded) > 0 {
			detail += "; left out, not faithful: " + strings.Join(f.Excluded, ", ")
		}
		// Three decimals: 1.201 misses a 1.2 target, and "1.20×" would
		// not say why.
		fmt.Fprintf(w, "| %s | %s | %.3f× | %s | %s |\n", f.Name, f.Target, f.Value, verdict, detail)
	}
}
