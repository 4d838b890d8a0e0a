package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ndma/ndma/coll"
	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/stor"
	"github.com/ndma/ndma/transport"
)

// storDaemonFlags are the flags ndma stord and ndma storgw share.
type storDaemonFlags struct {
	listen  string
	sw      string
	service string
	mtu     int
	token   tokenFlags
	cred    credentialFlag
	log     logFlags
}

func (f *storDaemonFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.listen, "listen", ":0", "UDP `address` to serve on (host:port; port 0 picks one)")
	fl.StringVar(&f.sw, "switch", os.Getenv("NDMA_SWITCH"), "forwarding node `address` (host:port; default $NDMA_SWITCH)")
	fl.StringVar(&f.service, "service", stor.DefaultService, "storage service name at the switch (one per storage cluster)")
	fl.IntVar(&f.mtu, "mtu", transport.DefaultMTU, "largest datagram to send, in bytes, header included (at most the switch's)")
	f.token.register(fl)
	f.cred.register(fl, "of role member")
	f.cred.registerRekey(fl)
	f.log.register(fl)
}

// storDaemon is what a storage daemon runs with: its endpoint (which the
// caller closes), the switch, the fabric options, its credential and
// logger.
type storDaemon struct {
	ep     *endpoint.Endpoint
	sw     string
	fab    endpoint.FabricOptions
	id     *secure.Identity
	logger *slog.Logger
}

// open checks the flags and opens the daemon's endpoint, whose operations
// wait up to opTimeout (0: the default).
func (f *storDaemonFlags) open(cmd *cobra.Command, opTimeout time.Duration) (*storDaemon, error) {
	d := &storDaemon{}
	var err error
	if d.logger, err = f.log.logger(cmd.ErrOrStderr()); err != nil {
		return nil, err
	}
	if f.sw == "" {
		return nil, errors.New("--switch: no forwarding node given (nor $NDMA_SWITCH)")
	}
	if d.sw, err = resolvePeer("--switch", f.sw); err != nil {
		return nil, err
	}
	listen, err := resolveListen("--listen", f.listen)
	if err != nil {
		return nil, err
	}
	file := "storage-0.cred" // ndma fabric init issues none for a gateway
	if cmd.Name() != "stord" {
		file = ""
	}
	sec, err := resolveSecurity(&f.token, &f.cred, os.Getenv, true, logWarn(d.logger, cmd.Name()), file, secure.RoleMember)
	if err != nil {
		return nil, err
	}
	d.id, d.fab = sec.id, sec.fabric()
	if id := d.id; id != nil {
		d.logger.Info(fmt.Sprintf("%s: sealing every datagram (role %v, name %q): only processes with a credential of this fabric are answered", cmd.Name(), id.Cert.Role, id.Cert.Name),
			"key", secure.Fingerprint(id.Cert.Key), "authority", secure.Fingerprint(id.Authority))
	}
	if err = f.cred.watch(cmd, os.Getenv, d.id, d.logger); err != nil {
		return nil, err
	}
	eopts := sec.endpoint()
	if d.ep, err = endpoint.Listen(listen, endpoint.Config{Transport: transport.Config{MTU: f.mtu}, OpTimeout: opTimeout}, eopts); err != nil {
		return nil, fmt.Errorf("--listen/--mtu: %w", err)
	}
	return d, nil
}

// stordFlags are the flags of `ndma stord`.
type stordFlags struct {
	storDaemonFlags
	dir      string
	id       int
	capacity string
}

func init() {
	var f stordFlags
	cmd := &cobra.Command{
		Use:   "stord",
		Short: "Run a storage node: keep extents of replicated volumes on disk, serve them through the switch",
		Long: `stord runs an NDMA storage node. It keeps the extents of replicated volumes
(ndma vol) in files under --dir, each extent with the version of its last
write, and registers with the forwarding node (--switch) as a member of
the storage service: clients' writes reach it as multicasts to the
replica group of an extent, reads as anycasts to the extent's replica set
(the switch picks the replica with the fewest requests in flight), and
it answers the client directly.

Every node of a volume keeps the volume's descriptor: the nodes hold the
volume map, and a switch that restarts learns who serves what again from
them (each node checks every second that the switch lists it, and
registers again if not). A node that was down copies the extents it
missed from the other replicas before it serves reads again. Writes are
durable once the writer flushes (each replica fdatasyncs).

The node's id (--id) is kept in --dir at the first start; give each node
of a fabric its own. --capacity bounds the bytes of extents it takes (a
volume that would not fit is refused). Every datagram is sealed under
the node's credential (--credential, role member) and the fabric token
(--token-file, --token or $NDMA_TOKEN) authenticates its control
messages; without a credential it refuses to start, unless --insecure.
SIGINT or SIGTERM shuts the node down.`,
		Example: `  ndma fabric init fab --storage-nodes 2
  ndma stord --dir /var/lib/ndma/stor0 --id 0 --switch 127.0.0.1:7471 --token-file fab/token --credential fab/storage-0.cred
  ndma stord --dir ./s1 --id 1 --capacity 64GiB --switch 10.0.0.1:7471 --token-file fab/token --credential fab/storage-1.cred`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runStord(cmd, &f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dir, "dir", "", "`directory` holding the node's volumes (created if missing; required)")
	fl.IntVar(&f.id, "id", -1, fmt.Sprintf("node id, 0 to %d (default: the one --dir holds, 0 for a new one)", stor.MaxNodes-1))
	fl.StringVar(&f.capacity, "capacity", "0", "most bytes of extents to take (0: as much as the disk holds)")
	f.storDaemonFlags.register(fl)
	_ = cmd.MarkFlagRequired("dir")
	rootCmd.AddCommand(cmd)
}

func runStord(cmd *cobra.Command, f *stordFlags) error {
	if f.dir == "" {
		return errors.New("--dir: give the node's directory")
	}
	if f.id < -1 || f.id >= stor.MaxNodes {
		return fmt.Errorf("--id %d: want 0 to %d", f.id, stor.MaxNodes-1)
	}
	capacity, err := memnode.ParseSize(f.capacity)
	if err != nil || capacity < 0 {
		return fmt.Errorf("--capacity %q: want a size, 0 for no bound (%v)", f.capacity, err)
	}
	d, err := f.open(cmd, 0)
	if err != nil {
		return err
	}
	ep, sw, id := d.ep, d.sw, d.id
	defer ep.Close()
	n, err := stor.NewNode(ep, stor.NodeConfig{Dir: f.dir, ID: f.id, Capacity: uint64(capacity), Switch: sw, Fabric: d.fab, Service: f.service, Logger: d.logger})
	if err != nil {
		return err
	}
	return runUntilSignal(cmd, func(ctx context.Context) error {
		if err := startWaiting(ctx, d.logger, "stord", sw, id, n.Start); err != nil || ctx.Err() != nil {
			n.Close()
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "storage node %d listening on %v, dir %s, switch %s\n", n.ID(), ep.LocalAddr(), f.dir, sw)
		<-ctx.Done()
		n.Close()
		return nil
	})
}

func init() {
	var (
		f    storDaemonFlags
		name string
	)
	cmd := &cobra.Command{
		Use:   "storgw",
		Short: "Run a storage gateway: the controller every I/O goes through, for comparison with multicast and anycast",
		Long: `storgw runs the controller of the controller-forwarding design, which
NDMA's multicast writes and anycast reads improve on: a storage target on
its own host that clients send every read, write and flush to. It
forwards a read to one replica of its extent (as the switch picks) and
relays the answer, and a write to every replica, a copy each, answering
when all have it. Clients use it with ndma bench vol --mode controller
(or stor.OpenOptions.Controller); the volumes, leases and storage nodes
are the same as without it.
SIGINT or SIGTERM shuts it down.`,
		Example: `  ndma storgw --switch 127.0.0.1:7471 --token-file fab/token --credential gw.cred   # a member credential (ndma credential issue --role member)`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := f.open(cmd, stor.IOTimeout)
			if err != nil {
				return err
			}
			ep, sw, id := d.ep, d.sw, d.id
			defer ep.Close()
			gw := stor.NewGateway(ep, stor.GatewayConfig{Switch: sw, Fabric: d.fab, Service: f.service, Name: name, Logger: d.logger})
			return runUntilSignal(cmd, func(ctx context.Context) error {
				if err := startWaiting(ctx, d.logger, "storgw", sw, id, gw.Start); err != nil || ctx.Err() != nil {
					return err
				}
				if name == "" {
					name = stor.GatewayName(f.service)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "storage gateway %q listening on %v, switch %s\n", name, ep.LocalAddr(), sw)
				<-ctx.Done()
				gw.Close()
				return nil
			})
		},
	}
	fl := cmd.Flags()
	f.register(fl)
	fl.StringVar(&name, "name", "", "the gateway's own service name (default SERVICE.gw)")
	rootCmd.AddCommand(cmd)
}

// volFlags are the flags every vol subcommand shares.
type volFlags struct {
	poolFlags
	service string
}

// open is client for a command that does not need the endpoint itself:
// done closes what open opened.
func (v *volFlags) open(cmd *cobra.Command) (*stor.Client, context.Context, func(), error) {
	c, ep, ctx, cancel, err := v.client(cmd)
	if err != nil {
		return nil, nil, nil, err
	}
	return c, ctx, func() { cancel(); ep.Close() }, nil
}

// client opens an endpoint and a storage client for one vol command.
func (v *volFlags) client(cmd *cobra.Command) (*stor.Client, *endpoint.Endpoint, context.Context, context.CancelFunc, error) {
	v.opTimeout = stor.IOTimeout
	if !cmd.Flags().Changed("mtu") {
		// The network's datagram size (ndma testbed run sets it).
		envMTU, err := coll.EnvMTU(os.LookupEnv)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		if envMTU > 0 {
			v.mtu = envMTU
		}
	}
	if v.mtu < transport.MinMTU || v.mtu > transport.MaxMTU {
		return nil, nil, nil, nil, fmt.Errorf("--mtu %d: want %d to %d", v.mtu, transport.MinMTU, transport.MaxMTU)
	}
	ep, opts, ctx, cancel, err := v.poolFlags.client(cmd)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	return stor.NewClient(ep, v.sw, stor.ClientOptions{Fabric: opts, Service: v.service}), ep, ctx, cancel, nil
}

func newVolCmd() *cobra.Command {
	var vf volFlags
	cmd := &cobra.Command{
		Use:   "vol",
		Short: "Replicated volumes on the storage nodes: create, list, inspect, remove, mount",
		Long: `vol manages the volumes kept by the storage nodes (ndma stord) behind a
forwarding node (--switch). A volume is a block device of --size bytes cut
into extents; each extent lives on --replicas storage nodes (never two
copies on one node), consecutive extents on consecutive nodes. Writes go
as one multicast to an extent's replicas, reads as one anycast to one of
them. One client at a time writes a volume (it holds the volume's lease).

Give vol commands a credential of role member (--credential or
$NDMA_CREDENTIAL; ndma fabric init --storage-nodes N writes its clients'
so), or --insecure on a fabric that does not seal.`,
	}
	vf.register(cmd)
	cmd.PersistentFlags().StringVar(&vf.service, "service", stor.DefaultService, "storage service name at the switch")
	cmd.PersistentFlags().IntVar(&vf.mtu, "mtu", transport.DefaultMTU, "largest datagram to send, in bytes, header included (default: $NDMA_MTU when set)")

	create := newVolCreateCmd(&vf)
	ls := newVolLsCmd(&vf)
	stat := newVolStatCmd(&vf)
	rm := newVolRmCmd(&vf)
	mount := newVolMountCmd(&vf)
	forceCmd := newVolForceCmd(&vf)

	cmd.AddCommand(create, ls, stat, rm, mount, forceCmd)
	vf.hintCredential(create, ls, stat, rm, mount, forceCmd)
	return cmd
}

// newVolCreateCmd returns ndma vol create: a new volume.
func newVolCreateCmd(vf *volFlags) *cobra.Command {
	var (
		size, extent    string
		replicas, nodes int
	)
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a volume",
		Example: `  ndma vol create data --size 16GiB --replicas 3 --extent 4MiB --switch 127.0.0.1:7471 --token-file fab/token --credential fab/client-0.cred
  NDMA_SWITCH=127.0.0.1:7471 NDMA_TOKEN=$(cat fab/token) NDMA_CREDENTIAL=fab/client-0.cred ndma vol create scratch --size 1GiB --replicas 1 --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sz, err := memnode.ParseSize(size)
			if err != nil || sz <= 0 {
				return fmt.Errorf("--size %q: want a positive size (%v)", size, err)
			}
			ex, err := memnode.ParseSize(extent)
			if err != nil || ex < stor.MinExtent || ex > stor.MaxExtent || ex&(ex-1) != 0 {
				return fmt.Errorf("--extent %q: want a power of two from 64KiB to 1GiB", extent)
			}
			if sz%ex != 0 {
				return fmt.Errorf("--size %s: want a multiple of --extent %s", size, extent)
			}
			if replicas < 1 || replicas > stor.MaxReplicas {
				return fmt.Errorf("--replicas %d: want 1 to %d", replicas, stor.MaxReplicas)
			}
			if nodes < 0 {
				return fmt.Errorf("--nodes %d: want 0 (every live node) or more", nodes)
			}
			c, ctx, done, err := vf.open(cmd)
			if err != nil {
				return err
			}
			defer done()
			d, err := c.Create(ctx, stor.VolumeSpec{Name: args[0], Size: uint64(sz), Extent: uint64(ex), Replicas: replicas, Nodes: nodes})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if vf.json {
				return json.NewEncoder(out).Encode(volJSON(d, len(d.Nodes)))
			}
			fmt.Fprintf(out, "volume %s: %s in %d extents of %s, %d replicas over nodes %v\n", d.Name, sizeString(d.Size), d.Extents(), sizeString(d.Extent), d.Replicas, d.Nodes)
			return nil
		},
	}
	fl := create.Flags()
	fl.StringVar(&size, "size", "", "volume size: bytes, or with a unit KiB, MiB, GiB, TiB (required; a multiple of --extent)")
	fl.StringVar(&extent, "extent", "4MiB", "extent size: a power of two, 64KiB to 1GiB")
	fl.IntVar(&replicas, "replicas", 3, fmt.Sprintf("copies of every extent, each on its own storage node (1 to %d)", stor.MaxReplicas))
	fl.IntVar(&nodes, "nodes", 0, "storage nodes to spread over (0: every live one)")
	_ = create.MarkFlagRequired("size")
	return create
}

// newVolLsCmd returns ndma vol ls: the volumes the live nodes hold.
func newVolLsCmd(vf *volFlags) *cobra.Command {
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the volumes the live storage nodes hold",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ctx, done, err := vf.open(cmd)
			if err != nil {
				return err
			}
			defer done()
			vs, err := c.List(ctx)
			if err != nil && len(vs) == 0 {
				return err
			}
			out := cmd.OutOrStdout()
			if vf.json {
				rows := make([]map[string]any, 0, len(vs))
				for _, v := range vs {
					row := volJSON(v.Descriptor, v.Live)
					row["unavailable"] = v.Unavailable
					if len(v.Conflict) > 0 {
						row["conflict"] = len(v.Conflict)
					}
					rows = append(rows, row)
				}
				if err := json.NewEncoder(out).Encode(rows); err != nil {
					return err
				}
				return err
			}
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSIZE\tEXTENT\tREPLICAS\tNODES\tANSWERED\tNOTE")
			for _, v := range vs {
				note := "-"
				switch {
				case v.Unavailable:
					note = "unavailable: every node of it is down"
				case len(v.Conflict) > 0:
					note = fmt.Sprintf("%d other volumes of this name on nodes that were down", len(v.Conflict))
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d of %d\t%s\n", v.Name, sizeString(v.Size), sizeString(v.Extent), v.Replicas, idList(v.Nodes), v.Live, len(v.Nodes), note)
			}
			if ferr := tw.Flush(); ferr != nil {
				return ferr
			}
			return err // some nodes did not answer: say so after what the others said
		},
	}
	return ls
}

// newVolStatCmd returns ndma vol stat: a volume on each of its nodes.
func newVolStatCmd(vf *volFlags) *cobra.Command {
	stat := &cobra.Command{
		Use:   "stat NAME",
		Short: "Show a volume on each of its storage nodes: current, outdated or waiting, generation, lease, replicas missing writes",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, done, err := vf.open(cmd)
			if err != nil {
				return err
			}
			defer done()
			st, err := c.Stat(ctx, args[0])
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if vf.json {
				return json.NewEncoder(out).Encode(st)
			}
			d := st.Desc
			health := st.Health
			if len(st.Unavailable) > 0 {
				var sets []string
				for _, s := range st.Unavailable {
					sets = append(sets, idList(s))
				}
				health += " (no current copy up of the extents on nodes " + strings.Join(sets, "; ") + ")"
			}
			fmt.Fprintf(out, "volume %s: %s in %d extents of %s, %d replicas over nodes %s; %s", d.Name, sizeString(d.Size), d.Extents(), sizeString(d.Extent), d.Replicas, idList(d.Nodes), health)
			if st.Leased {
				fmt.Fprint(out, ", open for writing")
			}
			fmt.Fprintln(out)
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NODE\tSTATE\tGEN\tHELD\tEPOCH\tLEASE\tMISSING WRITES\tWRITES APPLIED")
			for _, nv := range st.Nodes {
				state := nodeState(nv)
				lease := "-"
				if nv.Leased {
					lease = (time.Duration(nv.LeaseMs) * time.Millisecond).String() + " left"
				}
				var miss []string
				for id := range nv.Missing {
					miss = append(miss, fmt.Sprint(id))
				}
				slices.Sort(miss)
				m := "-"
				if len(miss) > 0 {
					m = "nodes " + strings.Join(miss, ",")
				}
				fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%d\t%s\t%s\t%d\n", nv.Node, state, nv.Gen, sizeString(nv.Held), nv.Epoch, lease, m, nv.Writes)
			}
			for _, id := range st.Down {
				fmt.Fprintf(tw, "%d\tdown\t-\t-\t-\t-\t-\t-\n", id)
			}
			return tw.Flush()
		},
	}
	return stat
}

// newVolRmCmd returns ndma vol rm: remove a volume.
func newVolRmCmd(vf *volFlags) *cobra.Command {
	var force bool
	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a volume from its storage nodes",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, done, err := vf.open(cmd)
			if err != nil {
				return err
			}
			defer done()
			r, err := c.Remove(ctx, args[0], force)
			if r != nil {
				if vf.json {
					if jerr := json.NewEncoder(cmd.OutOrStdout()).Encode(r); jerr != nil {
						return jerr
					}
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "removed volume %s (created %s, %s) from nodes %s",
						r.Desc.Name, time.Unix(0, r.Desc.Created).UTC().Format(time.RFC3339), sizeString(r.Desc.Size), idList(r.From))
					if len(r.Down) > 0 {
						fmt.Fprintf(cmd.OutOrStdout(), "; nodes %s are down and delete their copies when they return", idList(r.Down))
					}
					fmt.Fprintln(cmd.OutOrStdout())
				}
			}
			return err
		},
	}
	rm.Flags().BoolVar(&force, "force", false, "remove although the volume is open for writing or a node of it is down")
	return rm
}

// newVolForceCmd returns ndma vol force: declare a copy current.
func newVolForceCmd(vf *volFlags) *cobra.Command {
	var forceNode int
	forceCmd := &cobra.Command{
		Use:   "force NAME --node ID",
		Short: "Declare one node's copy of a volume current, losing the writes it missed",
		Long: `force makes node ID's copy of volume NAME the current one, whatever
writes it missed: use it when the nodes that hold the newest copy are lost
for good and the volume must serve again from what is left. Every other
copy, when its node answers, counts as outdated and takes this one's.
Writes acknowledged while node ID was left out are lost. Refused while a
client has the volume open for writing. ndma vol stat shows which copies
are current, outdated or waiting for which nodes.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if forceNode < 0 || forceNode >= stor.MaxNodes {
				return fmt.Errorf("--node %d: want a storage node id from 0 to %d", forceNode, stor.MaxNodes-1)
			}
			c, ctx, done, err := vf.open(cmd)
			if err != nil {
				return err
			}
			defer done()
			st, err := c.ForceCurrent(ctx, args[0], uint16(forceNode))
			if err != nil {
				return err
			}
			var others []string
			for _, nv := range st.Nodes {
				if nv.Node != forceNode {
					others = append(others, fmt.Sprintf("%d (generation %d)", nv.Node, nv.Gen))
				}
			}
			for _, id := range st.Down {
				others = append(others, fmt.Sprintf("%d (down)", id))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "volume %s: node %d's copy is current; the copies on nodes %s take it when they answer, and writes only they held are lost\n",
				args[0], forceNode, strings.Join(others, ", "))
			return nil
		},
	}
	forceCmd.Flags().IntVar(&forceNode, "node", -1, "the storage node whose copy becomes current (required)")
	_ = forceCmd.MarkFlagRequired("node")
	return forceCmd
}

func init() { rootCmd.AddCommand(newVolCmd()) }

// nodeState says what a node's copy of a volume is doing, for vol stat.
func nodeState(nv stor.NodeVolume) string {
	switch nv.State {
	case "ready", "":
		if nv.Ready {
			return "ready"
		}
		return "verifying"
	case "resyncing":
		return fmt.Sprintf("resyncing (%d extents)", nv.Stale)
	case "waiting":
		return "stale? waiting for nodes " + idList(nv.WaitFor) + " of its generation"
	case "writer":
		return "waiting for the writer"
	case "outdated":
		return "outdated (missed writes; no current copy up to copy from)"
	}
	if nv.Outdated {
		return "outdated, " + nv.State
	}
	return nv.State
}

func volJSON(d stor.Descriptor, live int) map[string]any {
	return map[string]any{"name": d.Name, "size": d.Size, "extent": d.Extent, "extents": d.Extents(),
		"replicas": d.Replicas, "nodes": d.Nodes, "answered": live, "created": time.Unix(0, d.Created).UTC().Format(time.RFC3339Nano)}
}

func idList(ids []uint16) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ",")
}

// startWaiting runs start (a daemon's registration with the switch at
// sw), each try bounded to 10 s, until it succeeds. A switch that does
// not answer (not started yet, restarting) is tried again every second,
// with a warning each time the answer changes, for as long as the
// daemon runs, as a supervisor would restart it: a storage node started
// while the switch is down comes up when it is back. A refusal (a
// status: a wrong token or credential) ends it with the error. It
// returns nil without starting when ctx ends.
func startWaiting(ctx context.Context, log *slog.Logger, who, sw string, id *secure.Identity, start func(context.Context) error) error {
	warned := false
	for {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := start(sctx)
		cancel()
		switch {
		case err == nil:
			if warned {
				log.Info(who+": the switch answers: registered", "switch", sw)
			}
			return nil
		case ctx.Err() != nil:
			return nil
		case !errors.Is(err, endpoint.ErrNoSwitch) && !errors.Is(err, context.DeadlineExceeded):
			return credentialHint(err, id)
		case !warned:
			warned = true
			log.Warn(who+": no switch answers yet; trying again every second", "switch", sw, "err", credentialHint(err, id))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}
