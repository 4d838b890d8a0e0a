package bench

import (
	"bufio"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/ndma/ndma/testbed/fidelity"
)

func TestSuiteFigures(t *testing.T) {
	const rate = 100e6
	bound := func(size int) float64 { return float64(size) * 8 / rate * 1e6 }
	row := func(ranks int, op, algo string, size int, avg, cpuRanks float64) SuiteRow {
		return newSuiteRow(CollResult{Op: op, Algo: algo, Ranks: ranks, Size: size, AvgUS: avg, MinUS: avg, MaxUS: avg, Iters: 8}, 2, rate, cpuRanks, 1)
	}
	const m16, m4 = 16 << 20, 4 << 20
	rows := []SuiteRow{
		row(8, "bcast", "innet", 8, 500, 1),
		row(8, "bcast", "binomial", 8, 400, 1), // faster: the small-Bcast figure is missed at 8 B
		row(8, "bcast", "chain", 8, 900, 1),
		row(8, "bcast", "mpi", 8, 100, 1), // Open MPI is not a host algorithm of NDMA's
		row(8, "bcast", "innet", 64<<10, 6000, 1),
		row(8, "bcast", "chain", 64<<10, 6600, 1),
		row(8, "bcast", "innet", m16, 1.10*bound(m16), 10), // 1 s per call
		row(8, "bcast", "chain", m16, 1.07*bound(m16), 25), // 2.5 s per call
		row(8, "allreduce", "innet", m4, 1.1*bound(m4), 1),
		row(8, "allreduce", "rabenseifner", m4, 1.5*bound(m4), 1),
		row(8, "allreduce", "ring", m4, 1.6*bound(m4), 1),
		row(8, "allreduce", "innet", m16, 1.3*bound(m16), 1),
		row(8, "allreduce", "ring", m16, 2.0*bound(m16), 1),
		row(8, "allgather", "innet", 1<<20, 600e3, 1),
		row(8, "allgather", "ring", 1<<20, 612e3, 1),
		row(8, "allgather", "innet", 2<<20, 1240e3, 1), // slower than recursive doubling: the worst size
		row(8, "allgather", "recursive_doubling", 2<<20, 1230e3, 1),
		row(8, "allgather", "innet", 8<<20, 5000e3, 1), // outside 1-4 MiB
		row(8, "allgather", "ring", 8<<20, 4000e3, 1),
		row(4, "allreduce", "innet", m16, 1.05*bound(m16), 1), // another setup: only its bound figure
	}
	figs := SuiteFigures(rows)
	type want struct {
		ranks  int
		prefix string
		value  float64
		met    bool
	}
	wants := []want{
		{8, "in-network Bcast 16M, over S/B", 1.10, true},
		{8, "in-network Allreduce 16M, over S/B", 1.3, false},
		{8, "in-network Allreduce 4M, best host", 1.5 / 1.1, false},
		{8, "in-network Allreduce 16M, best host", 2.0 / 1.3, true},
		{8, "in-network Bcast ≤ 64K", 400.0 / 500, false},
		{8, "in-network Allgather 1M–4M", 1230.0 / 1240, false},
		{8, "rank CPU per 16M Bcast", 2.5, true},
		{4, "in-network Allreduce 16M, over S/B", 1.05, true},
	}
	if len(figs) != len(wants) {
		t.Fatalf("%d figures, want %d: %+v", len(figs), len(wants), figs)
	}
	for i, w := range wants {
		f := figs[i]
		if f.Ranks != w.ranks || f.RateBits != rate || !strings.HasPrefix(f.Name, w.prefix) || math.Abs(f.Value-w.value) > 1e-9 || f.Met != w.met {
			t.Errorf("figure %d: %+v; want %d ranks, %q..., %.4f, met %v", i, f, w.ranks, w.prefix, w.value, w.met)
		}
	}
	if d := figs[4].Detail; !strings.Contains(d, "worst at 8: binomial 400 µs") || !strings.Contains(figs[4].Name, "(2 sizes)") {
		t.Errorf("small-Bcast figure %q / %q: want the worst size, binomial, over 2 sizes", figs[4].Name, d)
	}
	if d := figs[5].Detail; !strings.Contains(d, "worst at 2M: recursive_doubling 1230000 µs") || !strings.Contains(figs[5].Name, "(2 sizes)") {
		t.Errorf("Allgather figure %q / %q: want the worst size, recursive doubling, over 2 sizes", figs[5].Name, d)
	}

	md := figuresMarkdown(figs)
	for _, s := range []string{
		"### Testbed targets, 8 ranks, 100mbit links",
		"### Testbed targets, 4 ranks, 100mbit links",
		"| in-network Bcast 16M, over S/B | ≤ 1.15× | 1.100× | met |",
		"| in-network Allreduce 16M, over S/B | ≤ 1.20× | 1.300× | missed |",
	} {
		if !strings.Contains(md, s) {
			t.Errorf("figures Markdown lacks %q:\n%s", s, md)
		}
	}

	// The same rows on links with a peak rate are another setup.
	peaked := append([]SuiteRow(nil), rows[:2]...)
	for i := range peaked {
		peaked[i].PeakRateBits = 2 * rate
	}
	pf := SuiteFigures(append(append([]SuiteRow(nil), rows[:2]...), peaked...))
	if len(pf) != 2 || pf[0].PeakBits != 0 || pf[1].PeakBits != 2*rate {
		t.Errorf("rows without and with a peak rate: %+v; want a figure for each", pf)
	}
	if md := figuresMarkdown(pf); !strings.Contains(md, "### Testbed targets, 8 ranks, 100mbit links, peak 200mbit") {
		t.Errorf("figures Markdown lacks the peak rate's setup:\n%s", md)
	}

	// ... and so are they on links with priority queues.
	prio := append([]SuiteRow(nil), peaked...)
	for i := range prio {
		prio[i].PriorityQueues = true
	}
	qf := SuiteFigures(append(append([]SuiteRow(nil), peaked...), prio...))
	if len(qf) != 2 || qf[0].Prio || !qf[1].Prio {
		t.Errorf("rows without and with priority queues: %+v; want a figure for each", qf)
	}
	if md := figuresMarkdown(qf); !strings.Contains(md, "### Testbed targets, 8 ranks, 100mbit links, peak 200mbit, priority queues") {
		t.Errorf("figures Markdown lacks the priority queues' setup:\n%s", md)
	}

	// No rows for a figure: it is left out, not reported as missed.
	if figs := SuiteFigures(rows[:4]); len(figs) != 1 || !strings.HasPrefix(figs[0].Name, "in-network Bcast ≤") {
		t.Errorf("rows of 8 B Bcasts only: %+v; want the small-Bcast figure alone", figs)
	}
	if figs := SuiteFigures(nil); len(figs) != 0 {
		t.Errorf("no rows: %+v", figs)
	}
}

// figuresMarkdown is writeFigures' output for figs.
func figuresMarkdown(figs []Figure) string {
	var b strings.Builder
	w := bufio.NewWriter(&b)
	writeFigures(w, figs)
	w.Flush()
	return b.String()
}

// TestSuiteFiguresFaithful: rows from jobs that were not faithful are
// never used for a figure of the network: a figure that needs them is
// listed as not judged with their verdicts, and one judged without some
// of them names them. A CPU figure is judged on them, naming them.
func TestSuiteFiguresFaithful(t *testing.T) {
	const rate = 100e6
	bound := func(size int) float64 { return float64(size) * 8 / rate * 1e6 }
	ok := &fidelity.Verdict{Class: fidelity.Faithful, Faithful: true}
	busy := &fidelity.Verdict{Class: fidelity.CPUBound, Reason: "testbed 90% of the machine's CPU (limit 60%)"}
	row := func(op, algo string, size int, avg, cpuRanks float64, v *fidelity.Verdict) SuiteRow {
		r := newSuiteRow(CollResult{Op: op, Algo: algo, Ranks: 8, Size: size, AvgUS: avg, MinUS: avg, MaxUS: avg, Iters: 8}, 2, rate, cpuRanks, 1)
		r.Fidelity = v
		return r
	}
	const m16, m4 = 16 << 20, 4 << 20
	rows := []SuiteRow{
		row("bcast", "innet", m16, 1.1*bound(m16), 10, ok),
		row("bcast", "chain", m16, 1.2*bound(m16), 25, busy), // the CPU figure needs it
		row("allreduce", "innet", m4, 1.1*bound(m4), 1, ok),
		row("allreduce", "rabenseifner", m4, 1.2*bound(m4), 1, busy), // the fastest host algorithm, left out
		row("allreduce", "ring", m4, 1.6*bound(m4), 1, nil),          // no verdict: a row from before the monitor
		row("bcast", "innet", 32<<10, 1.1*bound(32<<10), 1, busy),    // the small-Bcast figure needs it
		row("bcast", "chain", 32<<10, 2*bound(32<<10), 1, ok),
	}
	figs := SuiteFigures(rows)
	if len(figs) != 4 {
		t.Fatalf("%d figures, want 4: %+v", len(figs), figs)
	}
	if f := figs[0]; !strings.HasPrefix(f.Name, "in-network Bcast 16M, over S/B") || f.NotJudged != "" || len(f.Excluded) != 0 || !f.Met {
		t.Errorf("Bcast bound, from faithful rows: %+v", f)
	}
	if f := figs[1]; !strings.HasPrefix(f.Name, "in-network Allreduce 4M, best host") || f.NotJudged != "" ||
		!slices.Equal(f.Excluded, []string{"allreduce/rabenseifner 4M"}) || math.Abs(f.Value-1.6/1.1) > 1e-9 {
		t.Errorf("Allreduce 4M against the host algorithms, rabenseifner left out: %+v", f)
	}
	if f := figs[2]; !strings.HasPrefix(f.Name, "in-network Bcast ≤ 64K") || f.Met || f.Value != 0 ||
		!strings.Contains(f.NotJudged, "bcast/innet 32K cpu-bound (testbed 90% of the machine's CPU") {
		t.Errorf("small Bcast, its in-network row CPU-bound: %+v", f)
	}
	if f := figs[3]; !strings.HasPrefix(f.Name, "rank CPU per 16M Bcast") || !f.Met || f.Value != 2.5 || f.NotJudged != "" ||
		!strings.Contains(f.Detail, "judged on rows not faithful too: bcast/chain 16M") {
		t.Errorf("Bcast CPU, its chain row CPU-bound: %+v", f)
	}
	md := figuresMarkdown(figs)
	for _, s := range []string{
		"| in-network Bcast ≤ 64K, best host algorithm / in-network (1 sizes) | ≥ 1× at every size | – | not judged | rows not faithful: bcast/innet 32K cpu-bound",
		"| rank CPU per 16M Bcast, chain / in-network | ≥ 2× | 2.500× | met | chain 2.50 s, in-network 1.00 s per call; a CPU figure, judged on rows not faithful too: bcast/chain 16M |",
		"; left out, not faithful: allreduce/rabenseifner 4M |",
	} {
		if !strings.Contains(md, s) {
			t.Errorf("figures Markdown lacks %q:\n%s", s, md)
		}
	}
}
