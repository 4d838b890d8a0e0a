package bench

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ndma/ndma/coll"
	"github.com/ndma/ndma/testbed"
	"github.com/ndma/ndma/testbed/fidelity"
)

// DefaultSuiteOps are the collectives a suite measures when
// SuiteConfig.Ops is empty.
var DefaultSuiteOps = []coll.Operation{coll.OpBcast, coll.OpReduce, coll.OpAllreduce, coll.OpAllgather, coll.OpBarrier}

// suiteDownTimeout bounds tearing the testbed down after the run, which
// happens even when the run's context has ended.
const suiteDownTimeout = 60 * time.Second

// MPITries is how many times a suite runs an MPI job before leaving its
// row out.
const MPITries = 3

// SuiteConfig configures a benchmark suite (ndma bench suite): on a
// testbed it builds, one `ndma bench coll --json` job per operation,
// algorithm and size, its CPU time measured.
type SuiteConfig struct {
	// Testbed is the testbed to build. Its Binary (empty: the running
	// executable) also runs the ranks, as `Binary bench coll`.
	Testbed testbed.Config
	// Ops are the collectives to measure, each with every algorithm of
	// coll.Algorithms. Empty means DefaultSuiteOps.
	Ops []coll.Operation
	// Sizes are the message sizes per rank, in bytes; Barrier has none
	// and runs once per algorithm. Empty means 8 B to 16 MiB, powers of
	// two.
	Sizes []int
	// Iters is the measured iterations per size; zero picks by size, as
	// CollConfig does.
	Iters int
	// MPI also measures every operation with Open MPI (algo "mpi" in the
	// rows): bench/mpi/osu_coll.c, built with mpicc, started by mpirun in
	// the first host's namespace with one rank per host over the TCP BTL,
	// yielding the CPU when idle (the ranks share this machine's cores),
	// with Open MPI's own algorithm choice. It needs mpicc and mpirun
	// (Debian: openmpi-bin, libopenmpi-dev).
	MPI bool
	// MPINDMA is the path of the MPI interposition library
	// (build/libndma_mpi.so, for Open MPI): with it every operation is
	// also measured by the same Open MPI program with the library
	// preloaded, its collectives through the testbed's switch (rows
	// AlgoMPINDMA) and declined by it (AlgoMPIDeclined). Empty: none.
	MPINDMA string
	// MPITuned also measures every operation with each algorithm Open
	// MPI's tuned component can be forced to (rows "mpi-tuned-<name>",
	// from ompi_info).
	MPITuned bool
	// Gloo also measures Bcast, Allreduce, Reduce, Allgather and Barrier
	// with PyTorch's Gloo backend (algo "gloo" in the rows): one Python
	// process per host (GlooPython, bench/gloo/gloo_coll.py), started as
	// NDMA's ranks are, timed and reported like them, its CPU counted
	// the same way. It needs python3-torch.
	Gloo bool
	// DDP, if not nil, adds the rows of OpDDP: data-parallel training
	// steps of examples/train/train.py, one job per DDPConfig.Algos, after
	// the collectives (or where Ops names OpDDP).
	DDP *DDPConfig
	// Algos, if not empty, keeps only the rows of these algorithms
	// (NDMA's, AlgoMPI and the others above).
	Algos []coll.Algo
	// Sync is the barrier in front of every NDMA call (CollConfig.Sync;
	// empty: DefaultSync). The MPI rows call MPI_Barrier.
	Sync coll.Algo
	// Repeat runs every job this many times (zero: once), in rounds —
	// all jobs, then all again — so that a slow minute of a shared
	// machine falls on one sample of each job rather than on every sample
	// of one; each row is then the run with the median Avg (the lower
	// middle one for an even count) among the job's faithful runs (all
	// its runs if none was faithful), and RunsAvgUS lists every run's.
	Repeat int
	// PerHost runs this many ranks in each host namespace (testbed
	// RunOptions.PerHost; the MPI rows likewise, a host's ranks over
	// Open MPI's shared memory, btl vader); 0 means 1. The NDMA rows run
	// in two levels unless the environment says NDMA_HIERARCHY=off
	// (their Hosts says so).
	PerHost int
	// Keep leaves the testbed up after the run instead of taking it down.
	Keep bool
	// Progress, if not nil, is called before each job with the number of
	// jobs done and the total.
	Progress func(done, total int)
	// Row, if not nil, is called with each row as soon as it is measured.
	Row func(SuiteRow)
	// Skipped, if not nil, is called for each MPI job left out after
	// failing MPITries times, with the job's name and last error.
	Skipped func(job string, err error)
	// Fidelity is the rule every job is judged by (SuiteRow.Fidelity);
	// its zero fields take fidelity's defaults (the testbed at most 60%
	// of the machine's CPU, a bulk job's bottleneck link busy 90% of its
	// transfer).
	Fidelity fidelity.Rule
}

// SuiteRow is one row of a suite: bench coll's row for one operation,
// algorithm and size, with the job's CPU time and the link bound.
//
// CPU times are those of the whole `ndma bench coll` job that measured the
// row (one job per row): the user+system time of every rank process,
// summed, and that of the switch daemon over the job's lifetime. They
// include each rank's process start, joining the communicator, the
// warm-up calls and the barrier before each call, so CPUPerCallUS (CPU
// over Warmup+Iters calls) is an upper bound on one call's CPU, tightest
// where a call does much work. Resolution is one clock tick (10 ms) per
// process.
type SuiteRow struct {
	CollResult
	// PerHost is the number of ranks in each host namespace
	// (SuiteConfig.PerHost); absent: one.
	PerHost  int    `json:"ppn,omitempty"`
	Warmup   int    `json:"warmup"`    // unmeasured calls before Iters
	RateBits uint64 `json:"rate_bits"` // link rate, bits per second
	// PeakRateBits is the links' tbf peak rate (testbed.Config.PeakRate),
	// bits per second; zero: none, or rows from before it was recorded.
	PeakRateBits uint64 `json:"peak_rate_bits,omitempty"`
	// PriorityQueues: the links' queues sent control datagrams first
	// (testbed.Config.PriorityQueues).
	PriorityQueues bool `json:"priority_queues,omitempty"`
	// Leaves is the leaf switches of a leaf-spine testbed
	// (testbed.Config.Leaves), UplinkRateBits their uplinks' rate; zero
	// for one switch.
	Leaves         int    `json:"leaves,omitempty"`
	UplinkRateBits uint64 `json:"uplink_rate_bits,omitempty"`
	// BoundUS is the time to push Size bytes through one link, Size*8 over
	// the rate: the S/B bound, in microseconds.
	BoundUS      float64 `json:"bound_us"`
	CPURanksS    float64 `json:"cpu_ranks_s"`     // CPU of all rank processes, seconds
	CPUSwitchS   float64 `json:"cpu_switch_s"`    // CPU of the switch daemon, seconds
	CPUS         float64 `json:"cpu_s"`           // CPURanksS + CPUSwitchS
	CPUPerCallUS float64 `json:"cpu_per_call_us"` // CPUS over Warmup+Iters calls, microseconds
	// RunsAvgUS is the Avg of every run of this job when the suite
	// repeated it (SuiteConfig.Repeat), in run order; the row is the
	// median one. Empty for a single run.
	RunsAvgUS []float64 `json:"runs_avg_us,omitempty"`
	// StealS is the CPU time the hypervisor gave other tenants of the
	// host while this job ran: /proc/stat's steal, all of the machine's
	// CPUs summed, in seconds. On a shared virtual machine a slow round
	// often coincides with a large value. Nil where the machine does
	// not report it. RunsStealS lists it for every run of a repeated
	// job, in run order (absent if any run lacks it).
	StealS     *float64  `json:"steal_s,omitempty"`
	RunsStealS []float64 `json:"runs_steal_s,omitempty"`
	// CPUPerMiBRankS is one rank's CPU per MiB of its message, CPURanksS
	// over Ranks and over Size times Warmup+Iters calls, in seconds per
	// MiB; CPUPerMiBSwitchS the switch's CPU over the same MiB. Zero for
	// a Barrier.
	CPUPerMiBRankS   float64 `json:"cpu_per_mib_rank_s,omitempty"`
	CPUPerMiBSwitchS float64 `json:"cpu_per_mib_switch_s,omitempty"`
	// CPUPerMiBEachSwitchS is, on a testbed with several switch processes
	// (testbed.Config.Switches: the ranks' in-network collectives sharded
	// over them), each one's CPU over the same MiB, in the testbed's
	// order; CPUSwitchS and CPUPerMiBSwitchS are their sums. Nil with one
	// switch.
	CPUPerMiBEachSwitchS []float64 `json:"cpu_per_mib_each_switch_s,omitempty"`
	// Fidelity is the monitor's verdict on the job: whether it was
	// faithful (its figures measure the links, not this machine's CPU)
	// and why. Nil in rows from before it was recorded. RunsFidelity
	// lists the verdict's class of every run of a repeated job, in run
	// order (absent if any run lacks one).
	Fidelity     *fidelity.Verdict `json:"fidelity,omitempty"`
	RunsFidelity []fidelity.Class  `json:"runs_fidelity,omitempty"`
	// SamplesPerS is, in an OpDDP row, the training's samples per second
	// (all ranks), and BatchPerRank each rank's samples per step; zero
	// elsewhere.
	SamplesPerS  float64 `json:"samples_per_s,omitempty"`
	BatchPerRank int     `json:"batch_per_rank,omitempty"`
}

// suiteJob is one `bench coll` invocation.
type suiteJob struct {
	op   coll.Operation
	algo coll.Algo
	size int
}

func (c *SuiteConfig) plan(tuned map[coll.Operation][]coll.Algo) ([]suiteJob, error) {
	ops := c.Ops
	if len(ops) == 0 {
		ops = DefaultSuiteOps
	}
	sizes := c.Sizes
	if len(sizes) == 0 {
		sizes = PowersOfTwo(8, 16<<20)
	}
	for _, s := range sizes {
		if s <= 0 {
			return nil, fmt.Errorf("bench: suite: size %d bytes: must be positive", s)
		}
	}
	if c.Iters < 0 {
		return nil, fmt.Errorf("bench: suite: %d iterations: must not be negative", c.Iters)
	}
	if c.PerHost < 0 || c.PerHost > testbed.MaxPerHost {
		return nil, fmt.Errorf("bench: suite: %d ranks per host: want 1 to %d", c.PerHost, testbed.MaxPerHost)
	}
	if c.DDP != nil && !slices.Contains(ops, OpDDP) {
		ops = append(ops[:len(ops):len(ops)], OpDDP)
	}
	var jobs []suiteJob
	for _, op := range ops {
		if op == OpDDP {
			if c.DDP == nil {
				return nil, errors.New("bench: suite: DDP rows need the trainer and its data (SuiteConfig.DDP)")
			}
			d := *c.DDP
			d.setDefaults()
			for _, a := range d.Algos {
				if len(c.Algos) == 0 || slices.Contains(c.Algos, a) {
					jobs = append(jobs, suiteJob{OpDDP, a, 0})
				}
			}
			continue
		}
		algos, ok := coll.Algorithms[op]
		if !ok {
			return nil, fmt.Errorf("bench: suite: unknown collective %q", op)
		}
		if c.MPI {
			algos = append(algos[:len(algos):len(algos)], AlgoMPI)
		}
		if c.MPINDMA != "" {
			algos = append(algos[:len(algos):len(algos)], AlgoMPINDMA, AlgoMPIDeclined)
		}
		algos = c.glooAlgos(op, algos)
		algos = append(algos[:len(algos):len(algos)], tuned[op]...)
		for _, a := range algos {
			if len(c.Algos) > 0 && !slices.Contains(c.Algos, a) {
				continue
			}
			if op == coll.OpBarrier {
				jobs = append(jobs, suiteJob{op, a, 0})
				continue
			}
			for _, s := range sizes {
				jobs = append(jobs, suiteJob{op, a, s})
			}
		}
	}
	return jobs, nil
}

// RunSuite builds the testbed, runs every job of cfg on it and returns the
// rows in order. It refuses (testbed.ErrInUse) when the prefix is in use.
// Unless cfg.Keep, it takes the testbed down before returning, also when a
// job fails or ctx ends. On error the rows measured so far are returned
// with it.
func RunSuite(ctx context.Context, cfg SuiteConfig) (rows []SuiteRow, err error) {
	var tuned map[coll.Operation][]coll.Algo
	var tunedValues map[tunedKey]int
	if cfg.MPITuned {
		ops := cfg.Ops
		if len(ops) == 0 {
			ops = DefaultSuiteOps
		}
		if tuned, tunedValues, err = MPITunedAlgorithms(ctx, ops); err != nil {
			return nil, err
		}
	}
	jobs, err := cfg.plan(tuned)
	if err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("bench: suite: no jobs: none of the algorithms %v is measured for %v", cfg.Algos, cfg.Ops)
	}
	if cfg.Testbed.StateDir == "" {
		cfg.Testbed.StateDir = testbed.DefaultStateDir()
	}
	var mpi *mpiRunner
	if cfg.MPI || cfg.MPINDMA != "" || cfg.MPITuned {
		if cfg.MPINDMA != "" {
			if _, err := os.Stat(cfg.MPINDMA); err != nil {
				return nil, fmt.Errorf("bench: suite: the MPI interposition library: %w (make libndma builds it)", err)
			}
		}
		if mpi, err = newMPIRunner(ctx); err != nil {
			return nil, err
		}
		defer mpi.close()
		mpi.ndmaLib, mpi.tuned = cfg.MPINDMA, tunedValues
		if mpi.ndmaLib != "" {
			if mpi.ndmaLib, err = filepath.Abs(mpi.ndmaLib); err != nil {
				return nil, err
			}
		}
	}
	var gloo *glooRunner
	if cfg.Gloo {
		if gloo, err = newGlooRunner(ctx); err != nil {
			return nil, err
		}
		defer gloo.close()
	}
	var ddp *ddpRunner
	if slices.ContainsFunc(jobs, func(j suiteJob) bool { return j.op == OpDDP }) {
		if ddp, err = newDDPRunner(ctx, *cfg.DDP); err != nil {
			return nil, err
		}
		defer ddp.close()
	}
	st, err := testbed.Up(ctx, cfg.Testbed)
	if err != nil {
		return nil, err
	}
	if !cfg.Keep {
		defer func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), suiteDownTimeout)
			defer cancel()
			if derr := testbed.DownAt(dctx, cfg.Testbed.StateDir, st.Prefix); derr != nil {
				err = errors.Join(err, fmt.Errorf("taking the testbed down: %w", derr))
			}
		}()
	}
	bin := cfg.Testbed.Binary
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	target, err := fidelity.TargetOf(st)
	if err != nil {
		return nil, fmt.Errorf("bench: suite: %w", err)
	}
	return runJobs(ctx, jobs, &cfg, func(j suiteJob) (SuiteRow, error) {
		if j.op == OpDDP {
			return runDDPJob(ctx, st, target, cfg.Fidelity, ddp, j, cfg.PerHost)
		}
		run := func(ctx context.Context, out io.Writer) error {
			return testbed.RunWith(ctx, st, collArgs(bin, st, j, cfg.Iters, cfg.Sync), out, testbed.RunOptions{PerHost: cfg.PerHost})
		}
		prefix := "[rank 0] "
		if j.algo == AlgoGloo {
			run = func(ctx context.Context, out io.Writer) error {
				return gloo.run(ctx, st, j, cfg.Iters, cfg.PerHost, out)
			}
		}
		if IsMPI(j.algo) {
			run = func(ctx context.Context, out io.Writer) error {
				return mpi.run(ctx, st, j, cfg.Iters, cfg.PerHost, out)
			}
			prefix = ""
		}
		row, err := runSuiteJob(ctx, st, target, cfg.Fidelity, j, cfg.Iters, run, prefix)
		if cfg.PerHost > 1 {
			row.PerHost = cfg.PerHost
		}
		return row, err
	})
}

// runJobs runs every job with runOne, in order, cfg.Repeat rounds of
// them, reporting progress and rows through cfg (with one round, each
// row as soon as it is measured; with more, each job's median row after
// the last round). An NDMA job's failure ends the run. Open MPI's TCP
// wire-up between the namespaces now and then fails to connect ("unable
// to complete a TCP connection"), so an MPI job is tried up to MPITries
// times, and if it still fails that run is left out and reported
// (cfg.Skipped) instead of ending the suite; a job with no run left has
// no row.
func runJobs(ctx context.Context, jobs []suiteJob, cfg *SuiteConfig, runOne func(suiteJob) (SuiteRow, error)) ([]SuiteRow, error) {
	rounds := max(cfg.Repeat, 1)
	runs := make([][]SuiteRow, len(jobs))
	total := rounds * len(jobs)
	for r := range rounds {
		for i, j := range jobs {
			if cfg.Progress != nil {
				cfg.Progress(r*len(jobs)+i, total)
			}
			row, err := runOne(j)
			for try := 1; err != nil && IsMPI(j.algo) && try < MPITries && ctx.Err() == nil; try++ {
				row, err = runOne(j)
			}
			if err != nil && IsMPI(j.algo) && ctx.Err() == nil {
				if cfg.Skipped != nil {
					cfg.Skipped(fmt.Sprintf("%s/%s size %d", j.op, j.algo, j.size), err)
				}
				continue
			}
			if err != nil {
				return medianRows(runs), err
			}
			runs[i] = append(runs[i], row)
			if rounds == 1 && cfg.Row != nil {
				cfg.Row(row)
			}
		}
	}
	if cfg.Progress != nil {
		cfg.Progress(total, total)
	}
	rows := medianRows(runs)
	if rounds > 1 && cfg.Row != nil {
		for _, row := range rows {
			cfg.Row(row)
		}
	}
	return rows, nil
}

// medianRows returns, for each job that has runs, the run with the median
// Avg (the lower middle one of an even count) among its faithful runs, or
// among all of them if none was faithful, with RunsAvgUS (and
// RunsStealS, RunsFidelity) listing every run's when there is more than
// one.
func medianRows(runs [][]SuiteRow) []SuiteRow {
	var rows []SuiteRow
	for _, rs := range runs {
		if len(rs) == 0 {
			continue
		}
		if len(rs) == 1 {
			rows = append(rows, rs[0])
			continue
		}
		avgs := make([]float64, len(rs))
		steals := make([]float64, len(rs))
		classes := make([]fidelity.Class, len(rs))
		var faithful []SuiteRow
		for k, r := range rs {
			avgs[k] = r.AvgUS
			if steals != nil && r.StealS != nil {
				steals[k] = *r.StealS
			} else {
				steals = nil
			}
			if classes != nil && r.Fidelity != nil {
				classes[k] = r.Fidelity.Class
			} else {
				classes = nil
			}
			if r.Fidelity != nil && r.Fidelity.Faithful {
				faithful = append(faithful, r)
			}
		}
		sorted := slices.Clone(rs)
		if len(faithful) > 0 {
			sorted = faithful
		}
		slices.SortStableFunc(sorted, func(a, b SuiteRow) int { return cmp.Compare(a.AvgUS, b.AvgUS) })
		row := sorted[(len(sorted)-1)/2]
		row.RunsAvgUS = avgs
		row.RunsStealS = steals
		row.RunsFidelity = classes
		rows = append(rows, row)
	}
	return rows
}

// collArgs is the command line of one bench coll job.
func collArgs(bin string, st *testbed.State, j suiteJob, iters int, sync coll.Algo) []string {
	args := []string{bin, "bench", "coll", "--json", "--op", string(j.op), "--algo", string(j.algo),
		"--mtu", strconv.Itoa(st.DatagramMTU)}
	if sync != "" {
		args = append(args, "--sync-algo", string(sync))
	}
	if j.size > 0 {
		args = append(args, "--sizes", strconv.Itoa(j.size))
	}
	if iters > 0 {
		args = append(args, "--iters", strconv.Itoa(iters))
	}
	return args
}

// runSuiteJob runs one job on st with run, which starts its processes as
// this process's children and waits for them, under a fidelity monitor
// watching target, and judges it by rule; the row is the JSON line of the
// output that starts with prefix.
func runSuiteJob(ctx context.Context, st *testbed.State, target fidelity.Target, rule fidelity.Rule, j suiteJob, iters int, run func(context.Context, io.Writer) error, prefix string) (SuiteRow, error) {
	what := fmt.Sprintf("%s/%s size %d", j.op, j.algo, j.size)
	res, verdict, err := monitored(ctx, target, rule, what, func(ctx context.Context, out *bytes.Buffer) (CollResult, error) {
		if err := run(ctx, out); err != nil {
			return CollResult{}, err
		}
		return parseRank0(out, prefix)
	})
	if err != nil {
		return SuiteRow{}, err
	}
	if res.Op != string(j.op) || res.Algo != string(j.algo) || res.Size != j.size {
		return SuiteRow{}, fmt.Errorf("bench: suite: %s: rank 0 reported %s/%s size %d", what, res.Op, res.Algo, res.Size)
	}
	it, warmup := (&CollConfig{Iters: iters}).iters(res.Size)
	if it != res.Iters {
		return SuiteRow{}, fmt.Errorf("bench: suite: %s: rank 0 ran %d iterations, expected %d", what, res.Iters, it)
	}
	row := newSuiteRow(res, warmup, st.RateBits, verdict.ProcessS["ranks"], verdict.ProcessS["switch"])
	row.setup(st, verdict)
	return row, nil
}

// monitored runs one job with measure, under a fidelity monitor watching
// target, and judges it by rule over the timed window its result
// reports. measure writes the job's output to out, which errors quote.
func monitored(ctx context.Context, target fidelity.Target, rule fidelity.Rule, what string, measure func(ctx context.Context, out *bytes.Buffer) (CollResult, error)) (CollResult, fidelity.Verdict, error) {
	mon, err := fidelity.Start(ctx, target, 0)
	if err != nil {
		return CollResult{}, fidelity.Verdict{}, fmt.Errorf("bench: suite: %s: %w", what, err)
	}
	var out bytes.Buffer
	res, runErr := measure(ctx, &out)
	rec, err := mon.Stop(context.WithoutCancel(ctx))
	if err != nil {
		return CollResult{}, fidelity.Verdict{}, fmt.Errorf("bench: suite: %s: %w", what, err)
	}
	if runErr != nil {
		return CollResult{}, fidelity.Verdict{}, fmt.Errorf("bench: suite: %s: %w\n%s", what, runErr, tail(out.String(), 20))
	}
	// The rule is judged on the timed calls rank 0 reports, not on the
	// start-up (an interpreter's imports, a runtime's init) around them.
	if res.TimedFromNS == 0 || res.TimedToNS == 0 {
		return CollResult{}, fidelity.Verdict{}, fmt.Errorf("bench: suite: %s: rank 0 did not report when its timed calls ran", what)
	}
	if err := rec.Window(time.Unix(0, res.TimedFromNS).Sub(mon.Started()), time.Unix(0, res.TimedToNS).Sub(mon.Started())); err != nil {
		return CollResult{}, fidelity.Verdict{}, fmt.Errorf("bench: suite: %s: %w", what, err)
	}
	verdict, err := rec.Judge(rule)
	if err != nil {
		return CollResult{}, fidelity.Verdict{}, fmt.Errorf("bench: suite: %s: %w", what, err)
	}
	return res, verdict, nil
}

// setup fills in the row's testbed (links, switches) and the monitor's
// verdict.
func (row *SuiteRow) setup(st *testbed.State, verdict fidelity.Verdict) {
	row.eachSwitch(verdict.SwitchS)
	row.PeakRateBits = st.PeakRateBits
	row.PriorityQueues = st.QueuePackets > 0
	row.Leaves, row.UplinkRateBits = len(st.Leaves), st.UplinkRateBits
	row.StealS = verdict.StealS
	row.Fidelity = &verdict
}

// newSuiteRow completes a row from bench coll's result, the warm-up count,
// the link rate in bits per second and the CPU seconds of ranks and switch.
func newSuiteRow(r CollResult, warmup int, rateBits uint64, ranksS, switchS float64) SuiteRow {
	row := SuiteRow{CollResult: r, Warmup: warmup, RateBits: rateBits, CPURanksS: ranksS, CPUSwitchS: switchS, CPUS: ranksS + switchS}
	if rateBits > 0 {
		row.BoundUS = float64(r.Size) * 8 / float64(rateBits) * 1e6
	}
	if calls := r.Iters + warmup; calls > 0 {
		row.CPUPerCallUS = row.CPUS / float64(calls) * 1e6
		if mib := float64(r.Size) * float64(calls) / (1 << 20); mib > 0 && r.Ranks > 0 {
			row.CPUPerMiBRankS = ranksS / float64(r.Ranks) / mib
			row.CPUPerMiBSwitchS = switchS / mib
		}
	}
	return row
}

// eachSwitch fills CPUPerMiBEachSwitchS from each switch process's CPU
// seconds over the job (none with one switch).
func (row *SuiteRow) eachSwitch(switchS []float64) {
	calls := row.Iters + row.Warmup
	mib := float64(row.Size) * float64(calls) / (1 << 20)
	if len(switchS) < 2 || mib <= 0 {
		return
	}
	for _, s := range switchS {
		row.CPUPerMiBEachSwitchS = append(row.CPUPerMiBEachSwitchS, s/mib)
	}
}

// parseRank0 returns the one JSON row rank 0 printed in a job's output:
// the line that is prefix and a JSON object ("[rank 0] {...}" in
// testbed.Run's output, "{...}" in mpirun's).
func parseRank0(r io.Reader, prefix string) (CollResult, error) {
	var (
		res CollResult
		n   int
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), prefix)
		if !ok || !strings.HasPrefix(line, "{") {
			continue
		}
		if err := json.Unmarshal([]byte(line), &res); err != nil {
			return CollResult{}, fmt.Errorf("rank 0's row %q: %w", line, err)
		}
		n++
	}
	if err := sc.Err(); err != nil {
		return CollResult{}, err
	}
	if n != 1 {
		return CollResult{}, fmt.Errorf("rank 0 printed %d JSON rows, want 1", n)
	}
	return res, nil
}

// procCPU reads /proc/<pid>/stat ("self": this process) and returns the
// process's user+system time and that of its waited-for children, in
// seconds.
var procCPU = fidelity.ProcessCPU

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// WriteSuiteJSON writes rows as JSON Lines, one object per row.
func WriteSuiteJSON(w io.Writer, rows []SuiteRow) error {
	enc := json.NewEncoder(w)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// ReadSuiteJSON reads rows that WriteSuiteJSON wrote (suite.jsonl), to
// render them again or merge runs. A line that is not a row is an error
// naming it.
func ReadSuiteJSON(r io.Reader) ([]SuiteRow, error) {
	var rows []SuiteRow
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var row SuiteRow
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&row); err != nil {
			return nil, fmt.Errorf("bench: suite rows: line %d: %w", n, err)
		}
		if row.Op == "" || row.Algo == "" || row.Ranks < 1 || row.Iters < 1 {
			return nil, fmt.Errorf("bench: suite rows: line %d: not a suite row (op %q, algo %q, ranks %d, iters %d)", n, row.Op, row.Algo, row.Ranks, row.Iters)
		}
		rows = append(rows, row)
	}
	return rows, sc.Err()
}
