package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/mq"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
)

// mqNodes is the memory node processes of the benchmark's pool.
const mqNodes = 2

// mqNative is NDMA's queue: a switch and memory nodes as processes on
// loopback, and the topic, producers and consumers in this process,
// all on one endpoint.
type mqNative struct {
	g     *procGroup // nil in a testbed agent
	ep    *endpoint.Endpoint
	topic *mq.Topic
	parts int
	fetch int // log bytes a subscriber reads at once
	// push: producers multicast their batches to the subscribers, each
	// of which has an endpoint of its own (subEps, closed with t), made
	// by listen, and registers at sw under fab.
	push   bool
	sw     string
	fab    endpoint.FabricOptions
	listen func() (*endpoint.Endpoint, error)
	subEps []*endpoint.Endpoint
	subs   []*mq.Subscription
	prods  []*mq.Producer // to close
}

// mqLayout is the topic's geometry for cfg: batches of cfg.Batch
// records, and a ring of about cfg.Retain bytes per partition in 8
// segments (2 or more of a batch each, for large batches).
func mqLayout(cfg *MQConfig) mq.Layout {
	align := func(n, a uint64) uint64 { return (n + a - 1) / a * a }
	maxBatch := align(uint64(mq.BatchHeaderBytes+cfg.Batch*mq.RecordBytes(mq.Record{Value: make([]byte, cfg.RecordSize)})), mq.Align)
	seg := max(align(uint64(cfg.Retain)/8, mq.Align), align(maxBatch, 4096))
	return mq.Layout{Partitions: cfg.Partitions, SegmentBytes: seg, Segments: max(2, cfg.Retain/int(seg)), MaxBatch: maxBatch}
}

func startMQNative(ctx context.Context, cfg *MQConfig, push bool) (_ mqTarget, err error) {
	g, err := newProcGroup("ndma-bench-mq")
	if err != nil {
		return nil, err
	}
	t := &mqNative{g: g, parts: cfg.Partitions, fetch: mqFetchRecords(cfg) * (cfg.RecordSize + mqRecOverhead), push: push}
	defer func() {
		if err != nil {
			t.close()
		}
	}()
	l := mqLayout(cfg)
	token := secure.NewToken()
	size := (l.DataSize()+l.ControlSize())/mqNodes + 2*pool.DefaultStripe + 8<<20
	fp, err := startFabric(ctx, g, cfg.Binary, cfg.MTU, mqNodes, size, token)
	if err != nil {
		return nil, err
	}
	t.listen = func() (*endpoint.Endpoint, error) {
		return endpoint.Listen("127.0.0.1:0", endpoint.Config{Transport: transport.Config{MTU: cfg.MTU}}, endpoint.Options{})
	}
	if t.ep, err = t.listen(); err != nil {
		return nil, err
	}
	t.sw, t.fab = fp.sw, endpoint.FabricOptions{Token: token}
	pc, err := pool.New(t.ep, fp.sw, pool.Options{Fabric: t.fab})
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if t.topic, err = mq.Create(cctx, pc, "bench", l, mq.CreateOptions{Replicas: cfg.Copies}); err != nil {
		return nil, fmt.Errorf("creating the topic (logs in %s): %w", g.dir, err)
	}
	return t, nil
}

func (t *mqNative) sender(context.Context, int, int) (mqSender, error) {
	var pc mq.ProducerConfig
	if t.push {
		pc.Push = &mq.Push{Endpoint: t.ep, Switch: t.sw, Fabric: t.fab}
	}
	p := mq.NewProducer(t.topic, pc)
	t.prods = append(t.prods, p)
	return mqNativeSender{p}, nil
}

type mqNativeSender struct{ p *mq.Producer }

func (s mqNativeSender) send(ctx context.Context, part int, vals [][]byte) error {
	recs := make([]mq.Record, len(vals))
	for i, v := range vals {
		recs[i].Value = v
	}
	_, err := s.p.Produce(ctx, part, recs)
	return err
}

func (t *mqNative) subscriber(ctx context.Context, _ int) (mqSubscriber, error) {
	c, err := mq.NewConsumer(ctx, t.topic, mq.ConsumerConfig{FetchBytes: t.fetch})
	if err != nil {
		return nil, err
	}
	if !t.push {
		return &mqNativeSub{c: c, parts: t.parts}, nil
	}
	// A subscriber is a member of the topic's push service: an endpoint
	// (an address) of its own.
	ep, err := t.listen()
	if err != nil {
		return nil, err
	}
	t.subEps = append(t.subEps, ep)
	s, err := c.Subscribe(ctx, mq.Push{Endpoint: ep, Switch: t.sw, Fabric: t.fab})
	if err != nil {
		return nil, err
	}
	t.subs = append(t.subs, s)
	return mqPushSub{s}, nil
}

// mqPushSub delivers what its subscription receives: pushed batches,
// and what it reads from the log for what it missed.
type mqPushSub struct{ s *mq.Subscription }

func (s mqPushSub) run(ctx context.Context, got func(int, []byte)) error {
	for {
		recs, err := s.s.Next(ctx, 100*time.Millisecond)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("receiving: %w", err)
		}
		for _, r := range recs {
			got(r.Partition, r.Value)
		}
	}
}

// mqNativeSub reads every partition's log itself. With one partition it
// waits in Fetch (long poll); with several it fetches each in turn and,
// when a round finds none, waits a little in the next.
type mqNativeSub struct {
	c     *mq.Consumer
	parts int
}

func (s *mqNativeSub) run(ctx context.Context, got func(int, []byte)) error {
	idle := false
	for p := 0; ; p = (p + 1) % s.parts {
		if p == 0 && s.parts > 1 {
			idle = true
		}
		wait := time.Duration(0)
		switch {
		case s.parts == 1:
			wait = 100 * time.Millisecond
		case idle && p == s.parts-1:
			wait = time.Millisecond
		}
		recs, err := s.c.Fetch(ctx, p, wait)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("fetching partition %d: %w", p, err)
		}
		for _, r := range recs {
			got(r.Partition, r.Value)
		}
		if len(recs) > 0 {
			idle = false
		}
	}
}

func (t *mqNative) procs() *procGroup { return t.g }

func (t *mqNative) close() {
	for _, p := range t.prods {
		p.Close()
	}
	for _, s := range t.subs {
		s.Close()
	}
	for _, ep := range t.subEps {
		ep.Close()
	}
	if t.ep != nil {
		t.ep.Close()
	}
	if t.g != nil {
		t.g.stop()
	}
}
