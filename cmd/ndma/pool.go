package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ndma/ndma/bench"
	"github.com/ndma/ndma/coll"
	"github.com/ndma/ndma/daemon/memd"
	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
	"github.com/ndma/ndma/wire/poolmap"
)

// poolFlags are the flags every pool subcommand shares.
type poolFlags struct {
	sw      string
	token   tokenFlags
	cred    credentialFlag
	timeout time.Duration
	json    bool

	// id is the credential client loaded (nil: none), for credentialHint.
	id *secure.Identity
	// opTimeout, if not zero, is the endpoint's Config.OpTimeout.
	opTimeout time.Duration
	// mtu, if not zero, is the endpoint's transport MTU.
	mtu int
}

func (p *poolFlags) register(cmd *cobra.Command) {
	fl := cmd.PersistentFlags()
	fl.StringVar(&p.sw, "switch", os.Getenv("NDMA_SWITCH"), "forwarding node `address` (host:port) holding the pool (default $NDMA_SWITCH)")
	p.token.register(fl)
	p.cred.register(fl, "of role client (or member: a job's rank, as ndma testbed run gives)")
	fl.DurationVar(&p.timeout, "timeout", 5*time.Second, "give up on the switch after this long")
	fl.BoolVar(&p.json, "json", false, "print JSON")
}

// client opens an endpoint for one pool command and returns it with the
// fabric options and a context bounded by --timeout.
func (p *poolFlags) client(cmd *cobra.Command) (*endpoint.Endpoint, endpoint.FabricOptions, context.Context, context.CancelFunc, error) {
	var opts endpoint.FabricOptions
	p.id = nil
	if p.sw == "" {
		return nil, opts, nil, nil, errors.New("--switch: no forwarding node given (nor $NDMA_SWITCH)")
	}
	sw, err := resolvePeer("--switch", p.sw)
	if err != nil {
		return nil, opts, nil, nil, err
	}
	p.sw = sw
	if p.timeout <= 0 {
		return nil, opts, nil, nil, fmt.Errorf("--timeout %v: want a positive duration", p.timeout)
	}
	sec, err := resolveSecurity(&p.token, &p.cred, os.Getenv, true, printWarn(cmd.ErrOrStderr()), "client-0.cred", secure.RoleClient, secure.RoleMember)
	if err != nil {
		return nil, opts, nil, nil, err
	}
	p.id, opts = sec.id, sec.fabric()
	if f := cmd.Flags().Lookup("mtu"); f == nil || !f.Changed {
		// The network's datagram size (ndma testbed run sets it): the
		// pool commands have no --mtu, the vol commands' wins.
		envMTU, err := coll.EnvMTU(os.LookupEnv)
		if err != nil {
			return nil, opts, nil, nil, err
		}
		if envMTU > 0 {
			p.mtu = envMTU
		}
	}
	if p.mtu != 0 && (p.mtu < transport.MinMTU || p.mtu > transport.MaxMTU) {
		return nil, opts, nil, nil, fmt.Errorf("--mtu %d: want %d to %d", p.mtu, transport.MinMTU, transport.MaxMTU)
	}
	ep, err := endpoint.Listen(":0", endpoint.Config{OpTimeout: p.opTimeout, Transport: transport.Config{MTU: p.mtu}}, sec.endpoint())
	if err != nil {
		return nil, opts, nil, nil, err
	}
	parent := cmd.Context()
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithTimeout(parent, p.timeout)
	return ep, opts, ctx, cancel, nil
}

// hintCredential makes the errors of cmds say, when no switch answered,
// that the switch may want a credential (credentialHint).
func (p *poolFlags) hintCredential(cmds ...*cobra.Command) {
	for _, c := range cmds {
		run := c.RunE
		if run == nil {
			continue
		}
		c.RunE = func(cmd *cobra.Command, args []string) error { return credentialHint(run(cmd, args), p.id) }
	}
}

func newPoolCmd() *cobra.Command {
	var pf poolFlags
	cmd := &cobra.Command{
		Use:   "pool",
		Short: "The forwarding node's memory pool: create, list and remove regions; memory nodes' usage",
		Long: `pool talks to the forwarding node (--switch) that pools the memory nodes
started with ndma memd --switch. A region is striped over the memory nodes
(--stripe bytes at a time, every live node by default) with one or two
copies of every byte; its key, printed by create, is the capability every
access and rm needs. put and get move files in and out of regions, split
across stripes and memory nodes in parallel.

Give every pool command a credential of role client (--credential or
$NDMA_CREDENTIAL; ndma fabric init writes one), or a job's rank its
member credential: its datagrams are sealed, region keys included. A
command without one refuses to run, unless --insecure (on a fabric that
does not seal).`,
	}
	pf.register(cmd)
	cmd.AddCommand(newPoolCreateCmd(&pf), newPoolLsCmd(&pf), newPoolStatCmd(&pf), newPoolRmCmd(&pf), newPoolPutCmd(&pf), newPoolGetCmd(&pf))
	pf.hintCredential(cmd.Commands()...)
	return cmd
}

func init() { rootCmd.AddCommand(newPoolCmd()) }

// newPoolCreateCmd is ndma pool create.
func newPoolCreateCmd(pf *poolFlags) *cobra.Command {
	var (
		size, stripe, perm string
		replicas, nodes    int
	)
	create := &cobra.Command{
		Use:   "create",
		Short: "Create a pool region and print its id and key",
		Example: `  ndma pool create --switch localhost:7471 --token-file fab/token --credential fab/client-0.cred --size 1GiB --replicas 2
  NDMA_SWITCH=localhost:7471 NDMA_TOKEN=$(cat fab/token) NDMA_CREDENTIAL=fab/client-0.cred ndma pool create --size 64MiB --stripe 4KiB --json
  # in a testbed (ndma testbed up --hosts 1 --memnodes 2), in its host namespace:
  sudo ndma testbed run -- ndma pool create --size 32MiB --replicas 2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sz, err := memnode.ParseSize(size)
			if err != nil || sz <= 0 {
				return fmt.Errorf("--size %q: want a positive size (%v)", size, err)
			}
			st, err := memnode.ParseSize(stripe)
			if err != nil || st <= 0 {
				return fmt.Errorf("--stripe %q: want a positive size (%v)", stripe, err)
			}
			if perm == "" {
				perm = "rwav"
				if replicas == 2 {
					perm = "rw"
				}
			}
			p, err := wire.ParsePerm(perm)
			if err != nil {
				return fmt.Errorf("--perm: %w", err)
			}
			spec := ctrl.PoolSpec{Size: uint64(sz), Stripe: uint64(st), Columns: nodes, Replicas: replicas, Perm: uint8(p)}
			if _, err := poolmap.NewLayout(spec.Size, spec.Stripe, max(nodes, replicas), replicas); err != nil {
				return fmt.Errorf("--size/--stripe/--nodes/--replicas: %w", err)
			}
			ep, opts, ctx, cancel, err := pf.client(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			defer ep.Close()
			got, key, err := ep.PoolCreate(ctx, pf.sw, spec, opts)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if pf.json {
				return json.NewEncoder(out).Encode(poolRegionJSON(got, memd.FormatKey(key)))
			}
			fmt.Fprintf(out, "region  %d\nkey     %s\n", got.Region, memd.FormatKey(key))
			fmt.Fprintf(out, "shape   %s\n", poolShape(got))
			return nil
		},
	}
	fl := create.Flags()
	fl.StringVar(&size, "size", "", "region size: bytes, or with a unit KiB, MiB, GiB, KB, MB, GB (required)")
	fl.StringVar(&stripe, "stripe", "64KiB", "interleave unit: a multiple of 8 bytes, 64 B to 1 GiB")
	fl.IntVar(&replicas, "replicas", 1, "copies of every byte, 1 or 2 (on different memory nodes)")
	fl.IntVar(&nodes, "nodes", 0, "memory nodes to stripe over (0: every live one)")
	fl.StringVar(&perm, "perm", "", "what the region allows: r(ead) w(rite) a(tomic) v(ector) (default rwav, rw with --replicas 2: replicas refuse atomics and vector ops)")
	_ = create.MarkFlagRequired("size")
	return create
}

// newPoolLsCmd is ndma pool ls.
func newPoolLsCmd(pf *poolFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List the pool's regions (never their keys)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, regions, err := poolStat(cmd, pf)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if pf.json {
				rows := make([]map[string]any, 0, len(regions))
				for _, r := range regions {
					rows = append(rows, poolRegionJSON(r, ""))
				}
				return json.NewEncoder(out).Encode(rows)
			}
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "REGION\tSIZE\tSTRIPE\tNODES\tCOPIES\tPERM\tHEALTH")
			for _, r := range regions {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%v\t%s\n", r.Region, sizeString(r.Size), sizeString(r.Stripe), r.Columns, r.Replicas, wire.Perm(r.Perm), poolHealth(r))
			}
			return tw.Flush()
		},
	}
}

// newPoolStatCmd is ndma pool stat.
func newPoolStatCmd(pf *poolFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "stat",
		Short: "Show the pool's memory nodes: capacity, use and liveness",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			nodes, regions, err := poolStat(cmd, pf)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if pf.json {
				return json.NewEncoder(out).Encode(map[string]any{"nodes": nodes, "regions": len(regions)})
			}
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NODE\tNAME\tADDRESS\tCAPACITY\tUSED\tUSE\tALIVE")
			// The totals count the live nodes only: a dead node's memory
			// is not the pool's until it comes back.
			var capTotal, used uint64
			alive := 0
			for _, n := range nodes {
				if n.Alive {
					alive++
					capTotal += n.Capacity
					used += n.Used
				}
				name := n.Name
				if name == "" {
					name = "-"
				}
				fmt.Fprintf(tw, "%d\t%s\t%v\t%s\t%s\t%.1f%%\t%v\n", n.ID, name, n.Addr, sizeString(n.Capacity), sizeString(n.Used), pct(n.Used, n.Capacity), n.Alive)
			}
			fmt.Fprintf(tw, "live\t%d of %d nodes, %d regions\t\t%s\t%s\t%.1f%%\t\n", alive, len(nodes), len(regions), sizeString(capTotal), sizeString(used), pct(used, capTotal))
			return tw.Flush()
		},
	}
}

// newPoolRmCmd is ndma pool rm.
func newPoolRmCmd(pf *poolFlags) *cobra.Command {
	var key string
	rm := &cobra.Command{
		Use:   "rm REGION --key KEY",
		Short: "Free a pool region",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseUint(args[0], 10, 32)
			if err != nil || id == 0 {
				return fmt.Errorf("region %q: want a region id (a positive number)", args[0])
			}
			k, err := parseKeyFlag(key)
			if err != nil {
				return err
			}
			ep, opts, ctx, cancel, err := pf.client(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			defer ep.Close()
			if err := ep.PoolFree(ctx, pf.sw, uint32(id), k, opts); err != nil {
				return err
			}
			if !pf.json {
				fmt.Fprintf(cmd.OutOrStdout(), "region %d freed\n", id)
			}
			return nil
		},
	}
	rm.Flags().StringVar(&key, "key", "", "the region's key, as create printed it (required)")
	_ = rm.MarkFlagRequired("key")
	return rm
}

func poolStat(cmd *cobra.Command, pf *poolFlags) ([]ctrl.PoolNodeInfo, []ctrl.PoolSpec, error) {
	ep, opts, ctx, cancel, err := pf.client(cmd)
	if err != nil {
		return nil, nil, err
	}
	defer cancel()
	defer ep.Close()
	ps, err := ep.PoolStat(ctx, pf.sw, opts)
	return ps.Nodes, ps.Regions, err
}

func poolShape(p ctrl.PoolSpec) string {
	return fmt.Sprintf("%s, stripe %s, over %d memory nodes, %d cop%s, perm %v",
		sizeString(p.Size), sizeString(p.Stripe), p.Columns, p.Replicas, map[bool]string{true: "y", false: "ies"}[p.Replicas == 1], wire.Perm(p.Perm))
}

// poolHealth says what a region's readers can expect, as the switch
// judges it (ctrl.PoolHealth), with the columns behind it: "ok",
// "degraded" (every byte readable, some copy lost, rebuilding or on a
// dead node), "unavailable" (some bytes only on dead nodes: back with
// them) or "lost" (every copy of some bytes gone).
func poolHealth(p ctrl.PoolSpec) string {
	var why []string
	if n := p.Lost - p.Rebuilding; n > 0 {
		why = append(why, fmt.Sprintf("%d lost", n))
	}
	if p.Rebuilding > 0 {
		why = append(why, fmt.Sprintf("%d rebuilding", p.Rebuilding))
	}
	if p.Down > 0 {
		why = append(why, fmt.Sprintf("%d on dead nodes", p.Down))
	}
	if len(why) == 0 {
		return p.Health.String()
	}
	return fmt.Sprintf("%v (%s of %d columns)", p.Health, strings.Join(why, ", "), p.Columns)
}

func poolRegionJSON(p ctrl.PoolSpec, key string) map[string]any {
	m := map[string]any{"region": p.Region, "size": p.Size, "stripe": p.Stripe, "nodes": p.Columns,
		"replicas": p.Replicas, "perm": wire.Perm(p.Perm).String(), "lost": p.Lost, "rebuilding": p.Rebuilding,
		"down": p.Down, "health": p.Health.String()}
	if key != "" {
		m["key"] = key
	}
	return m
}

func sizeString(n uint64) string {
	if n > 1<<62 {
		return strconv.FormatUint(n, 10)
	}
	return bench.FormatSize(int(n))
}

func pct(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}
