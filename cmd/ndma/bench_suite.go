package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ndma/ndma/bench"
	"github.com/ndma/ndma/coll"
	"github.com/ndma/ndma/testbed"
	"github.com/ndma/ndma/testbed/fidelity"
)

// Files a suite writes into --out.
const (
	suiteJSONFile     = "suite.jsonl"
	suiteMarkdownFile = "suite.md"
)

type suiteFlags struct {
	hosts, mtu, iters, gmp, ppn int
	switches                    int
	leaves                      int
	uplinkRate                  string
	repeat                      int
	rate, ops, sizes, out, pf   string
	keep, json, mpi             bool
	from, peakRate              string
	prio                        bool
	mpiNDMA, algos              string
	mpiTuned, gloo              bool
	sync                        string
	fidelityCPU                 float64
	ddp, ddpScript, ddpAlgos    string
	ddpHidden                   string
	ddpSteps, ddpBatch          int
}

func newBenchSuiteCmd() *cobra.Command {
	var f suiteFlags
	cmd := &cobra.Command{
		Use:   "suite",
		Short: "Collectives on a testbed of real processes: latency, CPU, Markdown and plots (Linux, root)",
		Long: `suite builds a testbed (as ndma testbed up: --hosts host namespaces, every
link limited to --rate, --mtu), and runs on it, one rank per host (--ppn
K: K ranks in each host namespace), ` + "`ndma bench coll --json`" + ` for each
operation of --ops with every algorithm, one job per size of --sizes
(Barrier: one job per algorithm). With --ppn the ranks of a host run
NDMA's collectives through shared memory, one leader per host on the
network (each row's "hosts" says so; NDMA_HIERARCHY=off: every rank on
the network);
the Open MPI rows run K ranks per host too, a host's ranks over Open
MPI's shared memory (btl self,vader,tcp). Around each job it
reads the user+system CPU time of the rank processes (summed) and of the
switch daemon from /proc, so each row carries the CPU of the job that
measured it: process start, joining, warm-up and the barrier between calls
included; "CPU per call" divides it by warm-up + iterations calls.

` + fidelityHelp + `
Each row carries its verdict and why; the testbed targets are judged on
faithful rows only, and a target whose rows were not faithful is shown as
not judged, with their verdicts; but a CPU target (the CPU of NDMA's
processes against a peer's in the same suite) is judged on its rows
whatever their verdicts, naming those not faithful.

Into --out it writes suite.jsonl (JSON Lines: bench coll's row plus
warmup, rate_bits, bound_us, cpu_ranks_s, cpu_switch_s, cpu_s,
cpu_per_call_us, cpu_per_mib_rank_s and cpu_per_mib_switch_s (one rank's
and the switch's CPU per MiB of each rank's message),
cpu_per_mib_each_switch_s (with --switches, each switch process's) and
fidelity (the monitor's verdict and evidence)), suite.md (a Markdown table per
operation, with the latency over the S/B bound, size*8/rate, the CPU and
each row's verdict, the rows not faithful with why, a table of CPU per
MiB and per call for each algorithm, then the testbed targets the rows
allow, each marked met, missed or not judged) and, per operation,
<op>-latency.png (log-log, with the bound) and <op>-cpu.png. Standard
output gets the Markdown, or with --json the JSON Lines.

With --mpi every operation is also measured with Open MPI (rows "mpi"):
a small OSU-style C program shipped in the binary, built with mpicc and
started by mpirun in the first host's namespace, one rank per host over
the TCP BTL, Open MPI choosing its algorithms. --mpi-tuned adds a row per
algorithm Open MPI's tuned component can be forced to ("mpi-tuned-ring"...,
from ompi_info); --mpi-ndma LIB runs the same program with the MPI
interposition library LIB (make libndma: build/libndma_mpi.so) preloaded,
its collectives through the switch (rows "mpi-ndma") and declining every
call (rows "mpi-ndma-declined": the library's overhead on Open MPI's own
path). --algos keeps the rows of the algorithms named.

With --switches K the testbed runs K switch processes (ndma testbed up
--switches) and NDMA's in-network collectives are sharded over them, one
stripe of every message each: the switch CPU is theirs together, and
each one's CPU per MiB is reported too (in suite.md in parentheses), to
see the switches' CPU per byte fall with K.

With --ddp DIR it also trains (rows "ddp"): examples/train/train.py, an
MLP on MNIST under PyTorch's DistributedDataParallel, one rank per host,
for --ddp-steps steps once per algorithm of --ddp-algos (gloo: Gloo's own
allreduce; innet: the gradients through the switch; ring: NDMA's host
ring), DIR being the MNIST export of examples/train/export. Each row has
the step time, samples per second, and the CPU per step of the ranks (in
their training loop) and the switch; the targets compare in-network DDP
with Gloo's. It runs the checkout's trainer (--ddp-script), whose NDMA
backends need build/libndma.so (make libndma), Debian's python3-torch and
python3-numpy. --ops ddp runs the training rows alone.

With --from it measures nothing: it merges suite.jsonl files of earlier
runs and writes suite.md and the plots again into --out.

It refuses when a testbed with --prefix exists, and takes its testbed down
at the end, also on error or Ctrl-C, unless --keep.

` + rateAutoHelp + ` Every job of the suite, NDMA's and the peers',
then runs at that one rate.`,
		Example: `  sudo ndma bench suite --out results
  sudo ndma bench suite --hosts 4 --ops bcast,allreduce --sizes 8,64K,1M,16M --iters 3 --out /tmp/suite
  sudo ndma bench suite --mpi --ops allreduce --out /tmp/vs-mpi
  sudo ndma bench suite --hosts 2 --ppn 4 --mpi --ops allreduce,bcast --out /tmp/ppn4
  sudo ndma bench suite --hosts 4 --switches 2 --ops allreduce,bcast --algos innet --out /tmp/sharded
  sudo ndma bench suite --mpi --mpi-ndma build/libndma_mpi.so --algos mpi,mpi-ndma --ops bcast --out /tmp/mpi-ndma
  go run ./examples/train/export --out /tmp/mnist && make libndma
  sudo ndma bench suite --ops ddp --ddp /tmp/mnist --out /tmp/ddp`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBenchSuite(cmd, &f) },
	}
	fl := cmd.Flags()
	fl.IntVar(&f.hosts, "hosts", 8, "host namespaces, --ppn ranks each")
	fl.IntVar(&f.switches, "switches", 1, fmt.Sprintf("switch processes to shard the in-network collectives over, 1 to %d (see ndma testbed up)", testbed.MaxSwitches))
	fl.IntVar(&f.leaves, "leaves", 0, "make the testbed a leaf-spine tree of a root and this many leaf switches, the hosts in blocks (see ndma testbed up --leaves; default: one switch)")
	fl.StringVar(&f.uplinkRate, "uplink-rate", "", "rate of each leaf's uplink to the spine, with --leaves (default: --rate)")
	fl.IntVar(&f.ppn, "ppn", 1, fmt.Sprintf("ranks in each host namespace, 1 to %d (NDMA's and Open MPI's rows alike)", testbed.MaxPerHost))
	fl.StringVar(&f.rate, "rate", testbed.DefaultRate, "rate of every link, each direction, in tc's syntax: 100mbit, 1gbit; auto: the highest rate at which the heaviest jobs are faithful on this machine (see above)")
	fl.BoolVar(&f.prio, "priority-queues", false, "give every link's queue priority bands that send NDMA's ACKs ahead of queued data (see ndma testbed up)")
	fl.StringVar(&f.peakRate, "peak-rate", "", "fastest rate at which frames leave a link back to back, above --rate, or none (default: twice --rate; see ndma testbed up)")
	fl.IntVar(&f.mtu, "mtu", testbed.DefaultMTU, "MTU of every interface, in bytes; the ranks and switch use datagrams of MTU-28")
	fl.StringVar(&f.ops, "ops", "bcast,reduce,allreduce,allgather,barrier", "collectives, comma-separated")
	fl.StringVar(&f.sizes, "sizes", "8:16M", "message sizes per rank: list and ranges of powers of two, e.g. 8:16M or 4K,1M")
	fl.IntVar(&f.repeat, "repeat", 1, "run every job this many times, in rounds, and keep each job's median run, among its faithful runs when it has any (the rows list every run's avg_us and verdict)")
	fl.IntVar(&f.gmp, "gomaxprocs", 0, "GOMAXPROCS of the testbed's daemons and ranks: 0 = automatic (1 when the switch, hosts and memory nodes outnumber this machine's CPUs), -1 = Go's default")
	fl.IntVar(&f.iters, "iters", 0, "measured iterations per size (default: by size, as bench coll)")
	fl.StringVar(&f.out, "out", "bench-suite", "`directory` for suite.jsonl, suite.md and the PNG plots (created if missing)")
	fl.BoolVar(&f.keep, "keep", false, "leave the testbed up afterwards (remove it with ndma testbed down --prefix P)")
	fl.StringVar(&f.pf, "prefix", "ndmasuite", "name prefix of the suite's testbed; it must not be in use")
	fl.BoolVar(&f.json, "json", false, "print JSON Lines instead of Markdown on standard output, and no progress bar")
	fl.StringVar(&f.from, "from", "", "render suite.md and the plots into --out from these comma-separated suite.jsonl `files` (merged in order; a later row replaces an earlier one of the same op, algo and size; all of one setup: ranks, ranks per host and link rate), without a testbed")
	fl.BoolVar(&f.mpi, "mpi", false, "also measure each operation with Open MPI (algo \"mpi\"; needs mpicc and mpirun)")
	fl.BoolVar(&f.gloo, "gloo", false, "also measure bcast, allreduce, reduce, allgather and barrier with PyTorch's Gloo backend (algo \"gloo\"; needs python3-torch): one Python process per host, timed like NDMA's ranks")
	fl.BoolVar(&f.mpiTuned, "mpi-tuned", false, "also measure each operation with every algorithm Open MPI's tuned component can be forced to (algos \"mpi-tuned-NAME\")")
	fl.StringVar(&f.mpiNDMA, "mpi-ndma", "", "also measure each operation with Open MPI and this MPI interposition `library` preloaded (build/libndma_mpi.so; algos \"mpi-ndma\", \"mpi-ndma-declined\")")
	fl.StringVar(&f.sync, "sync-algo", string(bench.DefaultSync), "algorithm of the untimed barrier before every NDMA call: recursive_doubling, innet, or auto (as bench coll --sync-algo)")
	fl.Float64Var(&f.fidelityCPU, "fidelity-cpu", fidelity.DefaultMaxCPUShare, "largest share of this machine's CPU the testbed may use for a job to be faithful, from 0 to 1 (see above)")
	fl.StringVar(&f.ddp, "ddp", "", "also train with DistributedDataParallel (rows \"ddp\"), on the MNIST export in this `directory` (go run ./examples/train/export --out DIR)")
	fl.StringVar(&f.ddpScript, "ddp-script", "examples/train/train.py", "the trainer the ddp rows run, in a checkout with build/libndma.so")
	fl.StringVar(&f.ddpAlgos, "ddp-algos", "gloo,innet", "the ddp rows: gloo, innet, ring, comma-separated")
	fl.IntVar(&f.ddpSteps, "ddp-steps", 30, "training steps each ddp row measures")
	fl.IntVar(&f.ddpBatch, "ddp-batch", 16, "samples per rank per step in the ddp rows")
	fl.StringVar(&f.ddpHidden, "ddp-hidden", "2048,1024", "hidden layer widths of the ddp rows' MLP")
	fl.StringVar(&f.algos, "algos", "", "keep only these algorithms' rows, comma-separated (NDMA's, mpi, mpi-ndma, mpi-ndma-declined, mpi-tuned-NAME, gloo); default: all")
	return cmd
}

func init() { benchCmd.AddCommand(newBenchSuiteCmd()) }

func runBenchSuite(cmd *cobra.Command, f *suiteFlags) error {
	if f.from != "" {
		return renderSuite(cmd, f)
	}
	if f.hosts <= 0 {
		return fmt.Errorf("--hosts: %d: want 1 or more", f.hosts)
	}
	if f.mtu <= 0 {
		return fmt.Errorf("--mtu: %d bytes: want %d to %d", f.mtu, testbed.MinMTU, testbed.MaxMTU)
	}
	if f.ppn < 1 || f.ppn > testbed.MaxPerHost {
		return fmt.Errorf("--ppn: %d: want 1 to %d ranks per host", f.ppn, testbed.MaxPerHost)
	}
	if f.repeat < 1 {
		return fmt.Errorf("--repeat: %d: want at least 1", f.repeat)
	}
	if f.iters < 0 {
		return fmt.Errorf("--iters: %d: must not be negative", f.iters)
	}
	var ops []coll.Operation
	for _, s := range strings.Split(f.ops, ",") {
		op := coll.Operation(strings.ToLower(strings.TrimSpace(s)))
		if _, ok := coll.Algorithms[op]; !ok && op != bench.OpDDP {
			return fmt.Errorf("--ops: unknown collective %q", s)
		}
		if op == bench.OpDDP && f.ddp == "" {
			return errors.New("--ops ddp: the training rows need --ddp DIR (the MNIST export of go run ./examples/train/export)")
		}
		ops = append(ops, op)
	}
	var ddp *bench.DDPConfig
	if f.ddp != "" {
		ddp = &bench.DDPConfig{Script: f.ddpScript, Data: f.ddp, Steps: f.ddpSteps, Batch: f.ddpBatch, Hidden: f.ddpHidden}
		if f.ddpSteps < 1 || f.ddpBatch < 1 {
			return fmt.Errorf("--ddp-steps %d, --ddp-batch %d: want both positive", f.ddpSteps, f.ddpBatch)
		}
		for _, s := range strings.Split(f.ddpAlgos, ",") {
			a := coll.Algo(strings.ToLower(strings.TrimSpace(s)))
			if _, ok := bench.DDPAlgos[a]; !ok {
				return fmt.Errorf("--ddp-algos: %q: want gloo, innet or ring", s)
			}
			ddp.Algos = append(ddp.Algos, a)
		}
	} else {
		for _, name := range []string{"ddp-script", "ddp-algos", "ddp-steps", "ddp-batch", "ddp-hidden"} {
			if cmd.Flags().Changed(name) {
				return fmt.Errorf("--%s: only with --ddp", name)
			}
		}
	}
	sizes, err := bench.ParseSizes(f.sizes)
	if err != nil {
		return fmt.Errorf("--sizes: %w", err)
	}
	var algos []coll.Algo
	if f.algos != "" {
		for _, s := range strings.Split(f.algos, ",") {
			a := coll.Algo(strings.ToLower(strings.TrimSpace(s)))
			if !bench.IsMPI(a) && a != bench.AlgoGloo {
				if _, err := coll.ParseAlgo(string(a)); err != nil {
					return fmt.Errorf("--algos: %w", err)
				}
			}
			algos = append(algos, a)
		}
	}
	sync, err := parseSyncAlgo(f.sync)
	if err != nil {
		return err
	}
	rule, err := fidelityRule(f.fidelityCPU)
	if err != nil {
		return err
	}
	if f.out == "" {
		return errors.New("--out: empty")
	}
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	ctx, stop := signalContext(cmd)
	defer stop()

	stdout := cmd.OutOrStdout()
	prog := newProgress(cmd.ErrOrStderr(), f.json)
	cfg := bench.SuiteConfig{
		Testbed:  testbed.Config{Prefix: f.pf, Hosts: f.hosts, Switches: f.switches, Leaves: f.leaves, UplinkRate: f.uplinkRate, Rate: f.rate, PeakRate: f.peakRate, MTU: f.mtu, GoMaxProcs: f.gmp, PriorityQueues: f.prio},
		Ops:      ops,
		Sizes:    sizes,
		Iters:    f.iters,
		Repeat:   f.repeat,
		MPI:      f.mpi,
		MPINDMA:  f.mpiNDMA,
		MPITuned: f.mpiTuned,
		Gloo:     f.gloo,
		DDP:      ddp,
		Algos:    algos,
		Sync:     sync,
		Keep:     f.keep,
		PerHost:  f.ppn,
		Progress: prog.callback(),
		Fidelity: rule,
	}
	if isRateAuto(cfg.Testbed.Rate) {
		if cfg.Testbed, err = chooseRate(ctx, cfg.Testbed, rule, f.gloo, cmd.ErrOrStderr()); err != nil {
			return err
		}
	}
	if f.mpi || f.mpiTuned || f.mpiNDMA != "" {
		v, err := bench.MPIVersion(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "mpi rows: %s\n", v)
	}
	if f.json {
		cfg.Row = func(r bench.SuiteRow) { _ = bench.WriteSuiteJSON(stdout, []bench.SuiteRow{r}) }
	}
	skipped := 0
	cfg.Skipped = func(job string, err error) {
		skipped++
		fmt.Fprintf(cmd.ErrOrStderr(), "\nndma: bench suite: %s failed %d times, row left out: %v\n", job, bench.MPITries, firstLine(err.Error()))
	}
	rows, runErr := bench.RunSuite(ctx, cfg)
	prog.finish()
	if runErr != nil {
		runErr = flagError(runErr)
	}
	if len(rows) == 0 {
		return runErr
	}
	// What was measured is written even when the run failed halfway.
	if err := writeSuiteFiles(f.out, rows); err != nil {
		return errors.Join(runErr, err)
	}
	if !f.json {
		if err := bench.WriteSuiteMarkdown(stdout, rows); err != nil {
			return errors.Join(runErr, err)
		}
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "wrote %d rows to %s\n", len(rows), f.out)
	if skipped > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "%d MPI rows left out (see above)\n", skipped)
	}
	if f.keep && runErr == nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "testbed %s left up: ndma testbed down --prefix %s\n", f.pf, f.pf)
	}
	return runErr
}

// writeSuiteFiles writes the JSON Lines, the Markdown and the plots of
// rows into dir.
func writeSuiteFiles(dir string, rows []bench.SuiteRow) error {
	for _, w := range []struct {
		name  string
		write func(io.Writer, []bench.SuiteRow) error
	}{{suiteJSONFile, bench.WriteSuiteJSON}, {suiteMarkdownFile, bench.WriteSuiteMarkdown}} {
		fh, err := os.Create(filepath.Join(dir, w.name))
		if err != nil {
			return err
		}
		err = w.write(fh, rows)
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	_, err := bench.WriteSuitePlots(dir, rows)
	return err
}

// firstLine is s up to its first line break.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// renderSuite is --from: merge earlier runs' rows and write the files.
func renderSuite(cmd *cobra.Command, f *suiteFlags) error {
	for _, name := range []string{"hosts", "switches", "leaves", "uplink-rate", "ppn", "rate", "priority-queues", "peak-rate", "mtu", "ops", "sizes", "iters", "keep", "prefix", "mpi", "mpi-tuned", "mpi-ndma", "gloo", "sync-algo", "algos", "repeat", "gomaxprocs", "fidelity-cpu", "ddp", "ddp-script", "ddp-algos", "ddp-steps", "ddp-batch", "ddp-hidden"} {
		if cmd.Flags().Changed(name) {
			return fmt.Errorf("--%s cannot be used with --from (it renders rows already measured)", name)
		}
	}
	type key struct {
		op, algo string
		size     int
	}
	var rows []bench.SuiteRow
	at := map[key]int{}
	for _, path := range strings.Split(f.from, ",") {
		fh, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("--from: %w", err)
		}
		rs, err := bench.ReadSuiteJSON(fh)
		fh.Close()
		if err != nil {
			return fmt.Errorf("--from %s: %w", path, err)
		}
		for _, r := range rs {
			// One setup per rendering: the tables, plots and figures are
			// per operation, and a 4-rank row must not replace (or sit
			// in one table with) an 8-rank one.
			if len(rows) > 0 && (r.Ranks != rows[0].Ranks || r.PerHost != rows[0].PerHost || r.RateBits != rows[0].RateBits || r.PeakRateBits != rows[0].PeakRateBits || r.PriorityQueues != rows[0].PriorityQueues || r.Leaves != rows[0].Leaves || r.UplinkRateBits != rows[0].UplinkRateBits) {
				return fmt.Errorf("--from %s: rows of %s on %s and of %s on %s: render one setup (ranks, links) at a time",
					path, bench.RanksText(rows[0]), bench.LinksText(rows[0].RateBits, rows[0].PeakRateBits, rows[0].PriorityQueues), bench.RanksText(r), bench.LinksText(r.RateBits, r.PeakRateBits, r.PriorityQueues))
			}
			k := key{r.Op, r.Algo, r.Size}
			if i, ok := at[k]; ok {
				rows[i] = r
				continue
			}
			at[k] = len(rows)
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return errors.New("--from: no rows")
	}
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	if err := writeSuiteFiles(f.out, rows); err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if f.json {
		return bench.WriteSuiteJSON(out, rows)
	}
	if err := bench.WriteSuiteMarkdown(out, rows); err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "wrote %d rows to %s\n", len(rows), f.out)
	return nil
}
