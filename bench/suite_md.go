package bench

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/ndma/ndma/coll"
	"github.com/ndma/ndma/testbed"
	"github.com/ndma/ndma/testbed/fidelity"
)

// WriteSuiteMarkdown writes rows as Markdown: a table per operation, in
// the order the operations first appear, with each row's latency against
// the S/B bound and its CPU time, then the testbed targets that
// the rows allow (SuiteFigures), each marked met or missed.
func WriteSuiteMarkdown(w io.Writer, rows []SuiteRow) error {
	bw := bufio.NewWriter(w)
	var ops []string
	byOp := map[string][]SuiteRow{}
	for _, r := range rows {
		if _, ok := byOp[r.Op]; !ok {
			ops = append(ops, r.Op)
		}
		byOp[r.Op] = append(byOp[r.Op], r)
	}
	for i, op := range ops {
		if i > 0 {
			fmt.Fprintln(bw)
		}
		first := byOp[op][0]
		if op == string(OpDDP) {
			writeDDPTable(bw, byOp[op])
			continue
		}
		fmt.Fprintf(bw, "### %s, %s, %s\n\n", op, RanksText(first), LinksText(first.RateBits, first.PeakRateBits, first.PriorityQueues))
		fmt.Fprintln(bw, "| Algorithm | Size | Avg (µs) | Min (µs) | Max (µs) | S/B bound (µs) | Avg / bound | Iters | CPU ranks (s) | CPU switch (s) | CPU per call (µs) | Rank CPU per MiB (ms) | Switch CPU per MiB (ms) | Steal (s) | Fidelity |")
		fmt.Fprintln(bw, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|")
		for _, r := range byOp[op] {
			bound, ratio := "–", "–"
			if r.BoundUS > 0 {
				bound = fmt.Sprintf("%.1f", r.BoundUS)
				ratio = fmt.Sprintf("%.2f", r.AvgUS/r.BoundUS)
			}
			steal := "–"
			if r.StealS != nil {
				steal = fmt.Sprintf("%.2f", *r.StealS)
			}
			fmt.Fprintf(bw, "| %s | %s | %.1f | %.1f | %.1f | %s | %s | %d | %.2f | %.2f | %.0f | %s | %s | %s | %s |\n",
				r.Algo, FormatSize(r.Size), r.AvgUS, r.MinUS, r.MaxUS, bound, ratio, r.Iters, r.CPURanksS, r.CPUSwitchS, r.CPUPerCallUS,
				perMiBText(r.Size, r.CPUPerMiBRankS), switchPerMiBText(r), steal, fidelityCell(r))
		}
	}
	colls := slices.ContainsFunc(rows, func(r SuiteRow) bool { return r.Op != string(OpDDP) })
	if colls {
		fmt.Fprintln(bw)
		fmt.Fprintln(bw, "CPU is user+system time of one `ndma bench coll` job per row: all ranks summed, and the switch daemon; "+
			"it includes process start, joining, warm-up and the barrier before each call. CPU per call divides by warm-up + iterations. "+
			"Steal is the CPU time the hypervisor gave other tenants of the host during the job, all CPUs together (/proc/stat; – where not reported): "+
			"on a shared virtual machine it marks rows slowed by neighbours. "+
			"CPU per MiB is one rank's CPU (ranks' CPU over the ranks), and the switch's, over each rank's message times the calls, in milliseconds per MiB; "+
			"with several switch processes (the in-network collectives sharded over them), the switch's CPU is theirs together and, in parentheses, each one's.")
	}
	if len(rows) > 0 {
		writeFidelity(bw, rows)
		for _, r := range rows {
			if IsMPI(coll.Algo(r.Algo)) {
				fmt.Fprintln(bw)
				fmt.Fprintln(bw, "Rows `mpi` are Open MPI on the same hosts and links: bench/mpi/osu_coll.c (the same measurement as bench coll) "+
					"started by mpirun with the NDMA rows' ranks per host (TCP between hosts, shared memory, vader, inside one), mpi_yield_when_idle (the ranks share the cores), Open MPI's own choice of algorithm; "+
					"their CPU includes mpirun and orted. `mpi-tuned-NAME`: the same with Open MPI's tuned algorithm NAME forced; "+
					"`mpi-ndma`: the same program with the MPI interposition library preloaded (collectives through the switch); "+
					"`mpi-ndma-declined`: preloaded but declining every call (Open MPI's own, after the library's checks).")
				break
			}
		}
		for _, r := range rows {
			if r.Algo == string(AlgoGloo) && r.Op != string(OpDDP) {
				fmt.Fprintln(bw)
				fmt.Fprintln(bw, "Rows `gloo` are PyTorch's Gloo backend (torch.distributed) on the same hosts and links: bench/gloo/gloo_coll.py, "+
					"one process per host started as NDMA's ranks are, a Gloo barrier before each call, timed as bench coll times (each rank's mean, "+
					"averaged over the ranks); their CPU includes the Python interpreter's start and PyTorch's import.")
				break
			}
		}
		if _, ok := byOp[string(OpDDP)]; ok {
			fmt.Fprintln(bw)
			fmt.Fprintln(bw, "Rows `ddp` are data-parallel training (examples/train/train.py: an MLP on MNIST, PyTorch's DistributedDataParallel, one rank per host) "+
				"for the steps shown: `gloo` with Gloo's own allreduce, `innet` with the gradients through NDMA in the network, `ring` through NDMA's host ring. "+
				"A step is forward, backward, the gradients' exchange and the optimizer; the gradient is each rank's per step. "+
				"Their rank CPU is the ranks' own (every thread) in the training loop, summed, without the interpreter's start, PyTorch's import or the test; "+
				"the switch's is over the whole job. The compute of a step is the same for every row, so the rows differ by what the exchange costs.")
		}
		writeCPUCost(bw, rows)
		writeFigures(bw, SuiteFigures(rows))
	}
	return bw.Flush()
}

// LinksText describes a setup's links: "100mbit links", with the peak rate
// when there is one ("100mbit links, peak 200mbit") and ", priority
// queues" when the links send control datagrams first.
func LinksText(rate, peak uint64, prio bool) string {
	t := testbed.FormatRate(rate) + " links"
	if peak != 0 {
		t += ", peak " + testbed.FormatRate(peak)
	}
	if prio {
		t += ", priority queues"
	}
	return t
}

// perMiBText is a CPU-per-MiB figure in milliseconds, "–" for a Barrier.
func perMiBText(size int, s float64) string {
	if size == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", s*1e3)
}

// switchPerMiBText is the switch's CPU per MiB of a row: with several
// switch processes their sum, then each one's in parentheses.
func switchPerMiBText(r SuiteRow) string {
	s := perMiBText(r.Size, r.CPUPerMiBSwitchS)
	if len(r.CPUPerMiBEachSwitchS) > 1 && r.Size > 0 {
		each := make([]string, len(r.CPUPerMiBEachSwitchS))
		for i, v := range r.CPUPerMiBEachSwitchS {
			each[i] = perMiBText(r.Size, v)
		}
		s += " (" + strings.Join(each, " / ") + ")"
	}
	return s
}

// fidelityCell is a row's verdict in a table cell: its class and the
// testbed's share of the machine's CPU, and for an idle link its busy
// share; "–" where the row has none.
func fidelityCell(r SuiteRow) string {
	v := r.Fidelity
	switch {
	case v == nil:
		return "–"
	case v.Class == fidelity.LinkIdle && v.Link != nil:
		return fmt.Sprintf("**%s** (%s %.0f%%)", v.Class, v.Link.Name, 100*v.Link.Busy)
	case v.Faithful:
		return fmt.Sprintf("%s (%.0f%%)", v.Class, 100*v.JudgedShare())
	}
	return fmt.Sprintf("**%s** (%.0f%%)", v.Class, 100*v.JudgedShare())
}

// writeFidelity explains the Fidelity column and lists the rows that
// were not faithful, with why.
func writeFidelity(w *bufio.Writer, rows []SuiteRow) {
	var bad []SuiteRow
	judged, limit := 0, 0.0
	for _, r := range rows {
		if r.Fidelity != nil {
			judged++
			limit = r.Fidelity.MaxCPUShare
			if !r.Fidelity.Faithful {
				bad = append(bad, r)
			}
		}
	}
	if judged == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Fidelity is the monitor's verdict on each job's timed calls: faithful when the machine's CPUs were busy "+
		"at most %.0f%% of the time while rank 0's timed calls ran (the share in parentheses: an upper bound of the testbed's share, "+
		"start-up and teardown left out), and a bulk job's bottleneck link was busy "+
		"at least %.0f%% of its transfer; cpu-bound above that share; link-idle when the link idled within it. "+
		"The targets below are judged on faithful rows only, but for the CPU targets, which compare processes' CPU within the suite.\n", 100*limit, 100*fidelityMinBusy(rows))
	if len(bad) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Rows not faithful (%d of %d):\n\n", len(bad), judged)
	for _, r := range bad {
		fmt.Fprintf(w, "- %s: %s: %s\n", rowLabel(r), r.Fidelity.Class, r.Fidelity.Reason)
	}
}

// fidelityMinBusy is the link rule's MinBusy the rows were judged by
// (the first row with link evidence), or the default.
func fidelityMinBusy(rows []SuiteRow) float64 {
	for _, r := range rows {
		if r.Fidelity != nil && r.Fidelity.Link != nil {
			return r.Fidelity.Link.MinBusy
		}
	}
	return 0.9
}

// rowLabel names a row: "allreduce/ring 16M", "barrier/innet".
func rowLabel(r SuiteRow) string {
	if r.Size == 0 || r.Op == string(OpDDP) {
		return r.Op + "/" + r.Algo
	}
	return fmt.Sprintf("%s/%s %s", r.Op, r.Algo, FormatSize(r.Size))
}

// writeCPUCost writes what each operation and algorithm costs in CPU:
// per MiB at its largest size (one rank's, and the switch's) and per
// call at its smallest, each row's verdict beside it.
func writeCPUCost(w *bufio.Writer, rows []SuiteRow) {
	type key struct{ op, algo string }
	var keys []key
	small := map[key]SuiteRow{}
	large := map[key]SuiteRow{}
	for _, r := range rows {
		if r.Op == string(OpDDP) {
			continue // its own table has its CPU per step
		}
		k := key{r.Op, r.Algo}
		s, seen := small[k]
		if !seen {
			keys = append(keys, k)
			small[k], large[k] = r, r
			continue
		}
		if r.Size < s.Size {
			small[k] = r
		}
		if r.Size > large[k].Size {
			large[k] = r
		}
	}
	mark := func(r SuiteRow) string {
		if r.Fidelity != nil && !r.Fidelity.Faithful {
			return " (" + string(r.Fidelity.Class) + ")"
		}
		return ""
	}
	if len(keys) == 0 {
		return
	}
	first := small[keys[0]]
	fmt.Fprintf(w, "\n### CPU per byte and per call, %s, %s\n\n", RanksText(first), LinksText(first.RateBits, first.PeakRateBits, first.PriorityQueues))
	fmt.Fprintln(w, "| Operation | Algorithm | Largest size | Rank CPU per MiB (ms) | Switch CPU per MiB (ms) | Smallest size | CPU per call (µs) |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|")
	for _, k := range keys {
		l, s := large[k], small[k]
		size := func(n int) string {
			if n == 0 {
				return "–"
			}
			return FormatSize(n)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s%s | %s%s | %s | %.0f%s |\n", k.op, k.algo, size(l.Size),
			perMiBText(l.Size, l.CPUPerMiBRankS), mark(l), switchPerMiBText(l), mark(l),
			size(s.Size), s.CPUPerCallUS, mark(s))
	}
}

// RanksText says how many ranks measured r: "8 ranks", or "8 ranks, 4
// per host" (SuiteRow.PerHost).
func RanksText(r SuiteRow) string {
	t := fmt.Sprintf("%d ranks", r.Ranks)
	if r.PerHost > 1 {
		t = fmt.Sprintf("%d ranks, %d per host", r.Ranks, r.PerHost)
	}
	if r.Leaves > 0 {
		t += fmt.Sprintf(" under %d leaf switches (uplinks %s)", r.Leaves, testbed.FormatRate(r.UplinkRateBits))
	}
	return t
}

// writeDDPTable writes the OpDDP rows: step time, samples per second and
// CPU per step of each algorithm.
func writeDDPTable(w *bufio.Writer, rows []SuiteRow) {
	first := rows[0]
	fmt.Fprintf(w, "### ddp (data-parallel training), %s, %s\n\n", RanksText(first), LinksText(first.RateBits, first.PeakRateBits, first.PriorityQueues))
	fmt.Fprintln(w, "| Algorithm | Gradient | Batch per rank | Steps | Step avg (ms) | Min (ms) | Max (ms) | Samples/s | Gradient over one link (ms) | CPU ranks (s) | CPU switch (s) | CPU per step (ms) | Steal (s) | Fidelity |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|")
	for _, r := range rows {
		steal := "–"
		if r.StealS != nil {
			steal = fmt.Sprintf("%.2f", *r.StealS)
		}
		fmt.Fprintf(w, "| %s | %.1f MiB | %d | %d | %.1f | %.1f | %.1f | %.0f | %.1f | %.2f | %.2f | %.1f | %s | %s |\n",
			r.Algo, float64(r.Size)/(1<<20), r.BatchPerRank, r.Iters, r.AvgUS/1e3, r.MinUS/1e3, r.MaxUS/1e3, r.SamplesPerS, r.BoundUS/1e3,
			r.CPURanksS, r.CPUSwitchS, r.CPUPerCallUS/1e3, steal, fidelityCell(r))
	}
}
