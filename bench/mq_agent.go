package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/mq"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/transport"
)

// The roles of a testbed run's agent processes.
const (
	mqRoleProducer   = "producer"
	mqRoleSubscriber = "subscriber"
)

// mqAgentSpec is what an agent process of a testbed run (RunMQAgent) is
// given, as the first line of its standard input.
type mqAgentSpec struct {
	Role   string   `json:"role"`
	Target string   `json:"target"`
	Config MQConfig `json:"config"`
	// Index is a subscriber's number, from 0.
	Index int `json:"index"`
	// Local is the agent's host address, its endpoints' to listen on.
	Local string `json:"local"`
	// Addr is the peer's server: host:port for Redis, a URL for NATS.
	Addr string `json:"addr,omitempty"`
	// Switch, Token and Credential (a file; empty: unsealed) join NDMA's
	// fabric; Topic is the topic a subscriber opens, which the producer
	// created.
	Switch     string  `json:"switch,omitempty"`
	Token      string  `json:"token,omitempty"`
	Credential string  `json:"credential,omitempty"`
	Topic      *mq.Ref `json:"topic,omitempty"`
}

// mqAgentMsg is a line an agent writes to its standard output: that it
// is ready (with the topic a producer created), its progress, or its
// result.
type mqAgentMsg struct {
	Ready bool    `json:"ready,omitempty"`
	Topic *mq.Ref `json:"topic,omitempty"`
	// Acked is a producer's progress: records acknowledged so far.
	Acked int64 `json:"acked,omitempty"`
	Done  bool  `json:"done,omitempty"`
	// A producer's result: records acknowledged, failed requests, the
	// requests' latencies, when it started and had its last
	// acknowledgement (unix ns).
	Produced  int64          `json:"produced,omitempty"`
	Errors    int64          `json:"errors,omitempty"`
	Ack       map[int]uint64 `json:"ack,omitempty"`
	StartNS   int64          `json:"start_ns,omitempty"`
	LastAckNS int64          `json:"last_ack_ns,omitempty"`
	// A subscriber's result: records received, their end-to-end times,
	// the last receipt (unix ns), records out of order and not the
	// benchmark's.
	Got        int64          `json:"got,omitempty"`
	E2E        map[int]uint64 `json:"e2e,omitempty"`
	LastNS     int64          `json:"last_ns,omitempty"`
	OutOfOrder int64          `json:"out_of_order,omitempty"`
	Wrong      int64          `json:"wrong,omitempty"`
	// CPUS is the agent's CPU time over its measured part, in seconds.
	CPUS float64 `json:"cpu_s,omitempty"`
}

// mqProgressEvery is how often a producer agent reports its progress.
const mqProgressEvery = 200 * time.Millisecond

// RunMQAgent is one process of a testbed run of the message-queue
// benchmark (`ndma bench mq-agent`, started by RunMQ in a host
// namespace): it reads its spec from the first line of in and then, as
// a producer, says it is ready, produces on a line "go", reports its
// progress and result, and ends when in ends; as a subscriber, says it
// is ready once it receives, and on a line "expect N" receives until it
// has N records or none came for MQDrainIdle, reports, and ends when in
// ends. Every message is a line of JSON on out.
func RunMQAgent(ctx context.Context, in io.Reader, out io.Writer) error {
	lines := bufio.NewScanner(in)
	if !lines.Scan() {
		return errors.New("bench: mq agent: no spec on standard input")
	}
	var sp mqAgentSpec
	if err := json.Unmarshal(lines.Bytes(), &sp); err != nil {
		return fmt.Errorf("bench: mq agent: spec: %w", err)
	}
	sp.Config.setDefaults()
	if err := sp.Config.validate(); err != nil {
		return fmt.Errorf("bench: mq agent: %w", err)
	}
	enc := json.NewEncoder(out)
	var mu sync.Mutex
	say := func(m mqAgentMsg) error {
		mu.Lock()
		defer mu.Unlock()
		return enc.Encode(m)
	}
	t, topic, err := sp.attach(ctx)
	if err != nil {
		return fmt.Errorf("bench: mq agent: %s %s: %w", sp.Target, sp.Role, err)
	}
	defer t.close()
	switch sp.Role {
	case mqRoleProducer:
		return sp.produce(ctx, t, topic, lines, say)
	case mqRoleSubscriber:
		return sp.subscribe(ctx, t, lines, say)
	}
	return fmt.Errorf("bench: mq agent: role %q", sp.Role)
}

// attach reaches the target's servers: for NDMA's queue, it joins the
// fabric and creates (a producer) or opens (a subscriber) the topic.
func (sp *mqAgentSpec) attach(ctx context.Context) (mqTarget, *mq.Ref, error) {
	cfg := &sp.Config
	switch sp.Target {
	case MQRedis:
		return attachMQRedis(cfg, sp.Addr), nil, nil
	case MQNATS:
		t := attachMQNATS(cfg, sp.Addr)
		if sp.Role == mqRoleProducer {
			if err := t.createStream(ctx, cfg); err != nil {
				t.close()
				return nil, nil, err
			}
		}
		return t, nil, nil
	case MQNative, MQPush:
	default:
		return nil, nil, fmt.Errorf("target %q", sp.Target)
	}
	opts, err := agentSecurity(sp.Credential)
	if err != nil {
		return nil, nil, err
	}
	t := &mqNative{parts: cfg.Partitions, fetch: mqFetchRecords(cfg) * (cfg.RecordSize + mqRecOverhead), push: sp.Target == MQPush,
		sw: sp.Switch, fab: endpoint.FabricOptions{Token: []byte(sp.Token), Insecure: sp.Token == ""}}
	t.listen = func() (*endpoint.Endpoint, error) {
		return endpoint.Listen(sp.Local, endpoint.Config{Transport: transport.Config{MTU: cfg.MTU}}, opts)
	}
	if t.ep, err = t.listen(); err != nil {
		return nil, nil, err
	}
	pc, err := pool.New(t.ep, sp.Switch, pool.Options{Fabric: t.fab})
	if err != nil {
		t.close()
		return nil, nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if sp.Role == mqRoleProducer {
		t.topic, err = mq.Create(cctx, pc, "bench", mqLayout(cfg), mq.CreateOptions{Replicas: cfg.Copies})
	} else if sp.Topic == nil {
		err = errors.New("no topic to open")
	} else {
		t.topic, err = mq.Open(cctx, pc, *sp.Topic)
	}
	if err != nil {
		t.close()
		return nil, nil, err
	}
	if sp.Role != mqRoleProducer {
		return t, nil, nil
	}
	ref := t.topic.Ref()
	return &mqOwnedTopic{mqNative: t, pc: pc}, &ref, nil
}

// mqOwnedTopic is a producer agent's NDMA target: closing it frees the
// topic it created.
type mqOwnedTopic struct {
	*mqNative
	pc *pool.Client
}

func (t *mqOwnedTopic) close() {
	for _, p := range t.prods {
		p.Close()
	}
	t.prods = nil
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_ = t.topic.Free(ctx, t.pc)
	cancel()
	t.mqNative.close()
}

// produce runs the producers of the spec's config in this process.
func (sp *mqAgentSpec) produce(ctx context.Context, t mqTarget, topic *mq.Ref, lines *bufio.Scanner, say func(mqAgentMsg) error) error {
	cfg := &sp.Config
	prods, senders, err := newMQProducers(ctx, cfg, t)
	if err != nil {
		return fmt.Errorf("bench: mq agent: %w", err)
	}
	if err := say(mqAgentMsg{Ready: true, Topic: topic}); err != nil {
		return err
	}
	if !lines.Scan() || lines.Text() != "go" {
		return fmt.Errorf("bench: mq agent: want a line \"go\", got %q (%v)", lines.Text(), lines.Err())
	}
	cpu0 := rusageCPU()
	start := time.Now()
	var wg sync.WaitGroup
	for i, p := range prods {
		wg.Go(func() { produceMQ(ctx, cfg, p, senders[i], start) })
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(mqProgressEvery)
	defer tick.Stop()
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-tick.C:
		}
		// And once at the end, however short the run.
		if err := say(mqAgentMsg{Acked: mqSum(prods, func(p *mqProducer) int64 { return p.acked.Load() })}); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	res := mqAgentMsg{Done: true, StartNS: start.UnixNano(), CPUS: (rusageCPU() - cpu0).Seconds()}
	var ack latHist
	var last time.Time
	for _, p := range prods {
		res.Produced += p.acked.Load()
		res.Errors += p.errs.Load()
		ack.merge(&p.ack)
		if p.last.After(last) {
			last = p.last
		}
	}
	res.Ack, res.LastAckNS = ack.sparse(), last.UnixNano()
	if err := say(res); err != nil {
		return err
	}
	for lines.Scan() { // until the run is over: subscribers may still read the log
	}
	return nil
}

// subscribe runs subscriber sp.Index in this process.
func (sp *mqAgentSpec) subscribe(ctx context.Context, t mqTarget, lines *bufio.Scanner, say func(mqAgentMsg) error) error {
	cfg := &sp.Config
	h, err := t.subscriber(ctx, sp.Index)
	if err != nil {
		return fmt.Errorf("bench: mq agent: subscriber %d: %w", sp.Index, err)
	}
	s := newMQSub(cfg)
	cpu0 := rusageCPU()
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	var runErr error
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		runErr = h.run(sctx, func(part int, val []byte) { s.receive(part, val, time.Now()) })
	}()
	if err := say(mqAgentMsg{Ready: true}); err != nil {
		return err
	}
	if !lines.Scan() {
		return fmt.Errorf("bench: mq agent: no line \"expect N\" (%v)", lines.Err())
	}
	want, err := strconv.ParseInt(strings.TrimPrefix(lines.Text(), "expect "), 10, 64)
	if err != nil || !strings.HasPrefix(lines.Text(), "expect ") {
		return fmt.Errorf("bench: mq agent: want a line \"expect N\", got %q", lines.Text())
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	last, idleSince := s.got.Load(), time.Now()
	for last < want && time.Since(idleSince) < MQDrainIdle {
		select {
		case <-ran:
			return fmt.Errorf("bench: mq agent: subscriber %d: %w", sp.Index, runErr)
		case <-ctx.Done():
			return ctx.Err()
		case now := <-tick.C:
			if n := s.got.Load(); n != last {
				last, idleSince = n, now
			}
		}
	}
	stop()
	<-ran
	if runErr != nil {
		return fmt.Errorf("bench: mq agent: subscriber %d: %w", sp.Index, runErr)
	}
	res := mqAgentMsg{Done: true, Got: s.got.Load(), E2E: s.e2e.sparse(), OutOfOrder: s.outOfOrder, Wrong: s.wrong,
		CPUS: (rusageCPU() - cpu0).Seconds()}
	if !s.last.IsZero() {
		res.LastNS = s.last.UnixNano()
	}
	if err := say(res); err != nil {
		return err
	}
	for lines.Scan() {
	}
	return nil
}

func (m mqAgentMsg) final() bool { return m.Ready || m.Done }
