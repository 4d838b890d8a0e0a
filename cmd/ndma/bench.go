package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/ndma/ndma/bench"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
)

// benchCmd groups the benchmarks.
var benchCmd = &cobra.Command{
	Use:   "bench",
	Short: "Benchmarks: one-sided operations, collectives, the memory pool and its applications, each against a baseline",
	Long: `bench measures NDMA, each figure beside a baseline measured in the same run:

  rw     one-sided READ/WRITE/CAS/FetchAdd latency and READ/WRITE bandwidth
         against a memory node (in-process, or ndma memd via --server),
         against UDP ping-pong and a kernel TCP stream; --sim for virtual
         time on a simulated lossy network
  coll   collective latency per algorithm, in-network (through a switch)
         and host-based, ranks in one process, one per process under a
         launcher (mpirun, ndma testbed run), or on the simulated network
  pool   memory pool latency (ReadAt against a direct READ) and striped
         against one-node bandwidth, in-process, as processes, or against a
         running switch (--switch, with --token or --token-file)
  suite  collectives on a testbed of namespaces and real processes (Linux,
         root), with CPU use, a Markdown report and plots; optionally
         against Open MPI
  vol    replicated volume I/O (random and sequential, at each queue depth)
         with multicast writes and anycast reads against a gateway that
         forwards every I/O, in-process or one client per testbed host
  switch the switch alone: reduced and replicated bytes per second per
         core of one switch process, against a raw UDP loop and memcpy
  kv     the key-value store: GET/SET mixes through its Go client and its
         Redis front end against redis-server, with CPU per operation of
         every process
  mq     the message queue: fan-out and many producers through its Go
         client and its Kafka front end against Redis Streams and NATS
         JetStream, with CPU per delivered record of every process

Results print as a table, or as JSON Lines with --json.`,
	Example: `  ndma bench rw --tests latency --sizes 8:4K
  ndma bench coll --op allreduce --algo all --ranks 8
  ndma bench pool --nodes 4 --tests bandwidth
  sudo ndma bench suite --hosts 8 --rate 1gbit --out bench-suite`,
}

// rwFlags are the flags of ndma bench rw.
type rwFlags struct {
	cred                                  credentialFlag
	insecure                              bool
	server, key, regionSize, sizes, tests string
	iters, warmup, window, mtu            int
	json                                  bool
	sim                                   bool
	linkRate                              string
	linkLatency                           time.Duration
	loss                                  float64
	busyPoll                              time.Duration
	seed                                  int64
}

func newBenchRWCmd() *cobra.Command {
	var f rwFlags
	cmd := &cobra.Command{
		Use:   "rw",
		Short: "OSU-style READ/WRITE/CAS/FetchAdd latency and READ/WRITE bandwidth",
		Long: `Measures one-sided operations against a memory node: latency (p50 and p99,
one operation in flight) of READ and WRITE per size and of CAS and FetchAdd,
and goodput of WRITE and READ with --window operations in flight. Baselines
measured in the same run — UDP ping-pong for latency, one kernel TCP stream
for bandwidth, both over loopback — give each NDMA row its ratio.

By default the memory node runs in-process on loopback; --server and --key
name an external one (ndma memd) instead, reached under --credential (a
client credential: it seals, as the node does) or, for a node started with
--insecure, with --insecure. The run overwrites the region.

With --sim, WRITE goodput is measured on the simulated network in virtual
time over links of --link-rate and --link-latency; with --loss P each size
runs lossless and with loss P, and the lossy row shows its ratio:

  ndma bench rw --sim --loss 0.01 --sizes 1M`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBenchRW(cmd, &f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.server, "server", "", "UDP `address` (host:port) of an external memory node (default: start one in-process on loopback)")
	fl.StringVar(&f.key, "key", "", "region key at --server, in hex")
	f.cred.register(fl, "of role client, for a --server that seals")
	fl.BoolVar(&f.insecure, "insecure", false, "with --server: do not seal, for a memory node started with --insecure")
	fl.StringVar(&f.regionSize, "region-size", "64M", "region size: allocated in-process, or the size of --key's region at --server")
	fl.StringVar(&f.sizes, "sizes", "", "sizes: list and ranges of powers of two, e.g. 8:64K or 4K,1M (default 8:64K for latency, 4K:16M for bandwidth)")
	fl.StringVar(&f.tests, "tests", "all", "tests to run: latency, bandwidth or all (comma-separated)")
	fl.IntVar(&f.iters, "iters", 0, "measured operations per size (default: by size, 1000 for small latency sizes)")
	fl.IntVar(&f.warmup, "warmup", 0, "unmeasured operations before each latency measurement (default: a tenth of --iters, at least 10)")
	fl.IntVar(&f.window, "window", bench.DefaultWindow, "operations in flight in the bandwidth test")
	fl.IntVar(&f.mtu, "mtu", 0, fmt.Sprintf("transport MTU in bytes (default %d on loopback, %d with --sim)", bench.DefaultMTU, bench.DefaultSimMTU))
	fl.DurationVar(&f.busyPoll, "busy-poll", 0, "poll the sockets this long before sleeping, e.g. 50us (Linux; not with --sim)")
	fl.BoolVar(&f.json, "json", false, "print JSON Lines, one object per measurement")
	fl.BoolVar(&f.sim, "sim", false, "measure WRITE goodput on the simulated network (virtual time)")
	fl.StringVar(&f.linkRate, "link-rate", "10gbit", "with --sim: link rate, e.g. 100mbit, 10gbit")
	fl.DurationVar(&f.linkLatency, "link-latency", 5*time.Microsecond, "with --sim: one-way latency of each access link")
	fl.Float64Var(&f.loss, "loss", 0, "with --sim: random loss probability per datagram, e.g. 0.01")
	fl.Int64Var(&f.seed, "seed", bench.DefaultSeed, "with --sim: random seed of the simulated network")
	return cmd
}

func init() {
	benchCmd.AddCommand(newBenchRWCmd())
	rootCmd.AddCommand(benchCmd)
}

// checkExclusive fails if any of names was set on the command line.
func checkExclusive(cmd *cobra.Command, why string, names ...string) error {
	for _, n := range names {
		if cmd.Flags().Changed(n) {
			return fmt.Errorf("--%s cannot be used %s", n, why)
		}
	}
	return nil
}

func runBenchRW(cmd *cobra.Command, f *rwFlags) error {
	var sizes []int
	if f.sizes != "" {
		s, err := bench.ParseSizes(f.sizes)
		if err != nil {
			return err
		}
		sizes = s
	}
	if f.iters < 0 || f.warmup < 0 {
		return fmt.Errorf("--iters and --warmup must not be negative")
	}
	if f.window < 1 || f.window > bench.MaxWindow {
		return fmt.Errorf("--window %d: want 1 to %d", f.window, bench.MaxWindow)
	}
	out := cmd.OutOrStdout()
	var emit func(bench.Result) error
	if f.json {
		emit = bench.NewJSONWriter(out).Write
	}
	prog := newProgress(cmd.ErrOrStderr(), f.json)
	defer prog.finish()

	if f.sim {
		if err := checkExclusive(cmd, "with --sim", "server", "key", "region-size", "tests", "warmup", "busy-poll"); err != nil {
			return err
		}
		rate, err := bench.ParseRate(f.linkRate)
		if err != nil {
			return err
		}
		if f.linkLatency <= 0 {
			return fmt.Errorf("--link-latency %v: want a positive duration", f.linkLatency)
		}
		if !(f.loss >= 0 && f.loss < 1) {
			return fmt.Errorf("--loss %v: want a probability in [0, 1)", f.loss)
		}
		if f.seed == 0 {
			return fmt.Errorf("--seed 0: want a non-zero seed")
		}
		cfg := bench.SimConfig{
			Sizes: sizes, Iters: f.iters, Window: f.window, MTU: f.mtu,
			Rate: rate, Latency: f.linkLatency, Loss: f.loss, Seed: f.seed, Progress: prog.callback(),
		}
		if emit == nil {
			mtu := orDefault(f.mtu, bench.DefaultSimMTU)
			emit = bench.NewTableWriter(out, fmt.Sprintf("%s links, %v latency, MTU %d, seed %d", bench.FormatRate(rate), f.linkLatency, mtu, f.seed)).Write
		}
		return bench.RunSim(cmd.Context(), cfg, prog.wrap(emit))
	}

	if err := checkExclusive(cmd, "without --sim", "link-rate", "link-latency", "loss", "seed"); err != nil {
		return err
	}
	if f.busyPoll < 0 || f.busyPoll > netio.MaxBusyPoll {
		return fmt.Errorf("--busy-poll: %v: want 0 to %v", f.busyPoll, netio.MaxBusyPoll)
	}
	tests, err := bench.ParseTests(f.tests)
	if err != nil {
		return err
	}
	region, err := bench.ParseSize(f.regionSize)
	if err != nil {
		return fmt.Errorf("--region-size: %w", err)
	}
	var key uint64
	switch {
	case f.server != "" && f.key == "":
		return fmt.Errorf("--server needs --key, the region key at the memory node")
	case f.server == "" && f.key != "":
		return fmt.Errorf("--key needs --server")
	case f.key != "":
		if key, err = bench.ParseKey(f.key); err != nil {
			return err
		}
		if f.server, err = resolvePeer("--server", f.server); err != nil {
			return err
		}
	}
	cfg := bench.Config{
		Server: f.server, Key: key, RegionSize: region, Tests: tests, Sizes: sizes,
		Iters: f.iters, Warmup: f.warmup, Window: f.window, MTU: f.mtu, BusyPoll: f.busyPoll, Progress: prog.callback(),
	}
	switch {
	case f.server == "" && (f.insecure || f.cred.fs.Changed("credential")):
		return errors.New("--credential and --insecure: only with --server (the memory node this benchmark starts does not seal)")
	case f.server != "" && f.insecure:
		if f.cred.fs.Changed("credential") || os.Getenv(credentialEnv) != "" {
			return errors.New("--insecure and a credential: --insecure turns sealing off; give one of them")
		}
		fmt.Fprintln(cmd.ErrOrStderr(), "ndma: warning: "+insecureWarning(false))
	case f.server != "":
		id, err := f.cred.load(os.Getenv, secure.RoleClient, secure.RoleMember)
		if err != nil {
			return err
		}
		if id == nil {
			return noCredential("client-0.cred", []secure.Role{secure.RoleClient})
		}
		cfg.Security, cfg.SecurityOptions = id, sealOptions
	}
	if emit == nil {
		where := "in-process memory node on loopback"
		if f.server != "" {
			where = "memory node " + f.server
		}
		emit = bench.NewTableWriter(out, fmt.Sprintf("%s, MTU %d", where, orDefault(f.mtu, bench.DefaultMTU))).Write
	}
	return bench.Run(cmd.Context(), cfg, prog.wrap(emit))
}

// orDefault returns v, or def if v is zero.
func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// progress draws a progress bar on a terminal's stderr between the rows
// a run prints. The zero value (no terminal) draws nothing.
type progress struct {
	w   *os.File
	bar *progressbar.ProgressBar
}

// newProgress returns a progress that draws on w when w is a terminal and
// quiet is false.
func newProgress(w io.Writer, quiet bool) *progress {
	f, ok := w.(*os.File)
	if quiet || !ok || !isTerminal(f) {
		return &progress{}
	}
	return &progress{w: f}
}

// callback returns the bench Progress callback, nil when nothing is drawn.
func (p *progress) callback() func(done, total int) {
	if p.w == nil {
		return nil
	}
	return func(done, total int) {
		if p.bar == nil {
			p.bar = progressbar.NewOptions(total,
				progressbar.OptionSetWriter(p.w),
				progressbar.OptionSetDescription("measuring"),
				progressbar.OptionShowCount(),
				progressbar.OptionClearOnFinish(),
				progressbar.OptionSetPredictTime(false),
			)
		}
		_ = p.bar.Set(done)
	}
}

// wrap returns emit preceded by clearing the bar, so rows printed to the
// same terminal do not run into it.
func (p *progress) wrap(emit func(bench.Result) error) func(bench.Result) error {
	if p.w == nil {
		return emit
	}
	return func(r bench.Result) error {
		if p.bar != nil {
			_ = p.bar.Clear()
		}
		return emit(r)
	}
}

// finish removes the bar.
func (p *progress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
