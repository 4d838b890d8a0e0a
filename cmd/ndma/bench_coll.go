package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ndma/ndma/bench"
	"github.com/ndma/ndma/coll"
	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire/ctrl"
)

type collFlags struct {
	op, algo, sizes string
	sync            string
	ranks           int
	switches        int
	iters, warmup   int
	mtu             int
	listen          string
	json            bool
	// --sim and its link model
	sim         bool
	linkRate    string
	linkLatency time.Duration
	loss        float64
	seed        int64
	leaves      int
	prof        profileFlag
}

func newBenchCollCmd() *cobra.Command {
	var f collFlags
	cmd := &cobra.Command{
		Use:   "coll",
		Short: "OSU-style collective latency per algorithm (in-network and host-based)",
		Long: `Runs --ranks ranks in this process on loopback, each with its own endpoint,
plus an in-process forwarding node for the in-network algorithm — or, when
started by a launcher (NDMA_RANK/NDMA_SIZE/NDMA_SWITCH, OMPI_COMM_WORLD_*,
PMI_*, SLURM_*, torchrun's RANK/WORLD_SIZE), one rank per process meeting at NDMA_SWITCH, rank 0
printing — and
measures one collective per algorithm over --sizes (bytes per rank):
warm-up, then --iters iterations with a barrier (--sync-algo, untimed)
before each, each rank timing its own calls; Avg/Min/Max are over ranks'
averages, as OSU reports them.

Algorithms: innet, binomial, chain, scatter_allgather, ring,
recursive_doubling, rabenseifner, direct, auto (the tuner), or all.

With --sim the ranks and the switch run on the simulated network instead
(netio/simnet: every rank on its own link of --link-rate and
--link-latency, the switch a crossbar, --loss on every rank's up link) and
latencies are virtual time: what the links and protocols give, whatever
this machine's speed or load. Same seed, same figures (to within the
interleaving of events at one virtual instant).

With --switches K (K > 1) the in-network collectives are sharded over K
in-process forwarding nodes: each rank has an endpoint per switch and
every message is cut into K stripes, one per switch (coll.Config.Switches;
under a launcher, NDMA_SWITCHES does this instead). Each row then ends
with the datagrams every switch received over the row's calls, from the
switches' own counters ("Pkts in per switch"): how the load was shared.
With --sim a rank's K endpoints share its link rate evenly.

With --sim --leaves L the switch is a tree: a root and L leaf switches
below it (fabric's --parent and --child), the ranks in blocks, a block
per leaf; the switches are crossbars, so the ranks' links bound the
figures as on one switch, and the tree adds its hops and its per-level
merging and reduction.

  ndma bench coll --op allreduce --algo all --ranks 8 --sizes 8:1M
  ndma bench coll --op bcast --algo innet,chain --json
  ndma bench coll --sim --op bcast --algo all --sizes 8:16M
  ndma bench coll --sim --op allreduce --algo innet --switches 3 --sizes 64K:16M
  ndma bench coll --sim --op allreduce --algo innet,ring --ranks 256 --leaves 16 --sizes 1M`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.prof.profiled(func() error { return runBenchColl(cmd, &f) })
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.op, "op", "allreduce", "collective: barrier, bcast, reduce, allreduce, allgather, reducescatter, gather, scatter, alltoall")
	fl.StringVar(&f.algo, "algo", "all", "algorithm(s), comma-separated, or all")
	fl.StringVar(&f.sync, "sync-algo", string(bench.DefaultSync), "algorithm of the untimed barrier before every call: recursive_doubling, innet, or auto (the communicator's choice: innet with a switch)")
	fl.IntVar(&f.ranks, "ranks", 8, "ranks, all in this process on loopback")
	fl.IntVar(&f.switches, "switches", 1, "in-process forwarding nodes to shard the in-network collectives over (at most 16; under a launcher: NDMA_SWITCHES)")
	fl.StringVar(&f.sizes, "sizes", "8:1M", "message sizes per rank: list and ranges of powers of two, e.g. 8:16M or 4K,1M")
	fl.IntVar(&f.iters, "iters", 0, "measured iterations per size (default: by size)")
	fl.IntVar(&f.warmup, "warmup", 0, "unmeasured iterations per size (default: a tenth of --iters, at least 2)")
	fl.IntVar(&f.mtu, "mtu", 9000, "transport MTU in bytes: the largest datagram sent (default under a launcher: $NDMA_MTU when set)")
	fl.StringVar(&f.listen, "listen", ":0", "under a launcher: this rank's UDP address")
	fl.BoolVar(&f.json, "json", false, "print JSON Lines: op, algo, ranks, size, avg_us, min_us, max_us, iters (and chosen, for auto)")
	fl.BoolVar(&f.sim, "sim", false, "run on the simulated network and report virtual time")
	fl.StringVar(&f.linkRate, "link-rate", "100mbit", "with --sim: each rank's link rate, e.g. 100mbit, 10gbit")
	fl.DurationVar(&f.linkLatency, "link-latency", 5*time.Microsecond, "with --sim: one-way latency of each link")
	fl.Float64Var(&f.loss, "loss", 0, "with --sim: probability that a datagram is lost, e.g. 0.01")
	fl.Int64Var(&f.seed, "seed", 1, "with --sim: seed of the simulated network and transports")
	fl.IntVar(&f.leaves, "leaves", 0, fmt.Sprintf("with --sim: make the switch a tree of a root and this many leaf switches, the ranks in blocks, one per leaf (1 to %d; default: one switch)", fabric.MaxChildren))
	f.prof.register(fl)
	return cmd
}

func init() { benchCmd.AddCommand(newBenchCollCmd()) }

func runBenchColl(cmd *cobra.Command, f *collFlags) error {
	op := coll.Operation(strings.ToLower(f.op))
	if _, ok := coll.Algorithms[op]; !ok {
		return fmt.Errorf("--op: unknown collective %q", f.op)
	}
	var algos []coll.Algo
	if f.algo == "all" {
		algos = append(algos, coll.Algorithms[op]...)
	} else {
		for _, s := range strings.Split(f.algo, ",") {
			a, err := coll.ParseAlgo(s)
			if err != nil {
				return fmt.Errorf("--algo: %w", err)
			}
			if !coll.Supported(op, a) {
				return fmt.Errorf("--algo: %s has no %s algorithm (it has %v)", op, a, coll.Algorithms[op])
			}
			algos = append(algos, a)
		}
	}
	sync, err := parseSyncAlgo(f.sync)
	if err != nil {
		return err
	}
	maxRanks := 256 // processes' worth of sockets and goroutines in one
	if f.sim {
		maxRanks = ctrl.MaxSize // virtual: only memory and this machine's time bound it
	}
	if f.ranks < 1 || f.ranks > maxRanks {
		return fmt.Errorf("--ranks: %d not in 1..%d", f.ranks, maxRanks)
	}
	if f.switches < 1 || f.switches > coll.MaxSwitches {
		return fmt.Errorf("--switches: %d not in 1..%d", f.switches, coll.MaxSwitches)
	}
	sizes, err := bench.ParseSizes(f.sizes)
	if err != nil {
		return fmt.Errorf("--sizes: %w", err)
	}
	if f.iters < 0 || f.warmup < 0 {
		return fmt.Errorf("--iters and --warmup must not be negative")
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	if f.sim {
		return runBenchCollSim(cmd, f, op, algos, sizes, sync)
	}
	if err := checkExclusive(cmd, "without --sim", "link-rate", "link-latency", "loss", "seed", "leaves"); err != nil {
		return err
	}
	// Under a launcher (NDMA_RANK..., OMPI_COMM_WORLD_*, PMI_*, SLURM_*)
	// this process is one rank; otherwise all ranks run here.
	var (
		w        *bench.CollWorld
		launched *coll.Communicator
	)
	l, lerr := coll.ParseEnv(os.LookupEnv)
	if lerr != nil && !errors.Is(lerr, coll.ErrNoLaunch) {
		return lerr // a launcher's variables, but not valid ones
	}
	if lerr == nil {
		if cmd.Flags().Changed("ranks") {
			return fmt.Errorf("--ranks: the launcher sets the ranks (%s says %d)", l.Source, l.Size)
		}
		if cmd.Flags().Changed("switches") {
			return fmt.Errorf("--switches: under a launcher the ranks meet at the switches NDMA_SWITCH or NDMA_SWITCHES names")
		}
		if l.MTU > 0 && !cmd.Flags().Changed("mtu") {
			f.mtu = l.MTU // the network's datagram size (ndma testbed run sets NDMA_MTU)
		}
		listen, err := resolveListen("--listen", f.listen)
		if err != nil {
			return err
		}
		// The rank seals every datagram under its member credential
		// (NDMA_CREDENTIAL, which ndma testbed run sets), unless
		// NDMA_INSECURE=1.
		opts, err := l.EndpointOptions()
		if err != nil {
			return err
		}
		ep, err := endpoint.Listen(listen, endpoint.Config{Transport: transport.Config{MTU: f.mtu}}, opts)
		if err != nil {
			return fmt.Errorf("--listen: %w", err)
		}
		defer ep.Close()
		if launched, err = coll.FromEnv(ctx, ep); err != nil {
			return err
		}
		if w := l.Warning(); w != "" && l.Rank == 0 {
			printWarn(cmd.ErrOrStderr())(w)
		}
		defer launched.Close(context.Background())
	} else {
		switches := 0
		for _, a := range algos {
			if a == coll.AlgoInNet || a == coll.AlgoAuto {
				switches = f.switches
			}
		}
		if w, err = bench.NewCollWorld(ctx, f.ranks, switches, f.mtu); err != nil {
			return err
		}
		defer w.Close()
	}
	cfg := bench.CollConfig{Op: op, Algos: algos, Ranks: f.ranks, Sizes: sizes, Iters: f.iters, Warmup: f.warmup, MTU: f.mtu, Sync: sync}
	where := "in one process, loopback"
	if f.switches > 1 {
		where += fmt.Sprintf(", in-network calls over %d switches", f.switches)
	}
	if launched != nil {
		where = "one process per rank"
		if k := len(launched.Switches()); k > 1 {
			where += fmt.Sprintf(", in-network calls over %d switches", k)
		}
	}
	emit, flush := collEmitter(cmd.OutOrStdout(), f.json, where)
	if launched != nil {
		cfg.Ranks = launched.Size()
		err = bench.RunCollLaunched(ctx, launched, cfg, emit)
	} else {
		err = bench.RunColl(ctx, w, cfg, emit)
	}
	flush()
	return err
}

// parseSyncAlgo checks --sync-algo: a Barrier algorithm, or auto.
func parseSyncAlgo(s string) (coll.Algo, error) {
	a, err := coll.ParseAlgo(s)
	if err != nil {
		return "", fmt.Errorf("--sync-algo: %w", err)
	}
	if a != coll.AlgoAuto && !coll.Supported(coll.OpBarrier, a) {
		return "", fmt.Errorf("--sync-algo: barrier has no %s algorithm (it has %v)", a, coll.Algorithms[coll.OpBarrier])
	}
	return a, nil
}

// runBenchCollSim is ndma bench coll --sim.
func runBenchCollSim(cmd *cobra.Command, f *collFlags, op coll.Operation, algos []coll.Algo, sizes []int, sync coll.Algo) error {
	if err := checkExclusive(cmd, "with --sim", "listen"); err != nil {
		return err
	}
	if l, err := coll.ParseEnv(os.LookupEnv); err == nil {
		return fmt.Errorf("--sim runs every rank in this process, but %s says this is rank %d of %d: unset it or drop --sim", l.Source, l.Rank, l.Size)
	}
	rate, err := bench.ParseRate(f.linkRate)
	if err != nil {
		return fmt.Errorf("--link-rate: %w", err)
	}
	if f.linkLatency < 0 {
		return fmt.Errorf("--link-latency %v: want a non-negative duration", f.linkLatency)
	}
	if !(f.loss >= 0 && f.loss < 1) {
		return fmt.Errorf("--loss %v: want a probability in [0, 1)", f.loss)
	}
	if f.seed == 0 {
		return fmt.Errorf("--seed 0: want a non-zero seed")
	}
	if f.leaves < 0 || f.leaves > fabric.MaxChildren || f.leaves > f.ranks {
		return fmt.Errorf("--leaves %d: want 1 to %d, and no more than --ranks", f.leaves, fabric.MaxChildren)
	}
	link := bench.CollSimLink{Rate: rate, Latency: f.linkLatency, Loss: f.loss, Seed: f.seed, Leaves: f.leaves}
	where := fmt.Sprintf("simnet: %s links, %v latency, MTU %d, loss %g, seed %d; virtual time", bench.FormatRate(rate), f.linkLatency, f.mtu, f.loss, f.seed)
	if f.leaves > 0 {
		where += fmt.Sprintf("; a tree of switches: a root and %d leaves", f.leaves)
	}
	if f.switches > 1 {
		where += fmt.Sprintf("; in-network calls over %d switches, a rank's link shared by its %d endpoints", f.switches, f.switches)
	}
	emit, flush := collEmitter(cmd.OutOrStdout(), f.json, where)
	cfg := bench.CollConfig{Op: op, Algos: algos, Ranks: f.ranks, Sizes: sizes, Iters: f.iters, Warmup: f.warmup, MTU: f.mtu, Sync: sync, Switches: f.switches}
	err = bench.RunCollSim(cfg, link, emit)
	flush()
	return err
}

// collEmitter returns the row printer of ndma bench coll (OSU tables, or
// JSON Lines with asJSON) and the flush to call after the last row.
func collEmitter(out io.Writer, asJSON bool, where string) (emit func(bench.CollResult), flush func()) {
	var tw *tabwriter.Writer
	last := ""
	emit = func(r bench.CollResult) {
		if asJSON {
			b, _ := json.Marshal(r)
			fmt.Fprintln(out, string(b))
			return
		}
		if r.Algo != last {
			if tw != nil {
				tw.Flush()
				fmt.Fprintln(out)
			}
			last = r.Algo
			fmt.Fprintf(out, "# NDMA %s, algorithm %s, %d ranks (%s)", strings.ToUpper(r.Op[:1])+r.Op[1:], r.Algo, r.Ranks, where)
			if r.Sync != "" {
				fmt.Fprintf(out, ", %s barrier before each call", r.Sync)
			}
			if r.Hosts > 0 {
				// The algorithm runs between the hosts' leaders only.
				fmt.Fprintf(out, ", two levels: shared memory in each of %d hosts (NDMA_HIERARCHY=off: every rank on the network)", r.Hosts)
			}
			fmt.Fprintln(out)
			tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
			head := "# Size\tAvg Latency(us)\tMin Latency(us)\tMax Latency(us)\tIterations\t"
			if r.Algo == string(coll.AlgoAuto) {
				head += "Chosen\t"
			}
			if len(r.SwitchPackets) > 0 {
				head += "Pkts in per switch\t"
			}
			fmt.Fprintln(tw, head)
		}
		fmt.Fprintf(tw, "%d\t%.2f\t%.2f\t%.2f\t%d\t", r.Size, r.AvgUS, r.MinUS, r.MaxUS, r.Iters)
		if r.Algo == string(coll.AlgoAuto) {
			fmt.Fprintf(tw, "%s\t", r.Chosen)
		}
		if len(r.SwitchPackets) > 0 {
			s := make([]string, len(r.SwitchPackets))
			for i, p := range r.SwitchPackets {
				s[i] = fmt.Sprint(p)
			}
			fmt.Fprintf(tw, "%s\t", strings.Join(s, "/"))
		}
		fmt.Fprintln(tw)
	}
	flush = func() {
		if tw != nil {
			tw.Flush()
		}
	}
	return emit, flush
}
