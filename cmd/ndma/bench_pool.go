package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/ndma/ndma/bench"
	"github.com/ndma/ndma/coll"
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/secure"
)

func newBenchPoolCmd() *cobra.Command {
	var (
		sw, tests, size, transfer, stripe, nodeSize string
		token                                       tokenFlags
		cred                                        credentialFlag
		node, nodeKey                               string
		nodes, iters, mtu                           int
		jsonOut, processes                          bool
	)
	cmd := &cobra.Command{
		Use:   "pool",
		Short: "Memory pool latency (ReadAt vs a direct READ) and sequential bandwidth (striped vs one node)",
		Long: `Measures the NetDAM memory pool. Latency: a pool ReadAt of --size bytes
(through the switch's MMU, answered by the memory node) against a direct
READ of the same size to a memory node, one in flight, p50 and p99.
Bandwidth: a sequential write and read of --transfer bytes through a
region striped over every memory node, against the same transfer through a
region on one node, and their ratio.

By default a switch and --nodes memory nodes run in-process on loopback;
with --processes each is its own process (ndma switch, ndma memd), as
deployed: in one process, goroutine hand-offs between the roles add to
every hop's latency.
With --switch (and a client credential and the fabric token, or --insecure) the pool of a running switch is measured
instead, e.g. inside the testbed (the latency test then has no direct
baseline unless --node and --node-key name a memory node of the pool):

  ndma testbed up --hosts 1 --memnodes 4 --host-rate 400mbit --rate 100mbit
  ndma testbed run -- sh -c 'ndma bench pool --switch $NDMA_SWITCH --tests bandwidth'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, err := bench.ParseTests(tests)
			if err != nil {
				return fmt.Errorf("--tests: %w", err)
			}
			if nodes < 1 {
				return fmt.Errorf("--nodes %d: want at least 1", nodes)
			}
			if !cmd.Flags().Changed("mtu") {
				// The network's datagram size (ndma testbed run sets it).
				envMTU, err := coll.EnvMTU(os.LookupEnv)
				if err != nil {
					return err
				}
				if envMTU > 0 {
					mtu = envMTU
				}
			}
			cfg := bench.PoolConfig{Switch: sw, Node: node, Nodes: nodes, Tests: t, Iters: iters, MTU: mtu}
			if processes {
				if sw != "" {
					return errors.New("--processes starts its own switch: it does not go with --switch")
				}
				if cfg.Binary, err = os.Executable(); err != nil {
					return fmt.Errorf("--processes: %w", err)
				}
			}
			if node != "" {
				if sw == "" {
					return errors.New("--node is the direct baseline of an external pool: it needs --switch")
				}
				if cfg.NodeKey, err = bench.ParseKey(nodeKey); err != nil {
					return fmt.Errorf("--node-key: %w", err)
				}
			}
			for _, s := range []struct {
				name string
				v    string
				dst  *int
			}{{"--size", size, &cfg.Size}, {"--transfer", transfer, &cfg.Transfer}, {"--stripe", stripe, &cfg.Stripe}, {"--node-size", nodeSize, &cfg.NodeSize}} {
				if s.v == "" {
					continue
				}
				n, err := memnode.ParseSize(s.v)
				if err != nil || n <= 0 || n > 1<<40 {
					return fmt.Errorf("%s %q: want a positive size (%v)", s.name, s.v, err)
				}
				*s.dst = int(n)
			}
			if sw != "" {
				if cfg.Switch, err = resolvePeer("--switch", sw); err != nil {
					return err
				}
			}
			if sw == "" {
				// The in-process pool runs unsealed (its own processes, on
				// loopback) under the token given, or one it draws.
				switch {
				case token.insecure:
					return errors.New("--insecure: only with --switch (the pool this benchmark starts runs on loopback, unsealed)")
				case cmd.Flags().Changed("credential"):
					return errors.New("--credential: only with --switch (the pool this benchmark starts runs on loopback, unsealed)")
				}
				if cfg.Token, err = token.resolve(os.Getenv); err != nil {
					return err
				}
			} else {
				sec, err := resolveSecurity(&token, &cred, os.Getenv, true, printWarn(cmd.ErrOrStderr()), "client-0.cred", secure.RoleClient, secure.RoleMember)
				if err != nil {
					return err
				}
				fo := sec.fabric()
				cfg.Token, cfg.Insecure, cfg.Security, cfg.SecurityOptions = fo.Token, fo.Insecure, sec.id, sec.opts
			}
			if node != "" {
				if cfg.Node, err = resolvePeer("--node", node); err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			emit := bench.NewTableWriter(out, "").Write
			if jsonOut {
				emit = bench.NewJSONWriter(out).Write
			}
			return bench.RunPool(cmdContext(cmd), cfg, emit)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&sw, "switch", "", "forwarding node `address` (host:port) of a running pool (default: start one in-process on loopback)")
	fl.StringVar(&node, "node", "", "with --switch: a memory node (host:port) to measure a direct READ against, the latency baseline")
	fl.StringVar(&nodeKey, "node-key", "", "the key of a region of --node outside the pool (e.g. a memd's second region: the region a node lends is reachable only through the pool)")
	token.register(fl)
	cred.register(fl, "of role client or member, with --switch")
	fl.StringVar(&tests, "tests", "all", "tests to run: latency, bandwidth or all")
	fl.IntVar(&nodes, "nodes", 4, "in-process memory nodes")
	fl.StringVar(&nodeSize, "node-size", "", "memory each in-process node lends (default: room for one transfer)")
	fl.StringVar(&size, "size", "4KiB", "latency test: read size")
	fl.IntVar(&iters, "iters", 2000, "latency test: samples")
	fl.StringVar(&transfer, "transfer", "64MiB", "bandwidth test: bytes moved")
	fl.StringVar(&stripe, "stripe", "64KiB", "bandwidth test: stripe of the regions")
	fl.IntVar(&mtu, "mtu", 9000, "transport MTU in bytes: the largest datagram sent (default: $NDMA_MTU when set)")
	fl.BoolVar(&jsonOut, "json", false, "print JSON Lines, one object per row")
	fl.BoolVar(&processes, "processes", false, "run the switch and the memory nodes as their own processes on loopback (this binary's switch and memd), as deployed")
	return cmd
}

func init() { benchCmd.AddCommand(newBenchPoolCmd()) }
