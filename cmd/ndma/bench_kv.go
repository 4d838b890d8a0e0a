package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ndma/ndma/bench"
	"github.com/ndma/ndma/kv"
	"github.com/ndma/ndma/testbed"
	"github.com/ndma/ndma/testbed/fidelity"
)

func newBenchKVCmd() *cobra.Command {
	var (
		targets, redisServer, memcached         string
		records, valueSize, conns, oneSidedFrom int
		readRatio, zipf                         float64
		duration                                time.Duration
		seed                                    int64
		jsonOut                                 bool
		tbPrefix, stateDir                      string
		clientHosts                             int
		fidelityCPU                             float64
	)
	cmd := &cobra.Command{
		Use:   "kv",
		Short: "Key-value store: GET/SET mixes against NDMA's store, its Redis and memcached front ends, redis-server and memcached",
		Long: `Loads --records keys of --value-size bytes into each target and runs a
mix of GETs (--read-ratio) and SETs of those keys, the keys drawn from a
Zipf distribution (--zipf; negative: uniform), from --clients requests in
flight, for --duration after a warm-up of a fifth of it. Targets
(--targets, in order):

  ndma       NDMA's store through its Go client: GETs read the memory nodes
             one-sidedly (a cached key's bucket and value in one round trip),
             SETs go to the owners by anycast
  ndma-resp  the same key space through its Redis front end (ndma kv serve),
             driven by the same Redis client (go-redis) as redis
  ndma-mc    the same key space through its memcached front end (the same
             kv serve), driven by the same memcached client (gomemcache) as
             memcached
  redis      redis-server, persistence off
  memcached  memcached, TCP

NDMA's store runs as processes of this binary on loopback, as deployed:
a switch, 2 memory nodes (ndma memd), a key space of 16 shards and its 2
owners (ndma kvd), unsealed under a token the benchmark draws. Each row
gives throughput, GET and SET p50/p99, and the CPU time per operation of
this process (the client) and of the store's processes (switch, memd,
kvd, kv serve; or redis-server, or memcached), read from /proc.

Everything shares this host's CPUs over loopback: throughput and latency
say how fast this machine runs all the processes at once, not what a
network would carry. CPU per operation, against redis and memcached in the
same run, is the figure to compare.

With --testbed PREFIX (as root), the run crosses a running testbed's
links instead (ndma testbed up --memnodes 2): redis-server, memcached and
NDMA's owners (kvd; the key space created from there, on the testbed's
switch and memory nodes, sealed under credentials of the space's scope
issued for the run) run in the first host, and each of --client-hosts
more hosts runs --clients clients in a process of its own. The targets
there are ndma, redis and memcached. Each row then says whether the run
was faithful over the measured time (the fidelity monitor of ndma
testbed run; --fidelity-cpu its CPU rule) and gives the CPU per
operation of the client hosts' processes and of every server process
(kvd, switch, memd; redis-server; memcached).`,
		Example: `  ndma bench kv --duration 5s
  ndma bench kv --targets ndma,redis --read-ratio 0.5 --value-size 1024 --json
  ndma bench kv --targets ndma,ndma-mc,memcached --read-ratio 1 --zipf -1   # YCSB C, uniform keys
  sudo ndma testbed up --hosts 8 --memnodes 2 --rate 100mbit --prefix kv
  sudo ndma bench kv --testbed kv --client-hosts 4 --read-ratio 0.5 --json   # YCSB A`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			cfg := bench.KVConfig{Binary: bin, RedisServer: redisServer, Memcached: memcached, Records: records, ValueSize: valueSize,
				ReadRatio: readRatio, Zipf: zipf, Clients: conns, Duration: duration, Seed: seed, OneSidedFrom: oneSidedFrom}
			if cmd.Flags().Changed("read-ratio") && readRatio == 0 {
				cfg.ReadRatio = -1 // SETs only
			}
			if tbPrefix == "" {
				for _, name := range []string{"state-dir", "fidelity-cpu", "client-hosts"} {
					if cmd.Flags().Changed(name) {
						return fmt.Errorf("--%s is for a run across a testbed: give --testbed PREFIX too", name)
					}
				}
			} else {
				if cfg.Fidelity, err = fidelityRule(fidelityCPU); err != nil {
					return err
				}
				if clientHosts < 0 {
					return fmt.Errorf("--client-hosts %d: want 1 or more (0: every host but the first)", clientHosts)
				}
				if cfg.Testbed, err = testbed.StatusAt(stateDir, tbPrefix); err != nil {
					return err
				}
				cfg.ClientHosts = clientHosts
				if !cmd.Flags().Changed("targets") {
					targets = "" // the testbed's defaults
				}
			}
			for t := range strings.SplitSeq(targets, ",") {
				if t = strings.TrimSpace(t); t != "" {
					cfg.Targets = append(cfg.Targets, t)
				}
			}
			out := cmd.OutOrStdout()
			if jsonOut {
				enc := json.NewEncoder(out)
				return bench.RunKV(cmd.Context(), cfg, func(r bench.KVResult) error { return enc.Encode(r) })
			}
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "target\tops/s\tGET p50 µs\tGET p99 µs\tSET p50 µs\tSET p99 µs\tclient CPU µs/op\tserver CPU µs/op\terrors\twrong\t")
			var notes []string
			err = bench.RunKV(cmd.Context(), cfg, func(r bench.KVResult) error {
				fmt.Fprintf(tw, "%s\t%.0f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%d\t\n", r.Target, r.OpsPerSec,
					r.GetP50, r.GetP99, r.SetP50, r.SetP99, r.ClientCPU, r.ServerCPU, r.Errors, r.Wrong)
				if r.Fidelity != nil {
					notes = append(notes, fmt.Sprintf("%s: fidelity: %s: %s", r.Target, r.Fidelity.Class, r.Fidelity.Reason))
				}
				names := make([]string, 0, len(r.Processes))
				for n := range r.Processes {
					names = append(names, n)
				}
				sort.Strings(names)
				parts := make([]string, len(names))
				for i, n := range names {
					parts[i] = fmt.Sprintf("%s %.1f", n, r.Processes[n])
				}
				notes = append(notes, fmt.Sprintf("%s server CPU µs/op: %s", r.Target, strings.Join(parts, ", ")))
				return nil
			})
			tw.Flush()
			for _, n := range notes {
				fmt.Fprintln(out, n)
			}
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&targets, "targets", strings.Join(bench.KVTargets, ","), "stores to measure, in order: "+strings.Join(bench.KVTargets, ", "))
	fl.StringVar(&redisServer, "redis-server", "redis-server", "the redis-server `binary`")
	fl.StringVar(&memcached, "memcached", "memcached", "the memcached `binary`")
	fl.IntVar(&records, "records", 10000, "keys loaded before the run")
	fl.IntVar(&valueSize, "value-size", 100, "bytes of each value")
	fl.IntVar(&oneSidedFrom, "one-sided-from", 0, fmt.Sprintf("value size from which NDMA's clients write values one-sidedly (0: %d; negative: never)", kv.DefaultOneSidedFrom))
	fl.Float64Var(&readRatio, "read-ratio", 0.95, "share of GETs; the rest are SETs (0: SETs only)")
	fl.Float64Var(&zipf, "zipf", 1.1, "exponent of the keys' Zipf distribution (above 1; negative: uniform keys)")
	fl.IntVar(&conns, "clients", 16, "requests in flight at once (with --testbed: in each client host)")
	fl.DurationVar(&duration, "duration", 5*time.Second, "measured time per target (after a warm-up of a fifth of it)")
	fl.Int64Var(&seed, "seed", 1, "seed of the keys and operations drawn")
	fl.BoolVar(&jsonOut, "json", false, "print JSON Lines, one object per target")
	fl.StringVar(&tbPrefix, "testbed", "", "run across the running testbed of this `prefix` instead of on loopback")
	fl.StringVar(&stateDir, "state-dir", testbed.DefaultStateDir(), "with --testbed: the `directory` of the testbeds' state")
	fl.IntVar(&clientHosts, "client-hosts", 0, "with --testbed: hosts running clients, after the first (0: all of them)")
	fl.Float64Var(&fidelityCPU, "fidelity-cpu", fidelity.DefaultMaxCPUShare, "with --testbed: largest share of this machine's CPU the run may use to be faithful, from 0 to 1")
	return cmd
}

// newBenchKVAgentCmd is a client host's process of ndma bench kv
// --testbed, which starts it in a host namespace and talks to it on its
// standard input and output.
func newBenchKVAgentCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "kv-agent",
		Short:  "A client host's process of ndma bench kv --testbed (spec and controls on stdin, JSON lines on stdout)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return bench.RunKVAgent(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
}

func init() {
	benchCmd.AddCommand(newBenchKVCmd())
	benchCmd.AddCommand(newBenchKVAgentCmd())
}
