package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ndma/ndma/secure"
)

// mqKafka is NDMA's queue through its Kafka front end: the switch and
// memory nodes as for mqNative, a catalog and the topic made by ndma mq
// init and ndma mq topic create, and ndma mq serve --kafka, driven by
// franz-go (kgo).
type mqKafka struct {
	g        *procGroup
	addr     string
	parts    int
	inFlight int
	maxBytes int32
	prods    []*kgo.Client // per producer: its in-flight slots share it
	clients  []*kgo.Client // every client, to close
}

func startMQKafka(ctx context.Context, cfg *MQConfig) (_ mqTarget, err error) {
	g, err := newProcGroup("ndma-bench-mq-kafka")
	if err != nil {
		return nil, err
	}
	t := &mqKafka{g: g, parts: cfg.Partitions, inFlight: cfg.InFlight, prods: make([]*kgo.Client, cfg.Producers)}
	defer func() {
		if err != nil {
			t.close()
		}
	}()
	// The producer's batches are cut at the native layout's largest
	// batch (in Kafka's encoding); the topic takes twice that, for the
	// records' overhead in mq's.
	l := mqLayout(cfg)
	t.maxBytes = int32(l.MaxBatch)
	l.MaxBatch *= 2
	if l.SegmentBytes < l.MaxBatch {
		l.SegmentBytes = (l.MaxBatch + 4095) / 4096 * 4096
		l.Segments = max(2, cfg.Retain/int(l.SegmentBytes))
	}
	size := (l.DataSize()+l.ControlSize())/mqNodes + 16<<20
	fp, err := startFabric(ctx, g, cfg.Binary, cfg.MTU, mqNodes, size, secure.NewToken())
	if err != nil {
		return nil, err
	}
	catalog := filepath.Join(g.dir, "mq.catalog")
	cat := append([]string{"--catalog", catalog}, fp.args()...)
	if err := g.run(ctx, "mq init", cfg.Binary, append([]string{"mq", "init", "--out", catalog}, fp.args()...)...); err != nil {
		return nil, err
	}
	if err := g.run(ctx, "mq topic create", cfg.Binary, append([]string{"mq", "topic", "create", "bench",
		"--partitions", strconv.Itoa(l.Partitions), "--segment", strconv.FormatUint(l.SegmentBytes, 10),
		"--segments", strconv.Itoa(l.Segments), "--max-batch", strconv.FormatUint(l.MaxBatch, 10), "--replicas", strconv.Itoa(cfg.Copies)}, cat...)...); err != nil {
		return nil, err
	}
	if t.addr, err = freeTCPAddr(); err != nil {
		return nil, err
	}
	fetch := max(1<<20, 2*l.MaxBatch)
	if err := g.start("mq-serve", cfg.Binary, append([]string{"mq", "serve", "--kafka", t.addr,
		"--fetch-bytes", strconv.FormatUint(fetch, 10), "--max-frame", strconv.FormatUint(fetch+1<<20, 10)}, cat...)...); err != nil {
		return nil, err
	}
	// Wait for the front end: its metadata names the topic.
	cl, err := t.client()
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err = cl.Ping(pctx)
		cancel()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("the Kafka front end does not answer at %s (logs in %s)", t.addr, g.dir), err)
	}
	return t, nil
}

func (t *mqKafka) client(opts ...kgo.Opt) (*kgo.Client, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(t.addr)}, opts...)...)
	if err != nil {
		return nil, err
	}
	t.clients = append(t.clients, cl)
	return cl, nil
}

func (t *mqKafka) sender(_ context.Context, i, _ int) (mqSender, error) {
	if t.prods[i] == nil {
		cl, err := t.client(kgo.DefaultProduceTopic("bench"), kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.DisableIdempotentWrite(),
			kgo.MaxProduceRequestsInflightPerBroker(t.inFlight), kgo.ProducerBatchMaxBytes(t.maxBytes), kgo.RecordRetries(0),
			kgo.ProducerLinger(0))
		if err != nil {
			return nil, err
		}
		t.prods[i] = cl
	}
	return mqKafkaSender{t.prods[i]}, nil
}

// mqKafkaSender produces a batch with one ProduceSync. kgo lingers not
// (the benchmark has gathered the batch): it sends what it has buffered
// for the broker whenever fewer than the producer's in-flight requests
// are outstanding, up to ProducerBatchMaxBytes a partition.
type mqKafkaSender struct{ cl *kgo.Client }

func (s mqKafkaSender) send(ctx context.Context, part int, vals [][]byte) error {
	recs := make([]*kgo.Record, len(vals))
	for i, v := range vals {
		recs[i] = &kgo.Record{Partition: int32(part), Value: v}
	}
	return s.cl.ProduceSync(ctx, recs...).FirstErr()
}

func (t *mqKafka) subscriber(context.Context, int) (mqSubscriber, error) {
	cl, err := t.client(kgo.ConsumeTopics("bench"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return nil, err
	}
	return mqKafkaSub{cl}, nil
}

// mqKafkaSub consumes every partition from its start, with no group.
type mqKafkaSub struct{ cl *kgo.Client }

func (s mqKafkaSub) run(ctx context.Context, got func(int, []byte)) error {
	for {
		fs := s.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err := fs.Err(); err != nil {
			return fmt.Errorf("fetching: %w", err)
		}
		fs.EachRecord(func(r *kgo.Record) { got(int(r.Partition), r.Value) })
	}
}

func (t *mqKafka) procs() *procGroup { return t.g }

func (t *mqKafka) close() {
	for _, c := range t.clients {
		c.Close()
	}
	t.g.stop()
}
