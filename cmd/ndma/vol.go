package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/stor"
	"github.com/ndma/ndma/transport"
)

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
			fmt.Fprintln(tw, "NAME\tOWNER\tSIZE\tEXTENT\tREPLICAS\tNODES\tANSWERED\tNOTE")
			for _, v := range vs {
				note := "-"
				switch {
				case v.Unavailable:
					note = "unavailable: every node of it is down"
				case len(v.Conflict) > 0:
					note = fmt.Sprintf("%d other volumes of this name on nodes that were down", len(v.Conflict))
				}
				owner := v.Owner
				if owner == "" {
					owner = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%d of %d\t%s\n", v.Name, owner, sizeString(v.Size), sizeString(v.Extent), v.Replicas, idList(v.Nodes), v.Live, len(v.Nodes), note)
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
		"replicas": d.Replicas, "nodes": d.Nodes, "answered": live, "created": time.Unix(0, d.Created).UTC().Format(time.RFC3339Nano),
		"owner": d.Owner}
}

func idList(ids []uint16) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ",")
}
