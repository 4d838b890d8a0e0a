package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/ndma/ndma/coll"
	"github.com/ndma/ndma/testbed"
	"github.com/ndma/ndma/testbed/fidelity"
)

// OpDDP names the rows SuiteConfig.DDP adds: steps of data-parallel
// training (PyTorch's DistributedDataParallel), not a collective. A row's
// Size is the gradient each rank contributes per step (the model's
// parameters, 4 bytes each), AvgUS the mean step (forward, backward, the
// gradients' exchange and the optimizer), Iters the steps.
const OpDDP coll.Operation = "ddp"

// DDPAlgos are the algorithms a DDP row can name, with the backend of
// examples/train/train.py each runs: Gloo's own ring (DDP's default),
// NDMA in the network, and NDMA's host ring.
var DDPAlgos = map[coll.Algo]string{AlgoGloo: "gloo", coll.AlgoInNet: "ndma", coll.AlgoRing: "ndma-ring"}

// DDPConfig configures the DDP rows of a suite: the trainer of
// examples/train (an MLP on MNIST, one rank per host, --ppn ranks with
// SuiteConfig.PerHost) run for Steps steps once per algorithm, under the
// fidelity monitor as every job.
type DDPConfig struct {
	// Script is examples/train/train.py of a checkout, whose python/
	// package and build/libndma.so (make libndma) the NDMA backends load
	// (required).
	Script string
	// Data is the MNIST export of examples/train/export (required).
	Data string
	// Algos are the rows, in order (empty: AlgoGloo and coll.AlgoInNet);
	// each must be in DDPAlgos.
	Algos []coll.Algo
	// Steps is the training steps measured (zero: 30).
	Steps int
	// Batch is the samples per rank per step (zero: 16, so that on a
	// small machine the gradients' exchange, not the compute, sets the
	// pace).
	Batch int
	// Hidden is the MLP's hidden layer widths, comma-separated (empty:
	// "2048,1024", about 3.7 M parameters).
	Hidden string
}

func (d *DDPConfig) setDefaults() {
	if len(d.Algos) == 0 {
		d.Algos = []coll.Algo{AlgoGloo, coll.AlgoInNet}
	}
	if d.Steps == 0 {
		d.Steps = 30
	}
	if d.Batch == 0 {
		d.Batch = 16
	}
	if d.Hidden == "" {
		d.Hidden = "2048,1024"
	}
}

// check says what is wrong with d, after setDefaults.
func (d *DDPConfig) check() error {
	if d.Script == "" || d.Data == "" {
		return errors.New("bench: suite: DDP rows need the trainer (examples/train/train.py) and the MNIST export (go run ./examples/train/export)")
	}
	if _, err := os.Stat(d.Script); err != nil {
		return fmt.Errorf("bench: suite: the DDP trainer: %w", err)
	}
	if _, err := os.Stat(filepath.Join(d.Data, "meta.json")); err != nil {
		return fmt.Errorf("bench: suite: the MNIST export for the DDP rows: %w (go run ./examples/train/export --out DIR makes it)", err)
	}
	if d.Steps < 1 || d.Batch < 1 {
		return fmt.Errorf("bench: suite: DDP rows: %d steps of %d samples: want both positive", d.Steps, d.Batch)
	}
	for _, a := range d.Algos {
		if _, ok := DDPAlgos[a]; !ok {
			return fmt.Errorf("bench: suite: DDP rows: algorithm %q: want gloo, innet or ring", a)
		}
	}
	return nil
}

// ddpRunner runs the DDP jobs of a suite, each in a directory of its own
// for the ranks' rendezvous file and rank 0's records.
type ddpRunner struct {
	cfg DDPConfig
	dir string
}

func newDDPRunner(ctx context.Context, cfg DDPConfig) (*ddpRunner, error) {
	cfg.setDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if err := GlooAvailable(ctx); err != nil {
		return nil, err
	}
	var err error
	for _, p := range []*string{&cfg.Script, &cfg.Data} {
		if *p, err = filepath.Abs(*p); err != nil {
			return nil, err
		}
	}
	// What the ranks import, tried once here rather than by every rank
	// after the testbed is up: numpy, and for NDMA's rows the checkout's
	// Python package with the C library it loads (NDMA_LIB, or
	// build/libndma.so of the checkout).
	probe := "import numpy"
	if slices.ContainsFunc(cfg.Algos, func(a coll.Algo) bool { return a != AlgoGloo }) {
		pkg := filepath.Join(filepath.Dir(cfg.Script), "..", "..", "python")
		probe += fmt.Sprintf("; import sys; sys.path.insert(0, %q); import ndma._lib; ndma._lib.load()", pkg)
	}
	if out, err := exec.CommandContext(ctx, GlooPython, "-c", probe).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("bench: suite: DDP rows: the trainer's imports fail in %s (python3-numpy; make libndma for NDMA's rows): %w: %s", GlooPython, err, tail(string(out), 3))
	}
	dir, err := os.MkdirTemp("", "ndma-ddp")
	if err != nil {
		return nil, err
	}
	return &ddpRunner{cfg: cfg, dir: dir}, nil
}

func (d *ddpRunner) close() { os.RemoveAll(d.dir) }

// args is the command every rank of job j runs, its rendezvous file and
// records in jobDir.
func (d *ddpRunner) args(j suiteJob, jobDir string) []string {
	return []string{GlooPython, d.cfg.Script, "--backend", DDPAlgos[j.algo], "--data", d.cfg.Data,
		"--store", filepath.Join(jobDir, "store"), "--out", filepath.Join(jobDir, "rank0.jsonl"),
		"--epochs", "1", "--steps", strconv.Itoa(d.cfg.Steps), "--batch", strconv.Itoa(d.cfg.Batch), "--hidden", d.cfg.Hidden}
}

// run runs job j on st and returns its result, read from rank 0's
// records.
func (d *ddpRunner) run(ctx context.Context, st *testbed.State, j suiteJob, perHost int, out io.Writer) (ddpResult, error) {
	jobDir, err := os.MkdirTemp(d.dir, "job")
	if err != nil {
		return ddpResult{}, err
	}
	defer os.RemoveAll(jobDir)
	if err := testbed.RunWith(ctx, st, d.args(j, jobDir), out, testbed.RunOptions{PerHost: perHost}); err != nil {
		return ddpResult{}, err
	}
	fh, err := os.Open(filepath.Join(jobDir, "rank0.jsonl"))
	if err != nil {
		return ddpResult{}, fmt.Errorf("rank 0's records: %w", err)
	}
	defer fh.Close()
	res, err := parseDDP(fh)
	if err != nil {
		return ddpResult{}, err
	}
	if res.Backend != DDPAlgos[j.algo] || res.Steps != d.cfg.Steps || res.Batch != d.cfg.Batch {
		return ddpResult{}, fmt.Errorf("rank 0 reported backend %s, %d steps of %d samples; asked %s, %d of %d",
			res.Backend, res.Steps, res.Batch, DDPAlgos[j.algo], d.cfg.Steps, d.cfg.Batch)
	}
	return res, nil
}

// runDDPJob runs DDP job j on st under the fidelity monitor: its row
// has the ranks' CPU in the training loops (what train.py reports, the
// interpreter's start and PyTorch's import left out) and the switch's
// over the job.
func runDDPJob(ctx context.Context, st *testbed.State, target fidelity.Target, rule fidelity.Rule, d *ddpRunner, j suiteJob, perHost int) (SuiteRow, error) {
	var ddp ddpResult
	res, verdict, err := monitored(ctx, target, rule, fmt.Sprintf("%s/%s", j.op, j.algo), func(ctx context.Context, out *bytes.Buffer) (CollResult, error) {
		var err error
		if ddp, err = d.run(ctx, st, j, perHost, out); err != nil {
			return CollResult{}, err
		}
		return ddp.collResult(j.algo), nil
	})
	if err != nil {
		return SuiteRow{}, err
	}
	row := newSuiteRow(res, 0, st.RateBits, ddp.RanksCPUS, verdict.ProcessS["switch"])
	row.setup(st, verdict)
	row.SamplesPerS, row.BatchPerRank = ddp.SamplesPerS, ddp.Batch
	if perHost > 1 {
		row.PerHost = perHost
	}
	return row, nil
}

// ddpResult is what rank 0 of the trainer reports: its start and summary
// records.
type ddpResult struct {
	Backend     string
	Ranks       int
	Params      int
	Batch       int
	Steps       int
	TrainS      float64
	SamplesPerS float64
	StepMinS    float64
	StepMaxS    float64
	RanksCPUS   float64
	TimedFromNS int64
	TimedToNS   int64
}

// parseDDP reads the trainer's records (train.py --out): the start
// record and the summary.
func parseDDP(r io.Reader) (ddpResult, error) {
	type record struct {
		Kind        string   `json:"kind"`
		Backend     string   `json:"backend"`
		Ranks       int      `json:"ranks"`
		Params      int      `json:"params"`
		Batch       int      `json:"batch_per_rank"`
		Steps       int      `json:"steps"`
		TrainS      float64  `json:"train_s"`
		SamplesPerS float64  `json:"samples_per_s"`
		StepMinS    *float64 `json:"step_s_min"`
		StepMaxS    *float64 `json:"step_s_max"`
		RanksCPUS   *float64 `json:"ranks_cpu_s"`
		TimedFromNS int64    `json:"timed_from_ns"`
		TimedToNS   int64    `json:"timed_to_ns"`
	}
	var res ddpResult
	var start, summary bool
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		var rec record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return ddpResult{}, fmt.Errorf("rank 0's record %d: %w", n, err)
		}
		switch rec.Kind {
		case "start":
			start = true
			res.Backend, res.Ranks, res.Params, res.Batch = rec.Backend, rec.Ranks, rec.Params, rec.Batch
		case "summary":
			if rec.StepMinS == nil || rec.StepMaxS == nil || rec.RanksCPUS == nil || rec.TimedFromNS == 0 || rec.TimedToNS == 0 {
				return ddpResult{}, fmt.Errorf("rank 0's summary (record %d) lacks the steps' times, the ranks' CPU or when they ran: a trainer older than this ndma?", n)
			}
			summary = true
			res.Steps, res.TrainS, res.SamplesPerS = rec.Steps, rec.TrainS, rec.SamplesPerS
			res.StepMinS, res.StepMaxS, res.RanksCPUS = *rec.StepMinS, *rec.StepMaxS, *rec.RanksCPUS
			res.TimedFromNS, res.TimedToNS = rec.TimedFromNS, rec.TimedToNS
		}
	}
	if err := sc.Err(); err != nil {
		return ddpResult{}, err
	}
	switch {
	case !start || !summary:
		return ddpResult{}, fmt.Errorf("rank 0's records: start %v, summary %v: want both", start, summary)
	case res.Steps < 1 || res.TrainS <= 0 || res.Ranks < 1 || res.Params < 1:
		return ddpResult{}, fmt.Errorf("rank 0's records: %d steps in %g s, %d ranks, %d parameters", res.Steps, res.TrainS, res.Ranks, res.Params)
	}
	return res, nil
}

// collResult is the DDP result as a suite row's measurement: the step
// is the call, the gradient the message.
func (r ddpResult) collResult(algo coll.Algo) CollResult {
	return CollResult{Op: string(OpDDP), Algo: string(algo), Ranks: r.Ranks, Size: 4 * r.Params,
		AvgUS: r.TrainS / float64(r.Steps) * 1e6, MinUS: r.StepMinS * 1e6, MaxUS: r.StepMaxS * 1e6, Iters: r.Steps,
		TimedFromNS: r.TimedFromNS, TimedToNS: r.TimedToNS}
}
