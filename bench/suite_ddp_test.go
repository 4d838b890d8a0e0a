package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ndma/ndma/coll"
	"github.com/ndma/ndma/testbed"
	"github.com/ndma/ndma/testbed/fidelity"
)

// ddpRecords is what train.py writes for a 2-rank run of 3 steps.
const ddpRecords = `{"kind": "start", "params": 50890, "batch_per_rank": 32, "optimizer": "sgd", "backend": "ndma", "ranks": 2}
{"kind": "step", "epoch": 0, "step": 1, "loss": 2.3, "step_s": 0.02, "backend": "ndma", "ranks": 2}
{"kind": "epoch", "epoch": 0, "samples_per_s": 3000.0, "backend": "ndma", "ranks": 2}
{"kind": "summary", "train_s": 0.06, "steps": 3, "samples_per_s": 3200.0, "step_s_min": 0.015, "step_s_max": 0.03, "timed_from_ns": 1000000000, "timed_to_ns": 1060000000, "ranks_cpu_s": 0.11, "backend": "ndma", "ranks": 2}
`

func TestParseDDP(t *testing.T) {
	res, err := parseDDP(strings.NewReader(ddpRecords))
	if err != nil {
		t.Fatal(err)
	}
	want := ddpResult{Backend: "ndma", Ranks: 2, Params: 50890, Batch: 32, Steps: 3, TrainS: 0.06, SamplesPerS: 3200,
		StepMinS: 0.015, StepMaxS: 0.03, RanksCPUS: 0.11, TimedFromNS: 1e9, TimedToNS: 1.06e9}
	if res != want {
		t.Errorf("parsed %+v, want %+v", res, want)
	}
	c := res.collResult(coll.AlgoInNet)
	if c.Op != "ddp" || c.Algo != "innet" || c.Size != 4*50890 || c.Iters != 3 || c.Ranks != 2 ||
		!near(c.AvgUS, 20000) || !near(c.MinUS, 15000) || !near(c.MaxUS, 30000) || c.TimedFromNS != 1e9 || c.TimedToNS != 1.06e9 {
		t.Errorf("as a measurement: %+v", c)
	}
	lines := strings.Split(strings.TrimSpace(ddpRecords), "\n")
	for name, in := range map[string]string{
		"no summary":    strings.Join(lines[:3], "\n"),
		"no start":      strings.Join(lines[1:], "\n"),
		"old summary":   strings.Join(lines[:3], "\n") + "\n" + `{"kind": "summary", "train_s": 0.06, "steps": 3, "samples_per_s": 3200.0}`,
		"not JSON":      ddpRecords + "{oops\n",
		"no steps":      strings.Replace(ddpRecords, `"steps": 3`, `"steps": 0`, 1),
		"no parameters": strings.Replace(ddpRecords, `"params": 50890`, `"params": 0`, 1),
	} {
		if _, err := parseDDP(strings.NewReader(in)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// near reports whether a and b agree to a millionth of the larger.
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*max(math.Abs(a), math.Abs(b)) }

func TestSuitePlanDDP(t *testing.T) {
	c := SuiteConfig{Ops: []coll.Operation{coll.OpBarrier}, DDP: &DDPConfig{}}
	jobs, err := c.plan(nil)
	if err != nil {
		t.Fatal(err)
	}
	n := len(coll.Algorithms[coll.OpBarrier])
	if len(jobs) != n+2 || !slices.Equal(jobs[n:], []suiteJob{{OpDDP, AlgoGloo, 0}, {OpDDP, coll.AlgoInNet, 0}}) {
		t.Errorf("DDP after the collectives: %v", jobs)
	}
	// Where Ops names it, alone, and kept to Algos.
	c = SuiteConfig{Ops: []coll.Operation{OpDDP, coll.OpBarrier}, DDP: &DDPConfig{Algos: []coll.Algo{coll.AlgoRing, AlgoGloo, coll.AlgoInNet}},
		Algos: []coll.Algo{coll.AlgoInNet, coll.AlgoRing}}
	jobs, err = c.plan(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []suiteJob{{OpDDP, coll.AlgoRing, 0}, {OpDDP, coll.AlgoInNet, 0}, {coll.OpBarrier, coll.AlgoInNet, 0}}
	if !slices.Equal(jobs, want) {
		t.Errorf("DDP first, ring and innet: %v, want %v", jobs, want)
	}
	if _, err := (&SuiteConfig{Ops: []coll.Operation{OpDDP}}).plan(nil); err == nil {
		t.Error("DDP rows without a trainer: no error")
	}
	if jobs, err := (&SuiteConfig{Ops: []coll.Operation{OpDDP}, DDP: &DDPConfig{}}).plan(nil); err != nil || len(jobs) != 2 {
		t.Errorf("DDP alone: %v, %v", jobs, err)
	}
}

func TestDDPConfigCheck(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "train.py")
	data := filepath.Join(dir, "mnist")
	for _, f := range []string{script, filepath.Join(data, "meta.json")} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	good := DDPConfig{Script: script, Data: data}
	good.setDefaults()
	if err := good.check(); err != nil {
		t.Fatalf("%+v: %v", good, err)
	}
	if good.Steps != 30 || good.Batch != 16 || good.Hidden != "2048,1024" || !slices.Equal(good.Algos, []coll.Algo{AlgoGloo, coll.AlgoInNet}) {
		t.Errorf("defaults: %+v", good)
	}
	for name, mod := range map[string]func(*DDPConfig){
		"no script":    func(d *DDPConfig) { d.Script = "" },
		"no data":      func(d *DDPConfig) { d.Data = "" },
		"missing file": func(d *DDPConfig) { d.Script = filepath.Join(dir, "nosuch.py") },
		"not an export": func(d *DDPConfig) {
			d.Data = dir
		},
		"negative steps": func(d *DDPConfig) { d.Steps = -1 },
		"an MPI algo":    func(d *DDPConfig) { d.Algos = []coll.Algo{AlgoMPI} },
	} {
		d := good
		mod(&d)
		d.setDefaults()
		if err := d.check(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// ddpRows are a suite's two DDP rows: in-network DDP 1.8× as fast as
// Gloo's and cheaper per step, the in-network row faithful or not.
func ddpRows(innetFaithful bool) []SuiteRow {
	verdict := func(ok bool) *fidelity.Verdict {
		v := &fidelity.Verdict{Class: fidelity.Faithful, Faithful: true, Reason: "ok", MaxCPUShare: 0.6, CPUShare: 0.3}
		if !ok {
			v = &fidelity.Verdict{Class: fidelity.CPUBound, Reason: "testbed 90% of the machine's CPU (limit 60%)", MaxCPUShare: 0.6, CPUShare: 0.9}
		}
		return v
	}
	gloo := newSuiteRow(CollResult{Op: "ddp", Algo: "gloo", Ranks: 8, Size: 4 << 20, AvgUS: 90000, MinUS: 80000, MaxUS: 120000, Iters: 30}, 0, 100e6, 6, 0)
	gloo.SamplesPerS, gloo.BatchPerRank, gloo.Fidelity = 8*128/0.09, 128, verdict(true)
	in := newSuiteRow(CollResult{Op: "ddp", Algo: "innet", Ranks: 8, Size: 4 << 20, AvgUS: 50000, MinUS: 45000, MaxUS: 70000, Iters: 30}, 0, 100e6, 4, 0.5)
	in.SamplesPerS, in.BatchPerRank, in.Fidelity = 8*128/0.05, 128, verdict(innetFaithful)
	return []SuiteRow{gloo, in}
}

func TestWriteSuiteMarkdownDDP(t *testing.T) {
	rows := append(suiteRows(), ddpRows(true)...)
	var buf bytes.Buffer
	if err := WriteSuiteMarkdown(&buf, rows); err != nil {
		t.Fatal(err)
	}
	md := buf.String()
	markdownHas(t, md,
		"### ddp (data-parallel training), 8 ranks, 100mbit links",
		// 4 MiB over 100 Mbit/s: 335.5 ms; CPU per step: 6 s and 4.5 s over 30 steps.
		"| gloo | 4.0 MiB | 128 | 30 | 90.0 | 80.0 | 120.0 | 11378 | 335.5 | 6.00 | 0.00 | 200.0 | – | faithful (30%) |",
		"| innet | 4.0 MiB | 128 | 30 | 50.0 | 45.0 | 70.0 | 20480 | 335.5 | 4.00 | 0.50 | 150.0 | – | faithful (30%) |",
		"Rows `ddp` are data-parallel training",
		"| in-network DDP samples/s over Gloo's | ≥ 1.6× | 1.800× | met |",
		"| DDP CPU per step (ranks + switch), Gloo / in-network | ≥ 1× | 1.333× | met |",
	)
	// The CPU-per-byte table is the collectives'.
	_, cost, _ := strings.Cut(md, "### CPU per byte")
	cost, _, _ = strings.Cut(cost, "###")
	if strings.Contains(cost, "| ddp |") {
		t.Errorf("DDP rows in the CPU per byte table:\n%s", cost)
	}
	// A CPU-bound in-network row does not judge the speed, but the CPU
	// per step, against Gloo's in the same suite, still is.
	buf.Reset()
	if err := WriteSuiteMarkdown(&buf, ddpRows(false)); err != nil {
		t.Fatal(err)
	}
	md = buf.String()
	markdownHas(t, md,
		"| in-network DDP samples/s over Gloo's | ≥ 1.6× | – | not judged | rows not faithful: ddp/innet cpu-bound",
		"| DDP CPU per step (ranks + switch), Gloo / in-network | ≥ 1× | 1.333× | met | Gloo 200.0 ms, in-network 150.0 ms per step; a CPU figure, judged on rows not faithful too: ddp/innet |",
		"| innet | 4.0 MiB | 128 | 30 | 50.0 | 45.0 | 70.0 | 20480 | 335.5 | 4.00 | 0.50 | 150.0 | – | **cpu-bound** (90%) |",
	)
	for _, collOnly := range []string{"### CPU per byte", "CPU is user+system time of one `ndma bench coll` job", "Rows `gloo` are PyTorch's Gloo backend"} {
		if strings.Contains(md, collOnly) {
			t.Errorf("%q without collective rows:\n%s", collOnly, md)
		}
	}
	files, err := WriteSuitePlots(t.TempDir(), rows)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		checkPNG(t, f)
	}
	if !slices.ContainsFunc(files, func(f string) bool { return filepath.Base(f) == "ddp-cpu.png" }) {
		t.Errorf("plots %v: no ddp-cpu.png", files)
	}
}

// TestSuiteDDPTestbed trains on a 2-host testbed for 3 steps with Gloo
// and with NDMA in the network: a row each, from train.py's records,
// judged by the fidelity monitor. It builds the C library the Python
// package loads (not under -race: make norace runs it).
func TestSuiteDDPTestbed(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a testbed of network namespaces and trains with PyTorch on it")
	}
	if raceEnabled {
		t.Skip("builds the C library: run without -race (make norace)")
	}
	prefix := fmt.Sprintf("ndmadp%d", os.Getpid()%100000)
	if err := testbed.Check(t.Context(), prefix); err != nil {
		t.Skipf("no testbed here: %v", err)
	}
	if err := GlooAvailable(t.Context()); err != nil {
		t.Skipf("no PyTorch here: %v", err)
	}
	if err := exec.Command(GlooPython, "-c", "import numpy").Run(); err != nil {
		t.Skipf("%s cannot import numpy: %v", GlooPython, err)
	}
	dir := t.TempDir()
	lib := filepath.Join(dir, "libndma.so")
	if out, err := exec.Command("go", "build", "-buildmode=c-shared", "-o", lib, "../libndma").CombinedOutput(); err != nil {
		t.Fatalf("building the C library: %v\n%s", err, out)
	}
	t.Setenv("NDMA_LIB", lib) // the ranks inherit it
	data := filepath.Join(dir, "mnist")
	if out, err := exec.Command("go", "run", "../examples/train/export", "--out", data).CombinedOutput(); err != nil {
		t.Fatalf("exporting MNIST: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	rows, err := RunSuite(ctx, SuiteConfig{
		Testbed: testbed.Config{Prefix: prefix, Hosts: 2, Rate: "100mbit", MTU: 9000, StateDir: filepath.Join(dir, "state"), Binary: ndmaBinary(t)},
		Ops:     []coll.Operation{OpDDP},
		DDP:     &DDPConfig{Script: "../examples/train/train.py", Data: data, Steps: 3, Batch: 32, Hidden: "64"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("%d rows, want gloo and innet: %+v", len(rows), rows)
	}
	const params = 784*64 + 64 + 64*10 + 10
	for i, algo := range []string{"gloo", "innet"} {
		r := rows[i]
		if r.Op != "ddp" || r.Algo != algo || r.Ranks != 2 || r.Size != 4*params || r.Iters != 3 || r.BatchPerRank != 32 {
			t.Errorf("row %d: %+v, want ddp/%s, 2 ranks, %d bytes of gradient, 3 steps of 32", i, r, algo, 4*params)
		}
		if r.AvgUS <= 0 || r.MinUS > r.AvgUS || r.MaxUS < r.AvgUS || r.SamplesPerS <= 0 || r.CPURanksS <= 0 {
			t.Errorf("row %d: implausible %+v", i, r)
		}
		if !near(r.SamplesPerS, 3*32*2/(r.AvgUS*3/1e6)) {
			t.Errorf("row %d: %.1f samples/s, but 3 steps of 2×32 in %.0f µs each", i, r.SamplesPerS, r.AvgUS)
		}
		if v := r.Fidelity; v == nil || v.Window == nil || v.Window.ToS <= v.Window.FromS {
			t.Errorf("row %d: verdict %+v", i, v)
		}
	}
	var md bytes.Buffer
	if err := WriteSuiteMarkdown(&md, rows); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(&md)
	n := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "| gloo | ") || strings.HasPrefix(sc.Text(), "| innet | ") {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d DDP rows in the Markdown, want 2:\n%s", n, md.String())
	}
}
