package main

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/spf13/cobra"

	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/mq/kafka"
)

// newMqServeCmd is ndma mq serve.
func newMqServeCmd(mf *mqFlags) *cobra.Command {
	var (
		addr, advertise, segment, maxBatch, fetchBytes string
		expose                                         bool
		cfg                                            kafka.Config
		log                                            logFlags
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the catalog's topics to Kafka clients",
		Long: `serve speaks the Kafka protocol on TCP (--kafka) over the catalog's
topics: unmodified Kafka producers and consumers (kcat, franz-go, librdkafka,
the Java client) produce and consume, and consumer groups commit offsets,
through it. It is one broker leading every partition; records are read
and written in the pool as the mq commands do.

Served: ApiVersions, Metadata, Produce (uncompressed record batches; no
idempotent or transactional producers), Fetch, ListOffsets (earliest and
latest), CreateTopics (the partitions and 1 or 2 copies asked for; the
rest of the layout from --segment, --segments, --max-batch, --groups),
FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup (group
membership lives in this process), OffsetCommit and OffsetFetch (mq's
consumer-group offsets, kept in the pool). Other requests get Kafka's
UNSUPPORTED_VERSION or end the connection. A record's Kafka offset is its
mq batch's offset plus its index in the batch: offsets grow with gaps.
SIGINT or SIGTERM stops it.`,
		Example: `  ndma mq serve --kafka 127.0.0.1:9092 --catalog mq.catalog --switch 127.0.0.1:7471 --credential fab/client-0.cred
  kcat -b 127.0.0.1:9092 -P -t orders < lines`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("json") {
				return errors.New("--json: mq serve prints no results to format (--json-logs writes its log as JSON)")
			}
			if addr == "" {
				return errors.New("--kafka: give the address to serve on")
			}
			if err := frontAddrAllowed("--kafka", addr, expose); err != nil {
				return err
			}
			for _, s := range []struct {
				flag, v string
				dst     *uint64
			}{{"--segment", segment, &cfg.Topic.SegmentBytes}, {"--max-batch", maxBatch, &cfg.Topic.MaxBatch}} {
				n, err := memnode.ParseSize(s.v)
				if err != nil || n <= 0 {
					return fmt.Errorf("%s %q: want a positive size (%v)", s.flag, s.v, err)
				}
				*s.dst = uint64(n)
			}
			n, err := memnode.ParseSize(fetchBytes)
			if err != nil || n <= 0 || n > kafka.MaxMaxFrame {
				return fmt.Errorf("--fetch-bytes %q: want a positive size up to 1 GiB (%v)", fetchBytes, err)
			}
			cfg.FetchBytes, cfg.Advertise = int(n), advertise
			logger, err := log.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			s, err := mf.open(cmd)
			if err != nil {
				return err
			}
			s.cancel() // --timeout bounded the opening only
			defer s.ep.Close()
			cfg.Catalog, cfg.Logger = s.cat, logger
			srv, err := kafka.New(cfg)
			if err != nil {
				return fmt.Errorf("--max-conns/--max-frame/--fetch-bytes/--op-timeout/--segment/--segments/--max-batch/--groups: %w", err)
			}
			l, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("--kafka: %w", err)
			}
			defer l.Close()
			fmt.Fprintf(cmd.OutOrStdout(), "listen   %v (TCP, kafka): catalog %s\n", l.Addr(), mf.catalog)
			return runUntilSignal(cmd, func(ctx context.Context) error {
				failed := make(chan error, 1)
				go func() { failed <- srv.Serve(l) }()
				var err error
				select {
				case <-ctx.Done():
				case err = <-failed:
				}
				srv.Close()
				st := srv.Stats()
				logger.Info("mq serve: stopped", "connections", st.Accepted, "refused", st.Refused, "requests", st.Requests,
					"produced", st.Produced, "fetched", st.Fetched)
				return err
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&addr, "kafka", "", "TCP `address` to serve the Kafka protocol on (host:port)")
	fl.StringVar(&advertise, "advertise", "", "host:port clients are told to connect to (default: the address they came in on)")
	fl.BoolVar(&expose, "expose", false, "serve on addresses other than loopback: every client that reaches them may read and write the topics (Kafka clients here carry no credential)")
	fl.IntVar(&cfg.MaxConns, "max-conns", kafka.DefaultMaxConns, "most connections served at once")
	fl.IntVar(&cfg.MaxFrame, "max-frame", kafka.DefaultMaxFrame, "largest request, in bytes")
	fl.StringVar(&fetchBytes, "fetch-bytes", "1MiB", "most log bytes one fetch reads from a partition (at least the largest batch)")
	fl.DurationVar(&cfg.Timeout, "op-timeout", kafka.DefaultTimeout, "bound on each request's pool work")
	fl.DurationVar(&cfg.IdleTimeout, "idle-timeout", 0, "close a connection idle this long (0: never)")
	fl.IntVar(&cfg.MaxGroups, "max-groups", kafka.DefaultMaxGroups, "most consumer groups with members at once")
	fl.IntVar(&cfg.MaxMembers, "max-members", kafka.DefaultMaxMembers, "most members of one consumer group")
	fl.StringVar(&segment, "segment", "1MiB", "segment size of topics CreateTopics makes")
	fl.IntVar(&cfg.Topic.Segments, "segments", 8, "segments per partition of topics CreateTopics makes")
	fl.StringVar(&maxBatch, "max-batch", "64KiB", "the largest batch of topics CreateTopics makes (at most a segment)")
	fl.IntVar(&cfg.Topic.Groups, "groups", 16, "consumer groups of topics CreateTopics makes")
	log.register(fl)
	return cmd
}
