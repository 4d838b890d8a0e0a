package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ndma/ndma/bench"
	"github.com/ndma/ndma/coll"
	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/stor"
	"github.com/ndma/ndma/transport"
)

// benchVolFlags are the flags of ndma bench vol.
type benchVolFlags struct {
	sw, modes, patterns, qds, bs, seqBS, volSize, extent, service, gateway string
	token                                                                  tokenFlags
	cred                                                                   credentialFlag
	nodes, clients, replicas, mtu                                          int
	dur                                                                    time.Duration
	jsonOut, launched, quiet                                               bool
}

func (f *benchVolFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.sw, "switch", "", "forwarding node `address` of a running fabric with storage nodes and a gateway (default: start them in-process on loopback)")
	f.token.register(fl)
	f.cred.register(fl, "of role member, with --switch")
	fl.IntVar(&f.mtu, "mtu", 9000, "transport MTU in bytes (default: $NDMA_MTU when set)")
	fl.BoolVar(&f.launched, "launched", false, "one client per process of a launch (ndma testbed run): the switch and token from its environment, rank 0 prints")
	fl.StringVar(&f.modes, "mode", "multicast,controller", "I/O modes: multicast, controller, comma-separated")
	fl.StringVar(&f.patterns, "pattern", "randread,randwrite,randrw,seqread,seqwrite", "I/O patterns, comma-separated (randrw: 70% reads)")
	fl.StringVar(&f.qds, "qd", "1,32", "queue depths (I/Os in flight per client), comma-separated")
	fl.StringVar(&f.bs, "bs", "4KiB", "block size of the random patterns")
	fl.StringVar(&f.seqBS, "seq-bs", "1MiB", "block size of the sequential patterns")
	fl.IntVar(&f.clients, "clients", 1, "clients in this process, each with its own endpoint and volume")
	fl.IntVar(&f.nodes, "nodes", 3, "in-process storage nodes (without --switch and --launched)")
	fl.IntVar(&f.replicas, "replicas", 3, "copies of each extent")
	fl.StringVar(&f.volSize, "vol-size", "256MiB", "each client's volume size")
	fl.StringVar(&f.extent, "extent", "4MiB", "extent size of the volumes")
	fl.StringVar(&f.service, "service", stor.DefaultService, "storage service name at the switch")
	fl.StringVar(&f.gateway, "gateway", "", "the gateway's service name (default SERVICE.gw)")
	fl.DurationVar(&f.dur, "duration", 3*time.Second, "measured time per point (after a tenth of it as warm-up)")
	fl.BoolVar(&f.jsonOut, "json", false, "print JSON Lines, one object per row")
	fl.BoolVar(&f.quiet, "quiet", false, "no progress bar")
}

// config returns the run's configuration from the flags that do not
// depend on where the fabric runs: modes, patterns, queue depths, sizes
// and duration.
func (f *benchVolFlags) config() (bench.VolConfig, error) {
	cfg := bench.VolConfig{Service: f.service, Gateway: f.gateway, Nodes: f.nodes, Clients: f.clients, Replicas: f.replicas, Duration: f.dur}
	cfg.Modes = splitList(f.modes)
	cfg.Patterns = splitList(f.patterns)
	for _, q := range splitList(f.qds) {
		n, err := strconv.Atoi(q)
		if err != nil {
			return cfg, fmt.Errorf("--qd %q: want numbers, comma-separated", f.qds)
		}
		cfg.QDs = append(cfg.QDs, n)
	}
	for _, fl := range []struct {
		name, v string
		dst     *int
	}{{"--bs", f.bs, &cfg.BS}, {"--seq-bs", f.seqBS, &cfg.SeqBS}} {
		n, err := memnode.ParseSize(fl.v)
		if err != nil || n <= 0 || n > stor.MaxIO {
			return cfg, fmt.Errorf("%s %q: want a size up to %d bytes (%v)", fl.name, fl.v, stor.MaxIO, err)
		}
		*fl.dst = int(n)
	}
	for _, fl := range []struct {
		name, v string
		dst     *uint64
	}{{"--vol-size", f.volSize, &cfg.VolSize}, {"--extent", f.extent, &cfg.Extent}} {
		n, err := memnode.ParseSize(fl.v)
		if err != nil || n <= 0 {
			return cfg, fmt.Errorf("%s %q: want a positive size (%v)", fl.name, fl.v, err)
		}
		*fl.dst = uint64(n)
	}
	if f.dur <= 0 {
		return cfg, fmt.Errorf("--duration %v: want a positive duration", f.dur)
	}
	return cfg, nil
}

// joinLaunch makes cfg one rank of the launch in the environment (ndma
// testbed run): its switch, security and MTU, a communicator of the
// ranks to start each point together, and the gather of their results at
// rank 0. The returned close, never nil, closes the communicator and the
// endpoint; call it when the run is over, error or not.
func joinLaunch(ctx context.Context, cmd *cobra.Command, cfg *bench.VolConfig) (gather func(context.Context, bench.VolResult) ([]bench.VolResult, error), closeAll func(), err error) {
	var closers []func()
	closeAll = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	l, err := coll.ParseEnv(os.LookupEnv)
	if err != nil {
		return nil, closeAll, fmt.Errorf("--launched: %w", err)
	}
	if cfg.EndpointOptions, err = l.EndpointOptions(); err != nil {
		return nil, closeAll, err
	}
	if l.MTU > 0 {
		cfg.MTU = l.MTU
	}
	ep, err := endpoint.Listen(":0", endpoint.Config{Transport: transport.Config{MTU: cfg.MTU}}, cfg.EndpointOptions)
	if err != nil {
		return nil, closeAll, err
	}
	closers = append(closers, func() { ep.Close() })
	comm, err := l.Communicator(ctx, ep)
	if err != nil {
		return nil, closeAll, err
	}
	if w := l.Warning(); w != "" && l.Rank == 0 {
		printWarn(cmd.ErrOrStderr())(w)
	}
	closers = append(closers, func() { comm.Close(context.Background()) })
	cfg.Switch, cfg.Rank, cfg.Ranks = l.Switch, l.Rank, l.Size
	if l.Rank == 0 {
		// The storage daemons' CPU, where ndma testbed run
		// names them.
		if cfg.NodePIDs, err = pidList("NDMA_STORD_PIDS"); err != nil {
			return nil, closeAll, err
		}
		if cfg.GatewayPIDs, err = pidList("NDMA_STORGW_PIDS"); err != nil {
			return nil, closeAll, err
		}
		cfg.SwitchNS = os.Getenv("NDMA_TESTBED_SWITCH_NS")
	}
	cfg.Fabric = l.FabricOptions()
	cfg.Sync = func(ctx context.Context) error { return comm.Barrier(ctx) }
	gather = func(ctx context.Context, r bench.VolResult) ([]bench.VolResult, error) {
		return gatherVol(ctx, comm, r)
	}
	return gather, closeAll, nil
}

// joinSwitch points cfg at the running fabric of --switch, with the
// security of --token and --credential and the MTU of $NDMA_MTU unless
// --mtu is given.
func (f *benchVolFlags) joinSwitch(cmd *cobra.Command, cfg *bench.VolConfig) error {
	var err error
	if cfg.Switch, err = resolvePeer("--switch", f.sw); err != nil {
		return err
	}
	sec, err := resolveSecurity(&f.token, &f.cred, os.Getenv, true, printWarn(cmd.ErrOrStderr()), "", secure.RoleMember)
	if err != nil {
		return err
	}
	cfg.Fabric, cfg.EndpointOptions = sec.fabric(), sec.endpoint()
	if !cmd.Flags().Changed("mtu") {
		if m, err := coll.EnvMTU(os.LookupEnv); err != nil {
			return err
		} else if m > 0 {
			cfg.MTU = m
		}
	}
	return nil
}

func (f *benchVolFlags) run(cmd *cobra.Command) error {
	cfg, err := f.config()
	if err != nil {
		return err
	}
	ctx := cmdContext(cmd)
	var gather func(context.Context, bench.VolResult) ([]bench.VolResult, error)
	switch {
	case f.launched:
		if f.sw != "" {
			return errors.New("--launched takes the switch from the launch's environment (NDMA_SWITCH): it does not go with --switch")
		}
		var closeAll func()
		gather, closeAll, err = joinLaunch(ctx, cmd, &cfg)
		defer closeAll()
		if err != nil {
			return err
		}
	case f.sw != "":
		if err := f.joinSwitch(cmd, &cfg); err != nil {
			return err
		}
	}
	if cmd.Flags().Changed("mtu") {
		cfg.MTU = f.mtu
	}
	out := cmd.OutOrStdout()
	var emit func(bench.VolResult) error
	var table *bench.VolTable
	if f.jsonOut {
		emit = bench.VolJSON(out)
	} else {
		table = bench.NewVolTable(out)
		emit = table.Write
	}
	p := newProgress(cmd.ErrOrStderr(), f.quiet || f.jsonOut || cfg.Rank != 0)
	cfg.Progress = p.callback()
	err = bench.RunVol(ctx, cfg, gather, emit)
	p.finish()
	if table != nil && cfg.Rank == 0 {
		if ferr := table.Flush(); err == nil {
			err = ferr
		}
	}
	return err
}

func newBenchVolCmd() *cobra.Command {
	var f benchVolFlags
	cmd := &cobra.Command{
		Use:   "vol",
		Short: "Replicated volume I/O: multicast writes and anycast reads against a controller that forwards every I/O",
		Long: `Measures block I/O on replicated volumes (ndma vol): random reads, random
writes, a 70/30 random mix and sequential reads and writes, at each queue
depth, in two modes on the same storage nodes and volumes:

  multicast   a write is one multicast to the extent's replica group (the
              switch replicates it), a read one anycast to one replica
  controller  every I/O goes to a gateway (ndma storgw), which forwards a
              read to one replica and a write to each, a copy each

Each row gives IOPS, MB/s and p50/p99 latency over every client; a
controller row also gives its p50 over the multicast row's and the
multicast row's IOPS over its own. Each client writes and reads a volume
of its own (--vol-size, --replicas); volumes are made at the start and
removed at the end.

By default a switch, --nodes storage nodes and a gateway run in this
process on loopback. On a testbed, one client per host, all at once:

  ndma testbed up --hosts 8 --stornodes 3 --gateway --rate 1gbit
  ndma testbed run -- ndma bench vol --launched

(rank 0 prints the rows; the ranks start each point together).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd) },
	}
	f.register(cmd.Flags())
	return cmd
}

func init() { benchCmd.AddCommand(newBenchVolCmd()) }

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// volWire is a VolResult with its samples, as ranks send it to rank 0.
type volWire struct {
	R bench.VolResult `json:"r"`
	S []int64         `json:"s"`
}

// gatherVol collects every rank's result at rank 0 (nil elsewhere).
func gatherVol(ctx context.Context, comm *coll.Communicator, r bench.VolResult) ([]bench.VolResult, error) {
	w := volWire{R: r}
	for _, d := range r.Samples {
		w.S = append(w.S, int64(d))
	}
	b, err := json.Marshal(w)
	if err != nil {
		return nil, err
	}
	n := []int64{int64(len(b))}
	maxN := []int64{0}
	if err := coll.Allreduce(ctx, comm, n, maxN, coll.Max); err != nil {
		return nil, err
	}
	block := 8 + int(maxN[0])
	send := make([]byte, block)
	binary.LittleEndian.PutUint64(send, uint64(len(b)))
	copy(send[8:], b)
	var recv []byte
	if comm.Rank() == 0 {
		recv = make([]byte, block*comm.Size())
	}
	if err := comm.Gather(ctx, send, recv, 0); err != nil {
		return nil, err
	}
	if comm.Rank() != 0 {
		return nil, nil
	}
	out := make([]bench.VolResult, comm.Size())
	for i := range out {
		blk := recv[i*block : (i+1)*block]
		l := binary.LittleEndian.Uint64(blk)
		if l > uint64(block-8) {
			return nil, fmt.Errorf("bench vol: rank %d sent a %d-byte result in a %d-byte block", i, l, block)
		}
		var w volWire
		if err := json.Unmarshal(blk[8:8+l], &w); err != nil {
			return nil, fmt.Errorf("bench vol: rank %d: %w", i, err)
		}
		w.R.Samples = make([]time.Duration, len(w.S))
		for j, s := range w.S {
			w.R.Samples[j] = time.Duration(s)
		}
		out[i] = w.R
	}
	return out, nil
}

// pidList reads a comma-separated list of pids from environment variable
// name (none when unset).
func pidList(name string) ([]int, error) {
	var out []int
	for _, f := range splitList(os.Getenv(name)) {
		p, err := strconv.Atoi(f)
		if err != nil || p <= 0 {
			return nil, fmt.Errorf("$%s: %q is not a pid", name, f)
		}
		out = append(out, p)
	}
	return out, nil
}
