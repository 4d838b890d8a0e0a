package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ndma/ndma/coll"
	"github.com/ndma/ndma/testbed"
	"github.com/ndma/ndma/testbed/fidelity"
)

// suiteRows returns synthetic rows: two sized operations with two
// algorithms each and a barrier.
func suiteRows() []SuiteRow {
	var rows []SuiteRow
	for _, op := range []string{"bcast", "allreduce"} {
		for ai, a := range []string{"innet", "ring"} {
			for _, size := range []int{8, 64 << 10, 1 << 20} {
				bound := float64(size) * 8 / 1e8 * 1e6
				r := CollResult{Op: op, Algo: a, Ranks: 4, Size: size, AvgUS: 100 + bound*float64(ai+1), MinUS: 90, MaxUS: 120 + bound*2, Iters: 10}
				row := newSuiteRow(r, 2, 1e8, 0.5*float64(ai+1), 0.25)
				if size == 8 && ai == 0 {
					row.RunsAvgUS = []float64{row.AvgUS + 3, row.AvgUS, row.AvgUS - 1} // a repeated job
					row.RunsStealS = []float64{0.5, 0, 0.25}
				}
				if size == 1<<20 {
					steal := 0.125 * float64(ai)
					row.StealS = &steal
					// The monitor's verdicts: ring's job CPU-bound.
					row.Fidelity = &fidelity.Verdict{Class: fidelity.Faithful, Faithful: true, CPUShare: 0.25, MaxCPUShare: 0.6}
					if a == "ring" {
						row.Fidelity = &fidelity.Verdict{Class: fidelity.CPUBound, CPUShare: 0.75, MaxCPUShare: 0.6,
							Reason: "testbed 75% of the machine's CPU (limit 60%)"}
					}
				}
				rows = append(rows, row)
			}
		}
	}
	for _, a := range []string{"innet", "recursive_doubling"} {
		rows = append(rows, newSuiteRow(CollResult{Op: "barrier", Algo: a, Ranks: 4, AvgUS: 50, MinUS: 40, MaxUS: 60, Iters: 10}, 2, 1e8, 0.1, 0))
	}
	return rows
}

func TestNewSuiteRow(t *testing.T) {
	r := newSuiteRow(CollResult{Op: "bcast", Algo: "innet", Ranks: 8, Size: 1 << 20, AvgUS: 1, Iters: 8}, 2, 100e6, 0.3, 0.2)
	if want := float64(1<<20) * 8 / 100e6 * 1e6; r.BoundUS != want {
		t.Errorf("BoundUS %v, want %v", r.BoundUS, want)
	}
	if r.CPUS != 0.5 || r.CPUPerCallUS != 0.5/10*1e6 {
		t.Errorf("CPUS %v, CPUPerCallUS %v; want 0.5 and %v", r.CPUS, r.CPUPerCallUS, 0.5/10*1e6)
	}
	// 10 calls of 1 MiB per rank: 0.3 s over 8 ranks and 10 MiB.
	if r.CPUPerMiBRankS != 0.3/8/10 || r.CPUPerMiBSwitchS != 0.2/10 {
		t.Errorf("CPU per MiB: rank %v, switch %v; want %v, %v", r.CPUPerMiBRankS, r.CPUPerMiBSwitchS, 0.3/8/10, 0.2/10)
	}
	if b := newSuiteRow(CollResult{Op: "barrier", Algo: "innet", Ranks: 8, AvgUS: 1, Iters: 8}, 2, 100e6, 0.3, 0.2); b.CPUPerMiBRankS != 0 || b.CPUPerMiBSwitchS != 0 {
		t.Errorf("a Barrier has no CPU per MiB: %+v", b)
	}
	// Two switch processes: each one's CPU over the same 10 MiB, and the
	// Markdown cell gives the sum, then each.
	r.eachSwitch([]float64{0.15, 0.05})
	if len(r.CPUPerMiBEachSwitchS) != 2 || r.CPUPerMiBEachSwitchS[0] != 0.15/10 || r.CPUPerMiBEachSwitchS[1] != 0.05/10 {
		t.Errorf("CPU per MiB of each switch %v, want [%v %v]", r.CPUPerMiBEachSwitchS, 0.15/10, 0.05/10)
	}
	if got := switchPerMiBText(r); got != "20.00 (15.00 / 5.00)" {
		t.Errorf("switch cell %q, want the sum and each", got)
	}
	one := newSuiteRow(CollResult{Op: "bcast", Algo: "innet", Ranks: 8, Size: 1 << 20, AvgUS: 1, Iters: 8}, 2, 100e6, 0.3, 0.2)
	if one.eachSwitch([]float64{0.2}); one.CPUPerMiBEachSwitchS != nil || switchPerMiBText(one) != "20.00" {
		t.Errorf("one switch: each %v, cell %q", one.CPUPerMiBEachSwitchS, switchPerMiBText(one))
	}
}

func TestWriteSuiteJSON(t *testing.T) {
	rows := suiteRows()
	var buf bytes.Buffer
	if err := WriteSuiteJSON(&buf, rows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != len(rows) {
		t.Fatalf("%d lines, want %d", len(lines), len(rows))
	}
	for i, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		// bench coll's fields are flat, next to the suite's.
		for _, k := range []string{"op", "algo", "ranks", "size", "avg_us", "min_us", "max_us", "iters", "warmup", "rate_bits", "bound_us", "cpu_ranks_s", "cpu_switch_s", "cpu_s", "cpu_per_call_us"} {
			if _, ok := m[k]; !ok {
				t.Errorf("line %d has no %q: %s", i, k, l)
			}
		}
		var back SuiteRow
		if err := json.Unmarshal([]byte(l), &back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, rows[i]) {
			t.Errorf("line %d reads back as %+v, want %+v", i, back, rows[i])
		}
	}
}

func TestWriteSuiteMarkdown(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteSuiteMarkdown(&buf, suiteRows()); err != nil {
		t.Fatal(err)
	}
	md := buf.String()
	markdownHas(t, md,
		"### bcast, 4 ranks, 100mbit links",
		"### allreduce, 4 ranks, 100mbit links",
		"### barrier, 4 ranks, 100mbit links",
		// 1 MiB at 100 Mbit/s: 83886.1 µs bound; ring is 100+2*bound.
		// CPU per MiB: ring's 1 s over 4 ranks and 12 MiB (10+2 calls), the switch's 0.25 s over 12 MiB.
		"| ring | 1M | 167872.2 | 90.0 | 167892.2 | 83886.1 | 2.00 | 10 | 1.00 | 0.25 | 104167 | 20.83 | 20.83 | 0.12 | **cpu-bound** (75%) |",
		"| innet | 1M | 83986.1 | 90.0 | 167892.2 | 83886.1 | 1.00 | 10 | 0.50 | 0.25 | 62500 | 10.42 | 20.83 | 0.00 | faithful (25%) |",
		"| innet | 64K | 5342.9 | 90.0 | 10605.8 | 5242.9 | 1.02 | 10 | 0.50 | 0.25 | 62500 | 166.67 | 333.33 | – | – |",
		"| innet | 0 | 50.0 | 40.0 | 60.0 | – | – | 10 | 0.10 | 0.00 | 8333 | – | – | – | – |",
		"Rows not faithful (2 of 4):\n\n- bcast/ring 1M: cpu-bound: testbed 75% of the machine's CPU (limit 60%)\n- allreduce/ring 1M: cpu-bound:",
		"### CPU per byte and per call, 4 ranks, 100mbit links",
		"| allreduce | ring | 1M | 20.83 (cpu-bound) | 20.83 (cpu-bound) | 8 | 104167 |",
		"| barrier | innet | – | – | – | – | 8333 |",
	)
	// The figures the rows allow follow the tables: the small-Bcast one.
	tables, figs, ok := strings.Cut(md, "### Testbed targets, 4 ranks, 100mbit links")
	if !ok || !strings.Contains(figs, "| in-network Bcast ≤ 64K, best host algorithm / in-network (2 sizes) | ≥ 1× at every size |") {
		t.Errorf("Markdown lacks the figures section:\n%s", md)
	}
	// Every row of the operations' tables has the header's column count.
	tables, _, _ = strings.Cut(tables, "### CPU per byte")
	for _, l := range strings.Split(tables, "\n") {
		if strings.HasPrefix(l, "|") && strings.Count(l, "|") != 16 {
			t.Errorf("row with %d bars, want 16: %s", strings.Count(l, "|"), l)
		}
	}
	buf.Reset()
	if err := WriteSuiteMarkdown(&buf, nil); err != nil || buf.Len() != 0 {
		t.Errorf("no rows: %q, %v; want nothing", buf.String(), err)
	}
}

// markdownHas fails t for each of lines that md lacks.
func markdownHas(t *testing.T, md string, lines ...string) {
	t.Helper()
	for _, want := range lines {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
}

var pngMagic = []byte("\x89PNG\r\n\x1a\n")

func checkPNG(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, pngMagic) || len(b) < 1000 {
		t.Errorf("%s is not a PNG (%d bytes)", path, len(b))
	}
}

func TestWriteSuitePlots(t *testing.T) {
	dir := t.TempDir()
	rows := suiteRows()
	// A CPU time below one tick cannot be drawn on a log axis.
	rows[0].CPUPerCallUS = 0
	files, err := WriteSuitePlots(dir, rows)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
		checkPNG(t, f)
	}
	want := "bcast-latency.png bcast-cpu.png allreduce-latency.png allreduce-cpu.png barrier-latency.png barrier-cpu.png"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("files %s, want %s", got, want)
	}
}

func TestParseRank0(t *testing.T) {
	out := "[rank 1] starting\n[rank 0] {\"op\":\"bcast\",\"algo\":\"chain\",\"ranks\":2,\"size\":8,\"avg_us\":5,\"min_us\":4,\"max_us\":6,\"iters\":3}\n[rank 1] {\"op\":\"x\"}\n"
	r, err := parseRank0(strings.NewReader(out), "[rank 0] ")
	if err != nil {
		t.Fatal(err)
	}
	if want := (CollResult{Op: "bcast", Algo: "chain", Ranks: 2, Size: 8, AvgUS: 5, MinUS: 4, MaxUS: 6, Iters: 3}); !reflect.DeepEqual(r, want) {
		t.Errorf("got %+v, want %+v", r, want)
	}
	for _, bad := range []string{"", "[rank 0] {\"op\":\n", out + out} {
		if _, err := parseRank0(strings.NewReader(bad), "[rank 0] "); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestParseTuned reads the algorithms of Open MPI's tuned component from
// ompi_info's listing.
func TestParseTuned(t *testing.T) {
	out := `          MCA coll tuned: parameter "coll_tuned_allreduce_algorithm" (current value: "ignore", data source: default, level: 5 tuner/detail, type: int)
                          Which allreduce algorithm is used.
                          Valid values: 0:"ignore", 1:"basic_linear", 2:"nonoverlapping", 3:"recursive_doubling", 4:"ring", 5:"segmented_ring", 6:"rabenseifner"
          MCA coll tuned: parameter "coll_tuned_bcast_algorithm" (current value: "ignore", data source: default, level: 5 tuner/detail, type: int)
                          Valid values: 0:"ignore", 1:"basic_linear", 2:"chain"
          MCA coll tuned: parameter "coll_tuned_reduce_scatter_block_algorithm" (current value: "ignore")
                          Valid values: 0:"ignore", 1:"basic_linear", 4:"butterfly"
`
	algos, values := parseTuned(out, []coll.Operation{coll.OpAllreduce, coll.OpBcast, coll.OpReduceScatter, coll.OpReduce})
	if got := algos[coll.OpAllreduce]; len(got) != 6 || got[3] != "mpi-tuned-ring" || values[tunedKey{coll.OpAllreduce, "mpi-tuned-ring"}] != 4 ||
		got[2] != "mpi-tuned-recursive-doubling" || values[tunedKey{coll.OpAllreduce, "mpi-tuned-rabenseifner"}] != 6 {
		t.Errorf("allreduce: %v %v", got, values)
	}
	if got := algos[coll.OpBcast]; !slices.Equal(got, []coll.Algo{"mpi-tuned-basic-linear", "mpi-tuned-chain"}) || values[tunedKey{coll.OpBcast, "mpi-tuned-chain"}] != 2 ||
		values[tunedKey{coll.OpBcast, "mpi-tuned-basic-linear"}] != 1 {
		t.Errorf("bcast: %v", got)
	}
	if got := algos[coll.OpReduceScatter]; len(got) != 2 || got[1] != "mpi-tuned-butterfly" {
		t.Errorf("reducescatter: %v", got)
	}
	if len(algos[coll.OpReduce]) != 0 {
		t.Errorf("reduce is not in the listing: %v", algos[coll.OpReduce])
	}
}

func TestSuitePlan(t *testing.T) {
	c := SuiteConfig{Ops: []coll.Operation{coll.OpBcast, coll.OpBarrier}, Sizes: []int{8, 1024}}
	jobs, err := c.plan(nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2*len(coll.Algorithms[coll.OpBcast]) + len(coll.Algorithms[coll.OpBarrier]); len(jobs) != want {
		t.Errorf("%d jobs, want %d", len(jobs), want)
	}
	c.MPI = true
	withMPI, err := c.plan(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(withMPI) != len(jobs)+3 || withMPI[len(withMPI)-1] != (suiteJob{coll.OpBarrier, AlgoMPI, 0}) {
		t.Errorf("with MPI: %d jobs (want %d), last %+v", len(withMPI), len(jobs)+3, withMPI[len(withMPI)-1])
	}
	if slices.Contains(coll.Algorithms[coll.OpBcast], AlgoMPI) {
		t.Error("planning with MPI changed coll.Algorithms")
	}
	// Every Open MPI variant, kept to the ones asked for.
	c.MPINDMA = "libndma_mpi.so"
	tuned := map[coll.Operation][]coll.Algo{coll.OpBcast: {"mpi-tuned-binomial", "mpi-tuned-pipeline"}}
	c.Algos = []coll.Algo{AlgoMPI, AlgoMPINDMA, "mpi-tuned-pipeline", coll.AlgoInNet}
	some, err := c.plan(tuned)
	if err != nil {
		t.Fatal(err)
	}
	want := []suiteJob{
		{coll.OpBcast, coll.AlgoInNet, 8}, {coll.OpBcast, coll.AlgoInNet, 1024},
		{coll.OpBcast, AlgoMPI, 8}, {coll.OpBcast, AlgoMPI, 1024},
		{coll.OpBcast, AlgoMPINDMA, 8}, {coll.OpBcast, AlgoMPINDMA, 1024},
		{coll.OpBcast, "mpi-tuned-pipeline", 8}, {coll.OpBcast, "mpi-tuned-pipeline", 1024},
		{coll.OpBarrier, coll.AlgoInNet, 0}, {coll.OpBarrier, AlgoMPI, 0}, {coll.OpBarrier, AlgoMPINDMA, 0},
	}
	if !slices.Equal(some, want) {
		t.Errorf("with Algos: %v, want %v", some, want)
	}
	for _, a := range []coll.Algo{AlgoMPI, AlgoMPINDMA, AlgoMPIDeclined, "mpi-tuned-ring"} {
		if !IsMPI(a) {
			t.Errorf("IsMPI(%q) = false", a)
		}
	}
	if IsMPI(coll.AlgoRing) || IsMPI(coll.AlgoInNet) {
		t.Error("IsMPI of an NDMA algorithm")
	}
	for _, bad := range []SuiteConfig{
		{Ops: []coll.Operation{"nosuch"}},
		{Sizes: []int{0}},
		{Iters: -1},
	} {
		if _, err := bad.plan(nil); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

// TestSuiteTestbed runs a small suite on a real testbed with the ndma
// binary built from this module: 2 hosts, Allreduce with every algorithm,
// 8 B and 64 KiB, and checks the rows, the files and that the testbed is
// gone afterwards.
func TestSuiteTestbed(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a testbed of network namespaces and runs rank processes on it")
	}
	prefix := fmt.Sprintf("ndmast%d", os.Getpid()%100000)
	if err := testbed.Check(t.Context(), prefix); err != nil {
		t.Skipf("no testbed here: %v", err)
	}
	dir := t.TempDir()
	bin := ndmaBinary(t)
	stateDir := filepath.Join(dir, "state")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var streamed []SuiteRow
	progress := 0
	rows, err := RunSuite(ctx, SuiteConfig{
		Testbed:  testbed.Config{Prefix: prefix, Hosts: 2, Rate: "100mbit", MTU: 9000, StateDir: stateDir, Binary: bin},
		Ops:      []coll.Operation{coll.OpAllreduce},
		Sizes:    []int{8, 64 << 10},
		Iters:    3,
		Progress: func(done, total int) { progress = done },
		Row:      func(r SuiteRow) { streamed = append(streamed, r) },
	})
	if err != nil {
		t.Fatal(err)
	}
	algos := coll.Algorithms[coll.OpAllreduce]
	if len(rows) != 2*len(algos) || len(streamed) != len(rows) || progress != len(rows) {
		t.Fatalf("%d rows, %d streamed, progress %d; want %d", len(rows), len(streamed), progress, 2*len(algos))
	}
	for i, r := range rows {
		a, size := algos[i/2], []int{8, 64 << 10}[i%2]
		if r.Op != "allreduce" || r.Algo != string(a) || r.Size != size || r.Ranks != 2 || r.Iters != 3 || r.Warmup != 2 {
			t.Errorf("row %d: %+v, want allreduce/%s size %d, 2 ranks, 3+2 iterations", i, r, a, size)
		}
		if r.AvgUS <= 0 || r.MinUS > r.AvgUS || r.MaxUS < r.AvgUS || r.RateBits != 100e6 || r.CPURanksS <= 0 || r.CPUS < r.CPURanksS {
			t.Errorf("row %d: implausible %+v", i, r)
		}
		// Every job judged, on its links' evidence and its CPU, over the
		// timed calls rank 0 reported, inside the job.
		if v := r.Fidelity; v == nil || v.Link == nil || v.MachineS <= 0 || v.WallS <= 0 || v.Reason == "" || v.ProcessS["ranks"] != r.CPURanksS {
			t.Errorf("row %d: verdict %+v", i, v)
		} else if w := v.Window; w == nil || w.FromS < 0 || w.ToS <= w.FromS || w.ToS > v.WallS || w.SpanS < w.ToS-w.FromS || w.MachineS <= 0 {
			t.Errorf("row %d: timed window %+v in a job of %.3f s", i, w, v.WallS)
		}
	}
	// Torn down: no state left.
	if _, err := os.Stat(filepath.Join(stateDir, prefix)); !os.IsNotExist(err) {
		t.Errorf("state directory left behind: %v", err)
	}
	if st, err := testbed.StatusAt(stateDir, prefix); err == nil && (len(st.Stray) > 0 || len(st.Hosts) > 0) {
		t.Errorf("testbed left behind: %+v", st)
	}

	out := t.TempDir()
	var jl bytes.Buffer
	if err := WriteSuiteJSON(&jl, rows); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(&jl)
	for i := 0; sc.Scan(); i++ {
		var back SuiteRow
		if err := json.Unmarshal(sc.Bytes(), &back); err != nil || !reflect.DeepEqual(back, rows[i]) {
			t.Errorf("JSON line %d: %v, %+v", i, err, back)
		}
	}
	files, err := WriteSuitePlots(out, rows)
	if err != nil || len(files) != 2 {
		t.Fatalf("plots %v, %v", files, err)
	}
	for _, f := range files {
		checkPNG(t, f)
	}
}

// TestSuiteMPI runs Open MPI's side of a suite on a real 2-host testbed:
// osu_coll built with mpicc, started by mpirun across the namespaces, its
// results checked by the program itself.
func TestSuiteMPI(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a testbed of network namespaces and runs MPI on it")
	}
	prefix := fmt.Sprintf("ndmasm%d", os.Getpid()%100000)
	if err := testbed.Check(t.Context(), prefix); err != nil {
		t.Skipf("no testbed here: %v", err)
	}
	if _, err := MPIVersion(t.Context()); err != nil {
		t.Skipf("no Open MPI here: %v", err)
	}
	dir := t.TempDir()
	bin := ndmaBinary(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	rows, err := RunSuite(ctx, SuiteConfig{
		Testbed: testbed.Config{Prefix: prefix, Hosts: 2, Rate: "100mbit", MTU: 9000, StateDir: filepath.Join(dir, "state"), Binary: bin},
		Ops:     []coll.Operation{coll.OpBcast, coll.OpAllreduce, coll.OpAllgather, coll.OpBarrier},
		Sizes:   []int{4099},
		Iters:   3,
		MPI:     true,
	})
	if err != nil {
		t.Fatal(err)
	}
	mpi := 0
	for _, r := range rows {
		if r.Algo != string(AlgoMPI) {
			continue
		}
		mpi++
		if r.Ranks != 2 || r.Iters != 3 || r.AvgUS <= 0 || r.MinUS > r.MaxUS || r.CPURanksS <= 0 || (r.Op != "barrier" && r.Size != 4099) {
			t.Errorf("implausible MPI row %+v", r)
		}
	}
	if mpi != 4 {
		t.Errorf("%d MPI rows, want 4", mpi)
	}
	var md bytes.Buffer
	if err := WriteSuiteMarkdown(&md, rows); err != nil || !strings.Contains(md.String(), "Rows `mpi` are Open MPI") {
		t.Errorf("Markdown lacks the MPI note (%v)", err)
	}
}

// TestSuitePerHost runs a suite of 2 hosts with 2 ranks each
// (SuiteConfig.PerHost) on a real testbed: NDMA's ranks in two levels
// (NDMA_HIERARCHY=auto, each rank told its host by testbed run), Open
// MPI's over its shared memory inside a host.
func TestSuitePerHost(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a testbed of network namespaces and runs rank processes on it")
	}
	prefix := fmt.Sprintf("ndmasp%d", os.Getpid()%100000)
	if err := testbed.Check(t.Context(), prefix); err != nil {
		t.Skipf("no testbed here: %v", err)
	}
	_, mpiErr := MPIVersion(t.Context())
	algos := []coll.Algo{coll.AlgoInNet, coll.AlgoRing}
	if mpiErr == nil {
		algos = append(algos, AlgoMPI)
	}
	t.Setenv("NDMA_HIERARCHY", "auto")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	rows, err := RunSuite(ctx, SuiteConfig{
		Testbed: testbed.Config{Prefix: prefix, Hosts: 2, Rate: "100mbit", MTU: 9000, StateDir: filepath.Join(t.TempDir(), "state"), Binary: ndmaBinary(t)},
		Ops:     []coll.Operation{coll.OpAllreduce},
		Sizes:   []int{64 << 10},
		Iters:   3,
		PerHost: 2,
		MPI:     mpiErr == nil,
		Algos:   algos,
		Skipped: func(job string, err error) { t.Errorf("%s left out: %v", job, err) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(algos) {
		t.Fatalf("%d rows, want %d (%v)", len(rows), len(algos), algos)
	}
	for i, r := range rows {
		hosts := 2 // NDMA's rows: two levels across the 2 hosts
		if IsMPI(coll.Algo(r.Algo)) {
			hosts = 0
		}
		if r.Algo != string(algos[i]) || r.Ranks != 4 || r.PerHost != 2 || r.Hosts != hosts || r.AvgUS <= 0 {
			t.Errorf("row %d: %+v, want %s with 4 ranks, 2 per host, on %d hosts in two levels", i, r, algos[i], hosts)
		}
	}
	if mpiErr != nil {
		t.Logf("no Open MPI row: %v", mpiErr)
	}
	var md bytes.Buffer
	if err := WriteSuiteMarkdown(&md, rows); err != nil || !strings.Contains(md.String(), "4 ranks, 2 per host") {
		t.Errorf("Markdown does not say 2 ranks per host (%v)", err)
	}
}

// TestRunJobsMPIRetries: a failing MPI job is retried, then left out and
// reported; one that succeeds on a retry is kept; a failing NDMA job ends
// the run with its error.
func TestRunJobsMPIRetries(t *testing.T) {
	jobs := []suiteJob{
		{coll.OpBcast, coll.AlgoInNet, 8},
		{coll.OpBcast, AlgoMPI, 8},  // fails twice, then succeeds
		{coll.OpBcast, AlgoMPI, 64}, // always fails
		{coll.OpBcast, coll.AlgoChain, 8},
	}
	calls := map[suiteJob]int{}
	var skipped []string
	cfg := SuiteConfig{Skipped: func(job string, err error) { skipped = append(skipped, job) }}
	rows, err := runJobs(context.Background(), jobs, &cfg, func(j suiteJob) (SuiteRow, error) {
		calls[j]++
		if j.algo == AlgoMPI && (j.size == 64 || calls[j] < 3) {
			return SuiteRow{}, errors.New("mpirun: exit status 213")
		}
		return SuiteRow{CollResult: CollResult{Op: string(j.op), Algo: string(j.algo), Size: j.size}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || rows[1].Algo != "mpi" || rows[2].Algo != "chain" {
		t.Errorf("rows %+v", rows)
	}
	if calls[jobs[1]] != 3 || calls[jobs[2]] != MPITries || len(skipped) != 1 || skipped[0] != "bcast/mpi size 64" {
		t.Errorf("calls %v, skipped %v", calls, skipped)
	}
	_, err = runJobs(context.Background(), jobs[:1], &cfg, func(suiteJob) (SuiteRow, error) { return SuiteRow{}, errors.New("boom") })
	if err == nil || err.Error() != "boom" {
		t.Errorf("NDMA failure: %v", err)
	}
}

// TestRunJobsRepeat: with Repeat 3 the jobs run in rounds (all, then
// all again), each row is its job's median run with every run's Avg
// listed, and an MPI run that fails for good is left out of its job's
// runs only.
func TestRunJobsRepeat(t *testing.T) {
	jobs := []suiteJob{
		{coll.OpBcast, coll.AlgoInNet, 8},
		{coll.OpBcast, AlgoMPI, 8},
	}
	var order []string
	avgs := map[suiteJob][]float64{jobs[0]: {30, 10, 20}, jobs[1]: {5, 7}}
	calls := map[suiteJob]int{}
	mpiRuns := 0
	var skipped, progress []string
	var emitted []SuiteRow
	cfg := SuiteConfig{Repeat: 3,
		Skipped:  func(job string, err error) { skipped = append(skipped, job) },
		Progress: func(done, total int) { progress = append(progress, fmt.Sprintf("%d/%d", done, total)) },
		Row:      func(r SuiteRow) { emitted = append(emitted, r) }}
	rows, err := runJobs(context.Background(), jobs, &cfg, func(j suiteJob) (SuiteRow, error) {
		order = append(order, string(j.algo))
		if j.algo == AlgoMPI {
			calls[j]++
			if calls[j] > 1 && calls[j] <= 1+MPITries { // the second run fails every try
				return SuiteRow{}, errors.New("mpirun: exit status 213")
			}
			mpiRuns++
		}
		a := avgs[j][0] // mpi: 5 for the first run, 7 for the third
		avgs[j] = avgs[j][1:]
		row := SuiteRow{CollResult: CollResult{Op: string(j.op), Algo: string(j.algo), Size: j.size, AvgUS: a}}
		if j.algo != AlgoMPI || a != 7 { // the mpi job's third run does not report steal
			steal := a / 10
			row.StealS = &steal
		}
		return row, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if order[0] != "innet" || order[1] != "mpi" || order[len(order)-1] != "mpi" || order[len(order)-2] != "innet" {
		t.Errorf("run order %v, want rounds of innet, mpi", order)
	}
	if len(rows) != 2 || rows[0].AvgUS != 20 || !slices.Equal(rows[0].RunsAvgUS, []float64{30, 10, 20}) {
		t.Errorf("innet row %+v, want the median 20 of 30, 10, 20", rows[0])
	}
	if len(rows) == 2 && (!slices.Equal(rows[0].RunsStealS, []float64{3, 1, 2}) || rows[0].StealS == nil || *rows[0].StealS != 2) {
		t.Errorf("innet row's steal %v, runs %v; want the median run's 2 and 3, 1, 2", rows[0].StealS, rows[0].RunsStealS)
	}
	if len(rows) == 2 && rows[1].RunsStealS != nil {
		t.Errorf("mpi row's runs' steal %v, want none: one run did not report it", rows[1].RunsStealS)
	}
	if rows[1].AvgUS != 5 || !slices.Equal(rows[1].RunsAvgUS, []float64{5, 7}) || mpiRuns != 2 || len(skipped) != 1 {
		t.Errorf("mpi row %+v (runs %d, skipped %v), want the lower middle of two runs", rows[1], mpiRuns, skipped)
	}
	if len(emitted) != 2 || progress[len(progress)-1] != "6/6" {
		t.Errorf("emitted %d rows, progress %v", len(emitted), progress)
	}
}

// TestMedianRowsFaithful: a repeated job's row is the median of its
// faithful runs, every run's class listed; with no faithful run, the
// median of all.
func TestMedianRowsFaithful(t *testing.T) {
	run := func(avg float64, c fidelity.Class) SuiteRow {
		return SuiteRow{CollResult: CollResult{Op: "bcast", Algo: "innet", AvgUS: avg},
			Fidelity: &fidelity.Verdict{Class: c, Faithful: c == fidelity.Faithful}}
	}
	rows := medianRows([][]SuiteRow{
		// The median of all five is 30, a CPU-bound run; of the faithful
		// ones (10, 20, 40) it is 20.
		{run(50, fidelity.CPUBound), run(10, fidelity.Faithful), run(30, fidelity.CPUBound), run(40, fidelity.Faithful), run(20, fidelity.Faithful)},
		{run(7, fidelity.CPUBound), run(5, fidelity.LinkIdle), run(6, fidelity.CPUBound)},
	})
	want := []fidelity.Class{fidelity.CPUBound, fidelity.Faithful, fidelity.CPUBound, fidelity.Faithful, fidelity.Faithful}
	if len(rows) != 2 || rows[0].AvgUS != 20 || !rows[0].Fidelity.Faithful || !slices.Equal(rows[0].RunsFidelity, want) {
		t.Errorf("row %+v, want the faithful median 20 and the runs' classes %v", rows[0], want)
	}
	if len(rows) == 2 && (rows[1].AvgUS != 6 || rows[1].Fidelity.Faithful) {
		t.Errorf("no faithful run: %+v, want the median of all, 6", rows[1])
	}
}

// TestReadSuiteJSON: rows written by WriteSuiteJSON read back equal; a
// line that is not a row is refused with its number.
func TestReadSuiteJSON(t *testing.T) {
	rows := suiteRows()
	var buf bytes.Buffer
	if err := WriteSuiteJSON(&buf, rows); err != nil {
		t.Fatal(err)
	}
	buf.WriteString("\n")
	back, err := ReadSuiteJSON(&buf)
	if err != nil || !reflect.DeepEqual(back, rows) {
		t.Fatalf("read back %d rows (%v), want %d equal", len(back), err, len(rows))
	}
	for _, bad := range []string{`{"op":"bcast"}`, `not json`, `{"op":"bcast","algo":"innet","ranks":2,"iters":1,"extra":1}`} {
		if _, err := ReadSuiteJSON(strings.NewReader("\n" + bad + "\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

// TestCollArgsSync: the suite passes its barrier algorithm to every job
// (bench coll --sync-algo), and leaves bench coll's default otherwise.
func TestCollArgsSync(t *testing.T) {
	st := &testbed.State{DatagramMTU: 1472}
	j := suiteJob{op: coll.OpBcast, algo: coll.AlgoInNet, size: 8}
	if args := collArgs("ndma", st, j, 10, ""); slices.Contains(args, "--sync-algo") {
		t.Fatalf("no Sync, but %v", args)
	}
	args := collArgs("ndma", st, j, 10, coll.AlgoInNet)
	if i := slices.Index(args, "--sync-algo"); i < 0 || i+1 >= len(args) || args[i+1] != "innet" {
		t.Fatalf("Sync innet: %v", args)
	}
}
