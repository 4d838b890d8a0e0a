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
	"github.com/ndma/ndma/testbed"
	"github.com/ndma/ndma/testbed/fidelity"
)

// mqBenchFlags are the flags of ndma bench mq.
type mqBenchFlags struct {
	targets, redisServer, natsServer, recordSize, retain string
	producers, subscribers, partitions, batch, inFlight  int
	copies                                               int
	brokerApart                                          bool
	records                                              int
	rate                                                 float64
	linger, duration                                     time.Duration
	jsonOut                                              bool
	testbed, stateDir                                    string
	fidelityCPU                                          float64
}

func newBenchMQCmd() *cobra.Command {
	var f mqBenchFlags
	cmd := &cobra.Command{
		Use:   "mq",
		Short: "Message queue: NDMA's queue against Redis Streams and NATS JetStream, with CPU per record",
		Long: `Runs --producers producers writing records of --record-size bytes to a
topic of --partitions partitions, and --subscribers subscribers that each
receive every record (fan-out), for --duration or, with --records, until
each producer has produced that many. A producer sends its records in
requests of up to --batch records, --in-flight requests at once, to the
partitions in turn; --rate paces it (records per second) and --linger is
how long a paced producer waits for a request to fill. Each record
carries its producer, partition, sequence number and the time it was
made. Targets (--targets, in order):

  ndma        NDMA's queue through its Go client: a produce is a FetchAdd
              on the partition's tail, one WRITE of the batch and a
              compare-and-swap publishing it; each subscriber reads the
              partitions' logs itself, one-sidedly, from the memory nodes
  ndma-kafka  the same queue through its Kafka front end (ndma mq serve
              --kafka), driven by franz-go
  redis       Redis Streams on redis-server, persistence off: a request is
              a pipeline of XADDs, each subscriber XREADs every stream
  nats        NATS JetStream on nats-server, memory storage: a request is
              async publishes awaiting the stream's acks, each subscriber
              an ordered consumer

Every queue keeps about --retain bytes per partition, dropping the
oldest. NDMA's queue runs as processes of this binary on loopback, as
deployed: a switch and 2 memory nodes (ndma memd), unsealed under a token
the benchmark draws; the servers of the others are started on free
loopback ports (Debian's redis-server and nats-server packages).

Each row gives produced and delivered records per second (delivered
summed over the subscribers), the produce requests' acknowledgement
p50/p99, the records' end-to-end p50/p99 (made to received), and the CPU
time per delivered record of this process (producers and subscribers)
and of each server process, read from /proc; then the records out of
order (a producer's record received after a later one of the same
partition: possible with --in-flight above 1) and failed requests.

Everything shares this host's CPUs over loopback: throughput and latency
say how fast this machine runs all the processes at once. CPU per record,
against the peers in the same run, is the figure to compare.

With --testbed PREFIX (as root), the run crosses a running testbed's
links instead (ndma testbed up --memnodes 1 or more): the producers run
in the first host, each subscriber in a host of its own, and Redis's and
NATS's servers in the first host, beside the producers, so that its
link carries every copy a broker sends (--broker-apart: in a host of
their own, after the subscribers', so that produces cross a link too). NDMA's queue uses the testbed's
switch and memory nodes, under credentials issued for the run. One more
target runs there by default:

  ndma-push   NDMA's queue with push: each stored batch is multicast once
              to the subscribers, the switch copying it to each; a
              subscriber reads the log only for what it missed

(ndma-kafka runs on loopback only.) Each row then says whether the run
was faithful (the fidelity monitor of ndma testbed run, judged from the
first produce to the last receipt, --fidelity-cpu its CPU rule) and the
CPU per record of every process: the producers' and subscribers' (client),
the switch and memory nodes for NDMA, the broker for the others. The
default --retain there is 16M, which two memory nodes of testbed up's
default size hold.`,
		Example: `  ndma bench mq --duration 10s                                  # 1 producer, 3 subscribers
  ndma bench mq --producers 4 --subscribers 1 --partitions 4 --json
  ndma bench mq --targets ndma,nats --record-size 16K --batch 4 --in-flight 1
  ndma bench mq --rate 20000 --linger 1ms --records 100000
  sudo ndma testbed up --hosts 8 --memnodes 2 --rate 100mbit --prefix mq
  sudo ndma bench mq --testbed mq --subscribers 7 --record-size 1K --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBenchMQ(cmd, &f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.targets, "targets", "ndma,ndma-kafka,redis,nats", "queues to measure, in order: ndma, ndma-push, ndma-kafka, redis, nats (with --testbed: ndma-push,ndma,redis,nats)")
	fl.StringVar(&f.redisServer, "redis-server", "redis-server", "the redis-server `binary`")
	fl.StringVar(&f.natsServer, "nats-server", "nats-server", "the nats-server `binary`")
	fl.IntVar(&f.producers, "producers", 1, "producers writing the topic")
	fl.IntVar(&f.subscribers, "subscribers", 3, "subscribers, each receiving every record")
	fl.IntVar(&f.partitions, "partitions", 1, "partitions of the topic")
	fl.StringVar(&f.recordSize, "record-size", "100", "bytes of each record, 100 to 64K")
	fl.IntVar(&f.batch, "batch", 16, "most records in one produce request")
	fl.IntVar(&f.inFlight, "in-flight", 4, "produce requests each producer has unacknowledged at once")
	fl.Float64Var(&f.rate, "rate", 0, "records per second of each producer (0: as fast as --in-flight allows)")
	fl.DurationVar(&f.linger, "linger", 0, "with --rate: how long a producer waits for a request to fill")
	fl.DurationVar(&f.duration, "duration", 5*time.Second, "how long the producers produce, per target")
	fl.IntVar(&f.records, "records", 0, "records per producer, instead of --duration")
	fl.StringVar(&f.retain, "retain", "64M", "log bytes each queue keeps per partition (with --testbed: 16M)")
	fl.BoolVar(&f.jsonOut, "json", false, "print JSON Lines, one object per target")
	fl.IntVar(&f.copies, "copies", 1, "copies of NDMA's topic data, 1 or 2: a produce is acknowledged once every copy holds it (the peers keep one)")
	fl.BoolVar(&f.brokerApart, "broker-apart", false, "with --testbed: run the peers' servers in a host of their own (after the subscribers'), not beside the producers")
	fl.StringVar(&f.testbed, "testbed", "", "run across the running testbed of this `prefix` instead of on loopback")
	fl.StringVar(&f.stateDir, "state-dir", testbed.DefaultStateDir(), "with --testbed: the `directory` of the testbeds' state")
	fl.Float64Var(&f.fidelityCPU, "fidelity-cpu", fidelity.DefaultMaxCPUShare, "with --testbed: largest share of this machine's CPU the run may use to be faithful, from 0 to 1")
	return cmd
}

func runBenchMQ(cmd *cobra.Command, f *mqBenchFlags) error {
	if cmd.Flags().Changed("records") && cmd.Flags().Changed("duration") {
		return fmt.Errorf("--records and --duration: give one (a run of so many records, or so long)")
	}
	for _, c := range []struct {
		flag string
		v    int
	}{{"--producers", f.producers}, {"--subscribers", f.subscribers}, {"--partitions", f.partitions}, {"--batch", f.batch}, {"--in-flight", f.inFlight}} {
		if c.v < 1 {
			return fmt.Errorf("%s %d: want at least 1", c.flag, c.v)
		}
	}
	if f.records < 0 {
		return fmt.Errorf("--records %d: want a positive count (or none, for --duration)", f.records)
	}
	if f.testbed == "" {
		for _, name := range []string{"state-dir", "fidelity-cpu", "broker-apart"} {
			if cmd.Flags().Changed(name) {
				return fmt.Errorf("--%s is for a run across a testbed: give --testbed PREFIX too", name)
			}
		}
	} else if !cmd.Flags().Changed("retain") {
		f.retain = "16M"
	}
	size, err := bench.ParseSize(f.recordSize)
	if err != nil {
		return fmt.Errorf("--record-size: %w", err)
	}
	retain, err := bench.ParseSize(f.retain)
	if err != nil {
		return fmt.Errorf("--retain: %w", err)
	}
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	cfg := bench.MQConfig{Binary: bin, RedisServer: f.redisServer, NATSServer: f.natsServer, Producers: f.producers,
		Subscribers: f.subscribers, Partitions: f.partitions, RecordSize: size, Batch: f.batch, InFlight: f.inFlight,
		Rate: f.rate, Linger: f.linger, Duration: f.duration, Records: f.records, Retain: retain, Copies: f.copies, BrokerApart: f.brokerApart}
	if f.records > 0 {
		cfg.Duration = 0
	}
	if f.testbed != "" {
		if cfg.Fidelity, err = fidelityRule(f.fidelityCPU); err != nil {
			return err
		}
		if cfg.Testbed, err = testbed.StatusAt(f.stateDir, f.testbed); err != nil {
			return err
		}
	}
	if f.testbed != "" && !cmd.Flags().Changed("targets") {
		f.targets = "" // the testbed's defaults
	}
	for t := range strings.SplitSeq(f.targets, ",") {
		if t = strings.TrimSpace(t); t != "" {
			cfg.Targets = append(cfg.Targets, t)
		}
	}
	prog := newProgress(cmd.ErrOrStderr(), f.jsonOut)
	defer prog.finish()
	cfg.Progress = prog.callback()
	out := cmd.OutOrStdout()
	if f.jsonOut {
		enc := json.NewEncoder(out)
		return bench.RunMQ(cmd.Context(), cfg, func(r bench.MQResult) error { return enc.Encode(r) })
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	var notes []string
	err = bench.RunMQ(cmd.Context(), cfg, func(r bench.MQResult) error {
		if prog.bar != nil {
			_ = prog.bar.Clear()
		}
		if notes == nil {
			fmt.Fprintln(tw, "target\tproduced/s\tdelivered/s\tack p50 µs\tack p99 µs\te2e p50 µs\te2e p99 µs\tclient CPU µs/rec\tserver CPU µs/rec\tout of order\terrors\t")
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.1f\t%.1f\t%.1f\t%.1f\t%.2f\t%.2f\t%d\t%d\t\n", r.Target, r.ProducedPerSec, r.DeliveredPerSec,
			r.AckP50, r.AckP99, r.EndToEndP50, r.EndToEndP99, r.ClientCPU, r.ServerCPU, r.OutOfOrder, r.Errors)
		if r.Fidelity != nil {
			notes = append(notes, fmt.Sprintf("%s: fidelity: %s: %s", r.Target, r.Fidelity.Class, r.Fidelity.Reason))
		}
		notes = append(notes, mqNote(r))
		return nil
	})
	tw.Flush()
	for _, n := range notes {
		fmt.Fprintln(out, n)
	}
	return err
}

// mqNote is a row's per-process CPU, and what a run short of every
// record or with records not the benchmark's says.
func mqNote(r bench.MQResult) string {
	names := make([]string, 0, len(r.Processes))
	for n := range r.Processes {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %.2f", n, r.Processes[n])
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d records produced, %d delivered to %d subscribers; server CPU µs/rec: %s", r.Target, r.Produced,
		r.Delivered, r.Subscribers, strings.Join(parts, ", "))
	if short := r.Produced*int64(r.Subscribers) - r.Delivered; short > 0 {
		fmt.Fprintf(&b, "; %d deliveries short of every record to every subscriber (dropped by retention before they were read, or not received within %v of the last)", short, bench.MQDrainIdle)
	}
	if r.Wrong > 0 {
		fmt.Fprintf(&b, "; %d records not the benchmark's", r.Wrong)
	}
	return b.String()
}

// newBenchMQAgentCmd is a process of a testbed run of ndma bench mq,
// which starts it in a host namespace and talks to it on its standard
// input and output.
func newBenchMQAgentCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "mq-agent",
		Short:  "A producer or subscriber process of ndma bench mq --testbed (spec and controls on stdin, JSON lines on stdout)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return bench.RunMQAgent(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
}

func init() {
	benchCmd.AddCommand(newBenchMQCmd())
	benchCmd.AddCommand(newBenchMQAgentCmd())
}
