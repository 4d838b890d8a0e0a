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
)

// DefaultSuiteOps are the collectives a suite measures when
// SuiteConfig.Ops is empty.
var DefaultSuiteOps = []coll.Operation{coll.OpBcast, coll.OpReduce, coll.OpAllreduce, coll.OpAllgather, coll.OpBarrier}

// clockTicks is USER_HZ, the unit of the CPU times in /proc/<pid>/stat:
// 100 on every Linux architecture Go supports.
const clockTicks = 100

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
	// middle one for an even count), and RunsAvgUS lists every run's.
	Repeat int
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
	Warmup   int    `json:"warmup"`    // unmeasured calls before Iters
	RateBits uint64 `json:"rate_bits"` // link rate, bits per second
	// PeakRateBits is the links' tbf peak rate (testbed.Config.PeakRate),
	// bits per second; zero: none, or rows from before it was recorded.
	PeakRateBits uint64 `json:"peak_rate_bits,omitempty"`
	// PriorityQueues: the links' queues sent control datagrams first
	// (testbed.Config.PriorityQueues).
	PriorityQueues bool `json:"priority_queues,omitempty"`
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
	var jobs []suiteJob
	for _, op := range ops {
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
	swPID := 0
	for _, d := range st.Daemons {
		if d.Role == "switch" {
			swPID = d.PID
		}
	}
	if swPID == 0 {
		return nil, errors.New("bench: suite: the testbed has no switch daemon")
	}
	return runJobs(ctx, jobs, &cfg, func(j suiteJob) (SuiteRow, error) {
		run := func(ctx context.Context, out io.Writer) error {
			return testbed.Run(ctx, st, collArgs(bin, st, j, cfg.Iters, cfg.Sync), out)
		}
		prefix := "[rank 0] "
		if IsMPI(j.algo) {
			run = func(ctx context.Context, out io.Writer) error {
				return mpi.run(ctx, st, j, cfg.Iters, out)
			}
			prefix = ""
		}
		return runSuiteJob(ctx, st, swPID, j, cfg.Iters, run, prefix)
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
// Avg (the lower middle one of an even count), with RunsAvgUS listing
// every run's Avg when there is more than one.
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
		for k, r := range rs {
			avgs[k] = r.AvgUS
			if steals != nil && r.StealS != nil {
				steals[k] = *r.StealS
			} else {
				steals = nil
			}
		}
		sorted := slices.Clone(rs)
		slices.SortStableFunc(sorted, func(a, b SuiteRow) int { return cmp.Compare(a.AvgUS, b.AvgUS) })
		row := sorted[(len(sorted)-1)/2]
		row.RunsAvgUS = avgs
		row.RunsStealS = steals
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
// this process's children and waits for them, and measures its CPU; the
// row is the JSON line of the output that starts with prefix.
func runSuiteJob(ctx context.Context, st *testbed.State, swPID int, j suiteJob, iters int, run func(context.Context, io.Writer) error, prefix string) (SuiteRow, error) {
	what := fmt.Sprintf("%s/%s size %d", j.op, j.algo, j.size)
	_, ch0, err := procCPU("self")
	if err != nil {
		return SuiteRow{}, err
	}
	sw0, _, err := procCPU(strconv.Itoa(swPID))
	if err != nil {
		return SuiteRow{}, fmt.Errorf("bench: suite: the switch daemon: %w", err)
	}
	steal0, stealOK := stealTicks()
	var out bytes.Buffer
	runErr := run(ctx, &out)
	steal1, stealOK1 := stealTicks()
	_, ch1, err := procCPU("self")
	if err != nil {
		return SuiteRow{}, err
	}
	sw1, _, err := procCPU(strconv.Itoa(swPID))
	if err != nil {
		return SuiteRow{}, fmt.Errorf("bench: suite: the switch daemon after %s: %w", what, err)
	}
	if runErr != nil {
		return SuiteRow{}, fmt.Errorf("bench: suite: %s: %w\n%s", what, runErr, tail(out.String(), 20))
	}
	res, err := parseRank0(&out, prefix)
	if err != nil {
		return SuiteRow{}, fmt.Errorf("bench: suite: %s: %w\n%s", what, err, tail(out.String(), 20))
	}
	if res.Op != string(j.op) || res.Algo != string(j.algo) || res.Size != j.size {
		return SuiteRow{}, fmt.Errorf("bench: suite: %s: rank 0 reported %s/%s size %d", what, res.Op, res.Algo, res.Size)
	}
	it, warmup := (&CollConfig{Iters: iters}).iters(res.Size)
	if it != res.Iters {
		return SuiteRow{}, fmt.Errorf("bench: suite: %s: rank 0 ran %d iterations, expected %d", what, res.Iters, it)
	}
	row := newSuiteRow(res, warmup, st.RateBits, ch1-ch0, sw1-sw0)
	row.PeakRateBits = st.PeakRateBits
	row.PriorityQueues = st.QueuePackets > 0
	if stealOK && stealOK1 {
		d := float64(max(steal1, steal0)-steal0) / clockTicks
		row.StealS = &d
	}
	return row, nil
}

// stealTicks returns the CPU time stolen from this machine's virtual
// CPUs so far (the steal field of /proc/stat's "cpu" line, all CPUs
// summed), in USER_HZ ticks; ok is false where the file or the field is
// missing.
func stealTicks() (ticks uint64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	return parseSteal(b)
}

// parseSteal reads the steal time, in USER_HZ ticks, from the contents
// of /proc/stat: "cpu  user nice system idle iowait irq softirq steal ...".
func parseSteal(b []byte) (uint64, bool) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return 0, false
	}
	v, err := strconv.ParseUint(f[8], 10, 64)
	if err != nil {
		return 0, false
	}
	return v, true
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
	}
	return row
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

// procCPU reads /proc/<pid>/stat and returns the process's user+system
// time and that of its waited-for children, in seconds.
func procCPU(pid string) (self, children float64, err error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%s/stat: no command name", pid)
	}
	// After ")": state (field 3) ... utime (14), stime, cutime, cstime (17).
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return 0, 0, fmt.Errorf("/proc/%s/stat: %d fields", pid, len(f)+2)
	}
	var t [4]float64
	for k := range t {
		v, err := strconv.ParseUint(f[11+k], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%s/stat: field %d: %w", pid, 14+k, err)
		}
		t[k] = float64(v) / clockTicks
	}
	return t[0] + t[1], t[2] + t[3], nil
}

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
		fmt.Fprintf(bw, "### %s, %d ranks, %s\n\n", op, first.Ranks, LinksText(first.RateBits, first.PeakRateBits, first.PriorityQueues))
		fmt.Fprintln(bw, "| Algorithm | Size | Avg (µs) | Min (µs) | Max (µs) | S/B bound (µs) | Avg / bound | Iters | CPU ranks (s) | CPU switch (s) | CPU per call (µs) | Steal (s) |")
		fmt.Fprintln(bw, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
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
			fmt.Fprintf(bw, "| %s | %s | %.1f | %.1f | %.1f | %s | %s | %d | %.2f | %.2f | %.0f | %s |\n",
				r.Algo, FormatSize(r.Size), r.AvgUS, r.MinUS, r.MaxUS, bound, ratio, r.Iters, r.CPURanksS, r.CPUSwitchS, r.CPUPerCallUS, steal)
		}
	}
	if len(rows) > 0 {
		fmt.Fprintln(bw)
		fmt.Fprintln(bw, "CPU is user+system time of one `ndma bench coll` job per row: all ranks summed, and the switch daemon; "+
			"it includes process start, joining, warm-up and the barrier before each call. CPU per call divides by warm-up + iterations. "+
			"Steal is the CPU time the hypervisor gave other tenants of the host during the job, all CPUs together (/proc/stat; – where not reported): "+
			"on a shared virtual machine it marks rows slowed by neighbours.")
		for _, r := range rows {
			if IsMPI(coll.Algo(r.Algo)) {
				fmt.Fprintln(bw)
				fmt.Fprintln(bw, "Rows `mpi` are Open MPI on the same hosts and links: bench/mpi/osu_coll.c (the same measurement as bench coll) "+
					"started by mpirun, one rank per host, TCP BTL, mpi_yield_when_idle (the ranks share the cores), Open MPI's own choice of algorithm; "+
					"their CPU includes mpirun and orted. `mpi-tuned-NAME`: the same with Open MPI's tuned algorithm NAME forced; "+
					"`mpi-ndma`: the same program with the MPI interposition library preloaded (collectives through the switch); "+
					"`mpi-ndma-declined`: preloaded but declining every call (Open MPI's own, after the library's checks).")
				break
			}
		}
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
