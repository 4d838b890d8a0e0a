package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/internal/secretfile"
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/mq"
	"github.com/ndma/ndma/pool"
)

// mqFlags are the flags every mq subcommand shares: the pool commands'
// and the catalog file.
type mqFlags struct {
	poolFlags
	catalog string
}

func newMqCmd() *cobra.Command {
	var mf mqFlags
	cmd := &cobra.Command{
		Use:   "mq",
		Short: "The message queue: topics of partitioned logs in the pool, produce and consume",
		Long: `mq talks to the message queue: topics whose partitions are logs in the
pool, written and read one-sidedly by producers and consumers through the
forwarding node (--switch), with no broker. A catalog (a small pool
region) names the topics; init makes one and writes its catalog file,
which every other mq command reads (--catalog or $NDMA_MQ_CATALOG): the
file holds the catalog's key, and the catalog the topics' keys. serve
speaks the Kafka protocol over the catalog, for unmodified Kafka clients.

Give every mq command a credential of role client (--credential or
$NDMA_CREDENTIAL), or a job's rank its member credential: its datagrams
are sealed, region keys included. A command without one refuses to run,
unless --insecure (on a fabric that does not seal). Pushing (produce
--push, consume --push) joins groups and a service at the switch: on a
sealed fabric it takes a member credential of scope mq (mq/NAME).`,
	}
	mf.register(cmd)
	cmd.PersistentFlags().StringVar(&mf.catalog, "catalog", os.Getenv("NDMA_MQ_CATALOG"), "the catalog `file` (default $NDMA_MQ_CATALOG)")
	topic := &cobra.Command{Use: "topic", Short: "Create, list, describe, rebuild, expire and remove topics"}
	topic.AddCommand(newMqTopicCreateCmd(&mf), newMqTopicLsCmd(&mf), newMqTopicDescribeCmd(&mf), newMqTopicRebuildCmd(&mf),
		newMqTopicExpireCmd(&mf), newMqTopicRmCmd(&mf))
	mf.hintCredential(topic.Commands()...)
	cmd.AddCommand(newMqInitCmd(&mf), topic, newMqProduceCmd(&mf), newMqConsumeCmd(&mf), newMqServeCmd(&mf))
	mf.hintCredential(cmd.Commands()...)
	return cmd
}

func init() { rootCmd.AddCommand(newMqCmd()) }

// catalogJSON is a catalog file's content: the catalog's region and,
// unless it was made without one, its mirror's.
type catalogJSON struct {
	Region    uint32 `json:"region"`
	Key       string `json:"key"` // 0x and 16 hex digits
	Mirror    uint32 `json:"mirror,omitempty"`
	MirrorKey string `json:"mirror_key,omitempty"`
}

// maxCatalogFile bounds a catalog file's size.
const maxCatalogFile = 4096

func readCatalogFile(path string) (mq.CatalogRef, error) {
	if path == "" {
		return mq.CatalogRef{}, errors.New("--catalog: no catalog file given (nor $NDMA_MQ_CATALOG); ndma mq init writes one")
	}
	b, err := secretfile.ReadFile(path, "catalog file")
	if err != nil {
		return mq.CatalogRef{}, fmt.Errorf("--catalog: %w", err)
	}
	var j catalogJSON
	if len(b) > maxCatalogFile || json.Unmarshal(b, &j) != nil {
		return mq.CatalogRef{}, fmt.Errorf("--catalog: %s is not a catalog file", path)
	}
	r := mq.CatalogRef{Region: j.Region, Mirror: j.Mirror}
	r.Key, err = strconv.ParseUint(j.Key, 0, 64)
	if err != nil || r.Key == 0 || j.Region == 0 {
		return mq.CatalogRef{}, fmt.Errorf("--catalog: %s is not a catalog file: region %d, key %q", path, j.Region, j.Key)
	}
	if j.Mirror != 0 || j.MirrorKey != "" {
		r.MirrorKey, err = strconv.ParseUint(j.MirrorKey, 0, 64)
		if err != nil || r.MirrorKey == 0 || j.Mirror == 0 {
			return mq.CatalogRef{}, fmt.Errorf("--catalog: %s is not a catalog file: mirror region %d, key %q", path, j.Mirror, j.MirrorKey)
		}
	}
	return r, nil
}

// catalogFile is the catalog file's content for r.
func catalogFile(r mq.CatalogRef) catalogJSON {
	j := catalogJSON{Region: r.Region, Key: fmt.Sprintf("0x%016x", r.Key)}
	if r.Mirror != 0 {
		j.Mirror, j.MirrorKey = r.Mirror, fmt.Sprintf("0x%016x", r.MirrorKey)
	}
	return j
}

// mqSession is what an mq command works with: its endpoint, a context
// bounded by --timeout, the pool client and the catalog.
type mqSession struct {
	ep     *endpoint.Endpoint
	fab    endpoint.FabricOptions
	sw     string
	ctx    context.Context
	cancel context.CancelFunc
	pc     *pool.Client
	cat    *mq.Catalog
}

// push is what pushes and push subscriptions of the session go through:
// its endpoint and switch.
func (s *mqSession) push() mq.Push { return mq.Push{Endpoint: s.ep, Switch: s.sw, Fabric: s.fab} }

func (s *mqSession) close() {
	s.cancel()
	s.ep.Close()
}

// open opens the catalog named by --catalog.
func (mf *mqFlags) open(cmd *cobra.Command) (*mqSession, error) {
	ref, err := readCatalogFile(mf.catalog)
	if err != nil {
		return nil, err
	}
	ep, fab, ctx, cancel, err := mf.client(cmd)
	if err != nil {
		return nil, err
	}
	s := &mqSession{ep: ep, fab: fab, sw: mf.sw, ctx: ctx, cancel: cancel}
	s.pc, err = pool.New(ep, mf.sw, pool.Options{Fabric: fab})
	if err == nil {
		s.cat, err = mq.OpenCatalogRef(ctx, s.pc, ref)
	}
	if err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// newMqInitCmd is ndma mq init.
func newMqInitCmd(mf *mqFlags) *cobra.Command {
	var (
		out      string
		slots    int
		noMirror bool
	)
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Create a catalog of topics and write its catalog file",
		Long: `init makes a catalog: a pool region naming up to --slots topics (one
copy: its slots are claimed by compare-and-swap), and its mirror, a
region of two copies that keeps the catalog readable when a memory node
of the first is lost and from which the mq commands rebuild it (it needs
two memory nodes; --no-mirror makes a catalog without one, which a
memory node lost loses). It writes the regions' ids and keys to the
catalog file --out (a new file only its owner may read: the keys are
the capability to every topic the catalog names). Give the file to the
other mq commands (--catalog).`,
		Example: `  ndma mq init --out mq.catalog --switch 127.0.0.1:7471 --token-file fab/token --credential fab/client-0.cred`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return errors.New("--out: give the catalog file to write")
			}
			if slots < 1 || slots > mq.MaxCatalogSlots {
				return fmt.Errorf("--slots %d: want 1 to %d", slots, mq.MaxCatalogSlots)
			}
			if _, err := os.Lstat(out); err == nil {
				return fmt.Errorf("--out: %s exists", out)
			}
			ep, fab, ctx, cancel, err := mf.client(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			defer ep.Close()
			pc, err := pool.New(ep, mf.sw, pool.Options{Fabric: fab})
			if err != nil {
				return err
			}
			cat, err := mq.CreateCatalog(ctx, pc, mq.CatalogOptions{Slots: slots, NoMirror: noMirror})
			if err != nil {
				return err
			}
			ref := cat.Ref()
			b, _ := json.MarshalIndent(catalogFile(ref), "", "  ")
			if err := secretfile.WriteNew(out, "catalog file", append(b, '\n')); err != nil {
				_ = cat.Free(context.WithoutCancel(ctx))
				return fmt.Errorf("--out: %w (the regions were freed)", err)
			}
			if mf.json {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"region": ref.Region, "mirror": ref.Mirror, "slots": slots, "file": out})
			}
			mirror := "no mirror"
			if ref.Mirror != 0 {
				mirror = fmt.Sprintf("mirror region %d", ref.Mirror)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "catalog of %d topics: region %d, %s\ncatalog file %s (give it to the mq commands: --catalog %s)\n", slots, ref.Region, mirror, out, out)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "the catalog `file` to write (required; must not exist)")
	cmd.Flags().IntVar(&slots, "slots", 256, "the most topics the catalog names")
	cmd.Flags().BoolVar(&noMirror, "no-mirror", false, "make the catalog without its mirror of two copies (a memory node lost with the catalog's region loses it)")
	return cmd
}

// newMqTopicCreateCmd is ndma mq topic create.
func newMqTopicCreateCmd(mf *mqFlags) *cobra.Command {
	var (
		segment, maxBatch, stripe                        string
		partitions, segments, groups, copies, ctlColumns int
	)
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a topic",
		Long: `create makes topic NAME: --partitions logs, each a ring of --segments
segments of --segment bytes (when the ring is full, the oldest segment is
dropped), batches of at most --max-batch bytes, room for --groups
consumer groups. Its data keeps --replicas copies on the memory nodes;
its counters (one copy: the pool runs atomics on one-copy regions only)
are spread over the memory nodes a partition each, or over
--control-columns of them (1: all on one node, so that only that node's
loss loses them).`,
		Example: `  ndma mq topic create orders --partitions 6 --segment 4MiB --segments 16 --replicas 2`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l := mq.Layout{Partitions: partitions, Segments: segments, Groups: groups}
			var stripeBytes uint64
			for _, s := range []struct {
				flag, v string
				dst     *uint64
			}{{"--segment", segment, &l.SegmentBytes}, {"--max-batch", maxBatch, &l.MaxBatch}, {"--stripe", stripe, &stripeBytes}} {
				n, err := memnode.ParseSize(s.v)
				if err != nil || n <= 0 {
					return fmt.Errorf("%s %q: want a positive size (%v)", s.flag, s.v, err)
				}
				*s.dst = uint64(n)
			}
			if err := l.Check(); err != nil {
				return fmt.Errorf("--partitions/--segment/--segments/--max-batch/--groups: %w", err)
			}
			s, err := mf.open(cmd)
			if err != nil {
				return err
			}
			defer s.close()
			t, err := s.cat.Create(s.ctx, args[0], l, mq.CreateOptions{Replicas: copies, Stripe: stripeBytes, ControlColumns: ctlColumns})
			if err != nil {
				return err
			}
			if mf.json {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(mqTopicJSON(t.Ref(), l, t.Replicas()))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "topic %q: %d partitions of %s (%d segments of %s), batches up to %s, %d copies\n",
				args[0], l.Partitions, sizeString(l.SegmentBytes*uint64(l.Segments)), l.Segments, sizeString(l.SegmentBytes), sizeString(l.MaxBatch), t.Replicas())
			return nil
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&partitions, "partitions", 3, "partitions, 1 to 4096")
	fl.StringVar(&segment, "segment", "1MiB", "segment size: the unit in which old records are dropped")
	fl.IntVar(&segments, "segments", 8, "segments per partition (at least 2)")
	fl.StringVar(&maxBatch, "max-batch", "64KiB", "the largest batch, header included (at most a segment)")
	fl.IntVar(&groups, "groups", 16, "consumer groups the topic holds")
	fl.IntVar(&copies, "replicas", 1, "copies of the data on the memory nodes, 1 or 2")
	fl.StringVar(&stripe, "stripe", "64KiB", "the data region's interleave unit (a multiple of 64 bytes)")
	fl.IntVar(&ctlColumns, "control-columns", 0, "memory nodes the partitions' counters are spread over (0: every live one)")
	return cmd
}

func mqTopicJSON(r mq.Ref, l mq.Layout, copies int) map[string]any {
	return map[string]any{"topic": r.Name, "partitions": l.Partitions, "segment": l.SegmentBytes, "segments": l.Segments,
		"max_batch": l.MaxBatch, "groups": l.Groups, "replicas": copies, "control_region": r.Control, "data_region": r.Data}
}

// newMqTopicLsCmd is ndma mq topic ls.
func newMqTopicLsCmd(mf *mqFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Short:   "List the catalog's topics",
		Example: `  ndma mq topic ls --catalog mq.catalog`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := mf.open(cmd)
			if err != nil {
				return err
			}
			defer s.close()
			refs, err := s.cat.Topics(s.ctx)
			if err != nil {
				return err
			}
			if mf.json {
				names := make([]string, 0, len(refs))
				for _, r := range refs {
					names = append(names, r.Name)
				}
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"topics": names})
			}
			for _, r := range refs {
				fmt.Fprintln(cmd.OutOrStdout(), r.Name)
			}
			return nil
		},
	}
}

// newMqTopicDescribeCmd is ndma mq topic describe.
func newMqTopicDescribeCmd(mf *mqFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "describe NAME",
		Short: "Print a topic's shape and each partition's offsets",
		Long: `describe prints topic NAME's shape and, for each partition, its start
(the oldest offset kept), committed offset (the end of what consumers
read), tail (the end of what producers reserved) and the holes sealed
(reservations a producer did not complete in time). Offsets are byte
positions in the partition's log.`,
		Example: `  ndma mq topic describe orders --json`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := mf.open(cmd)
			if err != nil {
				return err
			}
			defer s.close()
			t, err := s.cat.Open(s.ctx, args[0])
			if err != nil {
				return err
			}
			l := t.Layout()
			states := make([]mq.PartitionState, l.Partitions)
			for p := range states {
				if states[p], err = t.State(s.ctx, p); err != nil {
					return err
				}
			}
			w := cmd.OutOrStdout()
			if mf.json {
				m := mqTopicJSON(t.Ref(), l, t.Replicas())
				var parts []map[string]any
				for p, st := range states {
					parts = append(parts, map[string]any{"partition": p, "start": st.Start, "committed": st.Committed, "tail": st.Tail, "holes": st.Holes})
				}
				m["partition_state"] = parts
				return json.NewEncoder(w).Encode(m)
			}
			fmt.Fprintf(w, "topic %q: %d partitions, %d segments of %s each, batches up to %s, %d consumer groups, %d copies\n",
				args[0], l.Partitions, l.Segments, sizeString(l.SegmentBytes), sizeString(l.MaxBatch), l.Groups, t.Replicas())
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PARTITION\tSTART\tCOMMITTED\tTAIL\tHOLES")
			for p, st := range states {
				fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\n", p, st.Start, st.Committed, st.Tail, st.Holes)
			}
			return tw.Flush()
		},
	}
}

// newMqTopicRmCmd is ndma mq topic rm.
func newMqTopicRmCmd(mf *mqFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "rm NAME",
		Short:   "Remove a topic and free its regions",
		Example: `  ndma mq topic rm orders`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := mf.open(cmd)
			if err != nil {
				return err
			}
			defer s.close()
			if err := s.cat.Delete(s.ctx, args[0]); err != nil {
				return err
			}
			if mf.json {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"topic": args[0], "removed": true})
			}
			return nil
		},
	}
}

// newMqTopicRebuildCmd is ndma mq topic rebuild.
func newMqTopicRebuildCmd(mf *mqFlags) *cobra.Command {
	var ctlColumns int
	cmd := &cobra.Command{
		Use:   "rebuild NAME",
		Short: "Rebuild a topic's counters from its log after their memory node was lost",
		Long: `rebuild gives topic NAME new counters (a new control region, on
--control-columns memory nodes) rebuilt from its log, after the memory
node holding them restarted and the pool answers "data lost" for them.
Every whole batch in the log is kept, in order; what lies between
batches, and every torn batch, is sealed and counted as a hole.
Consumer groups start again from each partition's start. Run it with no
producer writing (a second after the loss is enough by default); the
catalog then names the new counters, and clients open the topic again.`,
		Example: `  ndma mq topic rebuild orders --control-columns 1`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := mf.open(cmd)
			if err != nil {
				return err
			}
			defer s.close()
			t, err := s.cat.Rebuild(s.ctx, args[0], ctlColumns)
			if err != nil {
				return err
			}
			var holes uint64
			for p := range t.Layout().Partitions {
				st, err := t.State(s.ctx, p)
				if err != nil {
					return err
				}
				holes += st.Holes
			}
			if mf.json {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"topic": args[0], "control_region": t.Ref().Control, "holes": holes})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "topic %q: counters rebuilt in region %d, %d holes sealed\n", args[0], t.Ref().Control, holes)
			return nil
		},
	}
	cmd.Flags().IntVar(&ctlColumns, "control-columns", 0, "memory nodes the new counters are spread over (0: every live one)")
	return cmd
}
