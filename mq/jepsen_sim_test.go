package mq

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/internal/jepsen"
	"github.com/ndma/ndma/internal/simpool"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/wire/ctrl"
)

// The Jepsen run's shape.
const (
	mqProducers = 3
	mqConsumers = 3 // the last one a push subscriber
	mqFaults    = 30 * time.Second
	mqLossy     = 0.2
)

func mqJepsenLayout() Layout {
	return Layout{Partitions: 3, SegmentBytes: 64 << 10, Segments: 16, MaxBatch: 4 << 10, Groups: 2}
}

// TestSimJepsenMQ runs producers (pushing what they store) and
// consumers (in a group, committing; the last one a push subscriber)
// while a nemesis crashes and restarts memory nodes,
// the switch, producers and consumers, and makes links lossy or cuts
// them, several faults at once. The history is checked exactly
// (jepsen.CheckQueue): no acknowledged record lost, none stored twice,
// none read out of order or skipped, nothing read that was not sent or
// whose send failed. The data region keeps two copies; the control
// region (one copy) is lost when its memory node crashes, and rebuilt
// from the log (Rebuild) once the node is back, every client then
// opening the topic again. No memory node crashes while the switch is
// down (see poolTarget). More seeds: MQ_JEPSEN_SEEDS=FIRST-LAST.
func TestSimJepsenMQ(t *testing.T) {
	seeds, err := jepsen.SeedsFromEnv("MQ_JEPSEN_SEEDS", 601)
	if err != nil {
		t.Fatal(err)
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			r := jepsenMQ(t, seed, mqFaults, 0)
			t.Logf("seed %d: %v", seed, r)
			if !r.OK() {
				t.Errorf("seed %d: anomalies", seed)
			}
			if r.Sends.OK == 0 || r.Deliveries == 0 {
				t.Errorf("seed %d: nothing acknowledged or read", seed)
			}
		})
	}
}

// TestSimJepsenMQDurable runs the Jepsen workload and nemesis on
// durable memory nodes: the node holding the topic's control region
// (one copy) crashes and comes back with it, so the topic goes on
// without Rebuild, and the history checks as on nodes that lend RAM.
func TestSimJepsenMQDurable(t *testing.T) {
	seeds, err := jepsen.SeedsFromEnv("MQ_JEPSEN_DURABLE_SEEDS", 601)
	if err != nil {
		t.Fatal(err)
	}
	simDurable = true
	defer func() { simDurable = false }()
	controlCrashes, controlRebuilds = 0, 0
	for _, seed := range seeds {
		r := jepsenMQ(t, seed, mqFaults, 0)
		t.Logf("seed %d, durable memory nodes: %v", seed, r)
		if !r.OK() {
			t.Errorf("seed %d: anomalies", seed)
		}
		if r.Sends.OK == 0 || r.Deliveries == 0 {
			t.Errorf("seed %d: nothing acknowledged or read", seed)
		}
	}
	if controlCrashes == 0 || controlRebuilds != 0 {
		t.Errorf("the control region's node crashed %d times, the topic rebuilt %d times: want crashes and no rebuild", controlCrashes, controlRebuilds)
	}
}

// TestSimJepsenMQCatchesBug runs the Jepsen workload, without the
// nemesis but with the producers' links lossy (so that writes are
// resent and take a while), with consumers that trust the tail instead
// of the committed offset: they read batches still being written, take
// them for corrupt and skip them. The checker must find acknowledged
// records skipped.
func TestSimJepsenMQCatchesBug(t *testing.T) {
	bugTrustTail = true
	defer func() { bugTrustTail = false }()
	r := jepsenMQ(t, 602, 0, mqLossy)
	t.Logf("with consumers trusting the tail: %v", r)
	if r.OK() {
		t.Fatal("the checker found nothing wrong")
	}
}

// mqClient is a producer or consumer process of the run: crashed and
// restarted by the nemesis.
type mqClient struct {
	mu      jepsen.ChanLock // guards what follows
	s       *simMQ
	ep      *endpoint.Endpoint
	t       *Topic
	ctx     context.Context
	cancel  context.CancelFunc
	gen     int // incarnations
	session int // the consumer session (consumers)
	p       *Producer
	c       *Consumer
	idx     int           // its place among the run's clients
	pushing bool          // a push subscriber (consumers)
	sub     *Subscription // its subscription
}

// start starts the client (again) on a fresh endpoint.
func (c *mqClient) start(consumer bool, sessions *int) error {
	ep := c.s.NewEndpoint(endpoint.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	octx, ocancel := context.WithTimeout(ctx, 10*time.Second)
	defer ocancel()
	t, err := Open(octx, c.s.PoolClient(ep), c.s.topic.Ref())
	var cons *Consumer
	var sub *Subscription
	push := Push{Endpoint: ep, Switch: c.s.Switch.String(), Fabric: c.s.Fab}
	if err == nil && consumer {
		cons, err = NewConsumer(octx, t, ConsumerConfig{Group: "g", FetchBytes: 8 << 10})
	}
	if err == nil && c.pushing {
		sub, err = cons.Subscribe(octx, push)
	}
	if err != nil {
		cancel()
		ep.Close()
		return err
	}
	c.ep, c.t, c.ctx, c.cancel, c.c, c.sub = ep, t, ctx, cancel, cons, sub
	c.gen++
	if consumer {
		*sessions++
		c.session = *sessions
	} else {
		// Producer ids from the seed, so that a run replays (a push
		// group's job is named after its producer).
		id := uint64(c.s.seed)<<32 | uint64(c.idx)<<16 | uint64(c.gen)
		c.p = NewProducer(t, ProducerConfig{ID: id, Acks: AcksAll, Push: &push})
	}
	return nil
}

// crash stops the client at once.
func (c *mqClient) crash() {
	if c.ep == nil {
		return
	}
	c.cancel()
	c.ep.Close()
	c.ep = nil
	if c.sub != nil {
		c.sub.Close()
	}
	if c.p != nil {
		c.p.Close()
	}
}

// jepsenMQ runs the workload, with the nemesis for faults (if not
// zero) and the producers' links losing producerLoss of their
// datagrams throughout.
func jepsenMQ(t *testing.T, seed int64, faults time.Duration, producerLoss float64) *jepsen.QueueReport {
	var report *jepsen.QueueReport
	simTopic(t, seed, 4, mqJepsenLayout(), CreateOptions{Replicas: 2, ControlColumns: 1}, func(t *testing.T, s *simMQ) {
		h := jepsen.NewQueueHistory()
		mu := jepsen.NewChanLock() // the clients, switch and memory nodes, between faults
		sessions := 0
		var prods, conss []*mqClient
		for i := range mqProducers + mqConsumers {
			c := &mqClient{mu: jepsen.NewChanLock(), s: s, idx: i, pushing: i == mqProducers+mqConsumers-1}
			if err := c.start(i >= mqProducers, &sessions); err != nil {
				t.Fatal(err)
			}
			if i < mqProducers {
				prods = append(prods, c)
			} else {
				conss = append(conss, c)
			}
		}
		if producerLoss > 0 {
			l := s.Link
			l.Loss = producerLoss
			for _, c := range prods {
				s.Net.Locked(func() { s.Net.SetLink(c.ep.LocalAddr(), l, l) })
			}
		}
		stop := make(chan struct{})
		var wg, restarts sync.WaitGroup
		for i, c := range prods {
			wg.Go(func() { mqProduceLoop(seed, i, c, h, stop) })
		}
		for _, c := range conss {
			wg.Go(func() { mqConsumeLoop(c, h, stop) })
		}
		if faults > 0 {
			fs := mqFaultsOf(s, mu, &restarts, append(prods, conss...), &sessions)
			fh := jepsen.NewHistory(nil)
			nem, err := jepsen.NewNemesis(rand.New(rand.NewPCG(uint64(seed), 0xfa)), jepsen.NemesisConfig{
				Faults: fs, Total: faults, MinGap: 500 * time.Millisecond, MaxGap: 3 * time.Second,
				MinDuration: time.Second, MaxDuration: 6 * time.Second, MaxActive: 3}, fh)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("seed %d: nemesis plan %v", seed, nem.Plan())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			if err := nem.Run(ctx); err != nil {
				t.Errorf("seed %d: nemesis: %v", seed, err)
			}
			restarts.Wait()
			kinds := make(map[string]int)
			for _, f := range fh.Faults() {
				if f.Err == nil {
					kinds[f.Kind]++
				}
			}
			t.Logf("seed %d: faults %v", seed, kinds)
		}
		// Healed: the clients go on a while, then stop, and one more
		// consumer reads every partition from its start to its end.
		time.Sleep(5 * time.Second)
		close(stop)
		wg.Wait()
		for _, c := range conss {
			t.Logf("seed %d: consumer %+v", seed, c.c.Stats())
			if c.sub != nil {
				t.Logf("seed %d: subscription %+v", seed, c.sub.Stats())
			}
		}
		for _, c := range prods {
			t.Logf("seed %d: producer %+v", seed, c.p.Stats())
		}
		// The producers stop, each pushing what it stored first, before
		// any client goes: the last pushes and the final reader's start
		// do not meet at one instant in the scheduler's order.
		for _, c := range prods {
			c.p.Close()
		}
		for _, c := range append(prods, conss...) {
			c.crash()
		}
		final := &mqClient{mu: jepsen.NewChanLock(), s: s}
		if err := final.start(true, &sessions); err != nil {
			t.Fatal(err)
		}
		defer final.crash()
		final.c = mustConsumer(t, final.t)
		mqFinalRead(t, final, h)
		report = jepsen.CheckQueue(h, final.session)
	})
	return report
}

func mustConsumer(t *testing.T, tp *Topic) *Consumer {
	c, err := NewConsumer(context.Background(), tp, ConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// mqValue is the record value carrying id v.
func mqValue(v uint64) []byte { return binary.LittleEndian.AppendUint64([]byte("record "), v) }

// mqProduceLoop is one producer's loop: batches of one to three
// records to a random partition; a produce whose outcome is unknown is
// sent again as it was, a few times.
func mqProduceLoop(seed int64, id int, c *mqClient, h *jepsen.QueueHistory, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(id)))
	for n := uint64(1); ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		time.Sleep(time.Duration(5+rng.IntN(20)) * time.Millisecond)
		part := rng.IntN(mqJepsenLayout().Partitions)
		var vals []uint64
		var rs []Record
		for i := range 1 + rng.IntN(3) {
			v := uint64(id+1)<<40 | n<<8 | uint64(i)
			vals = append(vals, v)
			rs = append(rs, Record{Key: []byte{byte(i)}, Value: mqValue(v)})
		}
		c.mu.Lock()
		p, cctx, gen, down := c.p, c.ctx, c.gen, c.ep == nil
		c.mu.Unlock()
		if down {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		call := h.Send(id, part, vals)
		var ack Ack
		var err error
		for range 3 {
			ctx, cancel := context.WithTimeout(cctx, 5*time.Second)
			ack, err = p.Produce(ctx, part, rs)
			cancel()
			if !errors.Is(err, ErrUnknownOutcome) || cctx.Err() != nil {
				break
			}
		}
		c.mu.Lock()
		crashed := c.gen != gen
		c.mu.Unlock()
		switch {
		case err == nil || errors.Is(err, ErrNotAllCopies):
			call.OK(ack.Offset)
		case crashed || errors.Is(err, ErrUnknownOutcome):
			call.Unknown(err)
		default:
			call.Fail(err)
		}
		if err != nil {
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// mqConsumeLoop is one consumer's loop: it fetches every partition in
// turn with a short long poll (a subscriber takes what is pushed or
// repaired), records what it reads, and commits the group's offsets now
// and then.
func mqConsumeLoop(c *mqClient, h *jepsen.QueueHistory, stop <-chan struct{}) {
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		c.mu.Lock()
		cons, sub, cctx, session, down := c.c, c.sub, c.ctx, c.session, c.ep == nil
		c.mu.Unlock()
		if down {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		part := n % mqJepsenLayout().Partitions
		ctx, cancel := context.WithTimeout(cctx, 5*time.Second)
		var rs []Record
		var err error
		if sub != nil {
			rs, err = sub.Next(ctx, 50*time.Millisecond)
		} else {
			rs, err = cons.Fetch(ctx, part, 50*time.Millisecond)
		}
		if err == nil && n%5 == 0 {
			err = cons.Commit(ctx, part)
		}
		cancel()
		mqDeliver(h, session, rs)
		if err != nil {
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func mqDeliver(h *jepsen.QueueHistory, session int, rs []Record) {
	for _, r := range rs {
		var v uint64
		if len(r.Value) == 15 {
			v = binary.LittleEndian.Uint64(r.Value[7:])
		}
		h.Deliver(jepsen.Delivery{Session: session, Partition: r.Partition, Offset: r.Offset, Index: r.Index, Value: v})
	}
}

// mqFinalRead reads every partition from its start until it reaches the
// committed offset with nothing reserved after it (holes left by
// crashed producers are sealed on the way).
func mqFinalRead(t *testing.T, c *mqClient, h *jepsen.QueueHistory) {
	var holes uint64
	defer func() { t.Logf("holes sealed: %d", holes) }()
	for p := range mqJepsenLayout().Partitions {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			rs, err := c.c.Fetch(ctx, p, time.Second)
			var st PartitionState
			if err == nil {
				st, err = c.t.State(ctx, p)
			}
			cancel()
			mqDeliver(h, c.session, rs)
			if err == nil && st.Start != 0 {
				t.Fatalf("partition %d: the run filled the ring (start %d): the final read cannot see every record", p, st.Start)
			}
			if err == nil && len(rs) == 0 && c.c.Position(p) >= st.Committed && st.Committed == st.Tail {
				holes += st.Holes
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("partition %d: the final read did not reach the end: %+v at %d, %v", p, st, c.c.Position(p), err)
			}
		}
	}
}

// mqRestart starts client c again, every second while it cannot (the
// switch is down), for up to a minute.
func mqRestart(s *simMQ, mu jepsen.ChanLock, c *mqClient, consumer bool, sessions *int) {
	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		c.mu.Lock()
		err := c.start(consumer, sessions)
		c.mu.Unlock()
		mu.Unlock()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Errorf("seed %d: a client could not be started again: %v", s.seed, err)
			return
		}
		time.Sleep(time.Second)
	}
}

// mqFaultsOf are the faults the nemesis draws from.
func mqFaultsOf(s *simMQ, mu jepsen.ChanLock, restarts *sync.WaitGroup, clients []*mqClient, sessions *int) []jepsen.Fault {
	var fs []jepsen.Fault
	link := func(name, kind, target string, addr func() (netip.AddrPort, bool), loss float64) jepsen.Fault {
		return jepsen.LinkFault(name, kind, target, mu, addr, loss, s.SetLoss)
	}
	for i, c := range clients {
		target := fmt.Sprint("client ", i)
		consumer := c.c != nil
		addr := func() (netip.AddrPort, bool) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.ep == nil {
				return netip.AddrPort{}, false
			}
			return c.ep.LocalAddr(), true
		}
		fs = append(fs, jepsen.Fault{Name: "crash " + target, Kind: "crash client", Target: target,
			Start: func() error {
				c.mu.Lock()
				defer c.mu.Unlock()
				c.crash()
				return nil
			},
			Stop: func() error {
				restarts.Go(func() { mqRestart(s, mu, c, consumer, sessions) })
				return nil
			}},
			link("loss "+target, "lossy link", target, addr, mqLossy),
			link("cut "+target, "cut link", target, addr, 1))
	}
	fs = append(fs, mqMemFaults(s, mu, restarts, clients, sessions)...)
	down := false
	fs = append(fs, jepsen.Fault{Name: "crash switch", Kind: "crash switch", Target: poolTarget,
		Start: func() error {
			mu.Lock()
			defer mu.Unlock()
			s.Srv.Close()
			down = true
			return nil
		},
		Stop: func() error {
			if !down {
				return nil // Start skipped it
			}
			down = false
			mu.Lock()
			defer mu.Unlock()
			s.StartSwitch()
			return nil
		}})
	return fs
}

// poolTarget is the target of the memory nodes' and the switch's
// crashes: one at a time (a memory node crashes only while every copy of
// the topic is in place; the switch may crash while a copy is being
// rebuilt).
const poolTarget = "pool"

// mqMemFaults crash the memory nodes, one at a time and only while every
// copy of the topic is in place: a node holding only data copies (they
// are rebuilt from the other copy when it comes back), or the node
// holding the control region, which is then lost: the topic's counters
// are rebuilt from the log (Rebuild) and every client opens the topic
// again.
func mqMemFaults(s *simMQ, mu jepsen.ChanLock, restarts *sync.WaitGroup, clients []*mqClient, sessions *int) []jepsen.Fault {
	stat := s.Endpoint()
	pc := s.PoolClient(stat)
	whole := func() error { return s.topicWhole(stat) }
	// The control region's node holds it and a data column.
	isControl := func(m *simpool.Mem) bool { return m.Node != nil && m.Node.Stats().Server.Pool.GrantsHeld > 1 }
	var fs []jepsen.Fault
	for i, m := range s.Mems {
		crashed := false
		fs = append(fs, jepsen.Fault{Name: fmt.Sprint("crash memory node ", i), Kind: "crash memory node", Target: poolTarget,
			Start: func() error {
				mu.Lock()
				defer mu.Unlock()
				if m.Node == nil || isControl(m) {
					return fmt.Errorf("%w: memory node %d is down or holds the control region", jepsen.ErrSkip, i)
				}
				if err := whole(); err != nil {
					return err
				}
				s.CrashMem(m)
				crashed = true
				return nil
			},
			Stop: func() error {
				if !crashed {
					return nil
				}
				crashed = false
				mu.Lock()
				defer mu.Unlock()
				return s.StartMem(m, time.Second)
			}})
	}
	var lost *simpool.Mem
	// On durable nodes the control region comes back with its node.
	name := "lose the control region"
	if simDurable {
		name = "crash the control region's node"
	}
	fs = append(fs, jepsen.Fault{Name: name, Kind: name, Target: poolTarget,
		Start: func() error {
			mu.Lock()
			defer mu.Unlock()
			if err := whole(); err != nil {
				return err
			}
			for _, m := range s.Mems {
				if isControl(m) {
					s.CrashMem(m)
					lost = m
					controlCrashes++
					return nil
				}
			}
			return fmt.Errorf("%w: no memory node holds the control region", jepsen.ErrSkip)
		},
		Stop: func() error {
			if lost == nil {
				return nil
			}
			m := lost
			lost = nil
			mu.Lock()
			defer mu.Unlock()
			if err := s.StartMem(m, time.Second); err != nil {
				return err
			}
			if m.Durable {
				return nil
			}
			return mqRebuild(s, mu, pc, restarts, clients, sessions)
		}})
	return fs
}

// topicWhole reports (jepsen.ErrSkip) when a copy of the topic's regions
// is missing or being rebuilt. The caller holds the harness's lock.
func (s *simMQ) topicWhole(stat *endpoint.Endpoint) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	ps, err := stat.PoolStat(ctx, s.Switch.String(), s.Fab)
	cancel()
	ok := err == nil
	for _, r := range ps.Regions {
		if r.Region == s.topic.ctl.ID() || r.Region == s.topic.data.ID() {
			ok = ok && r.Health == ctrl.HealthOK
		}
	}
	if !ok {
		return fmt.Errorf("%w: the topic is not whole (%+v, %v)", jepsen.ErrSkip, ps.Regions, err)
	}
	return nil
}

// controlCrashes and controlRebuilds count the control region's node
// crashed by the nemesis and the topic rebuilt (mqRebuild).
var controlCrashes, controlRebuilds int

// mqRebuild rebuilds the topic's lost control region, once no producer
// can still be writing, and starts every client that is up again on the
// new one. The caller holds the harness's lock.
func mqRebuild(s *simMQ, mu jepsen.ChanLock, pc *pool.Client, restarts *sync.WaitGroup, clients []*mqClient, sessions *int) error {
	controlRebuilds++
	time.Sleep(DefaultSealTimeout)
	old := s.topic.Ref()
	var t *Topic
	var err error
	for range 30 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t, err = Rebuild(ctx, pc, old, 1)
		cancel()
		if err == nil {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r, err := pc.Open(ctx, old.Control, old.ControlKey); err == nil {
		_ = pc.Free(ctx, r)
	}
	s.topic = t
	for _, c := range clients {
		consumer := c.c != nil
		c.mu.Lock()
		up := c.ep != nil
		if up {
			c.crash()
			err = c.start(consumer, sessions)
		}
		c.mu.Unlock()
		if up && err != nil {
			restarts.Go(func() { mqRestart(s, mu, c, consumer, sessions) })
		}
	}
	return nil
}
