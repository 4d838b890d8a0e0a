package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// MQDrainIdle is how long the subscribers may receive nothing, after
// the producers have ended, before a run ends short of every record.
const MQDrainIdle = 2 * time.Second

// mqSendTimeout bounds one produce request: one that takes longer
// counts as failed.
const mqSendTimeout = 10 * time.Second

// mqProducer is one producer's state and counts.
type mqProducer struct {
	id    int
	seq   []uint64 // the last sequence number, per partition
	acked atomic.Int64
	errs  atomic.Int64
	mu    sync.Mutex // guards ack and last
	ack   latHist
	last  time.Time // the last acknowledgement
}

// mqBatch is a request a producer hands to its senders.
type mqBatch struct {
	part int
	vals [][]byte
}

// mqSub is one subscriber's counts, kept by its own goroutine and read
// by others once it has ended (got is read at any time).
type mqSub struct {
	got        atomic.Int64
	e2e        latHist
	last       time.Time
	next       [][]uint64 // per producer and partition: the sequence number expected next
	outOfOrder int64
	wrong      int64
}

// receive counts record val of partition part at now.
func (s *mqSub) receive(part int, val []byte, now time.Time) {
	h, ok := parseMQRecord(val)
	if !ok || h.part != part || h.producer >= len(s.next) || part >= len(s.next[h.producer]) {
		s.wrong++
		return
	}
	s.got.Add(1)
	s.last = now
	s.e2e.add(now.Sub(time.Unix(0, h.made)))
	exp := &s.next[h.producer][part]
	if h.seq < *exp {
		s.outOfOrder++
	} else {
		*exp = h.seq + 1
	}
}

// runMQLoad runs cfg's producers and subscribers against t and makes
// the row.
func runMQLoad(ctx context.Context, cfg *MQConfig, name string, t mqTarget) (MQResult, error) {
	subs := make([]*mqSub, cfg.Subscribers)
	handles := make([]mqSubscriber, cfg.Subscribers)
	for j := range subs {
		var err error
		if handles[j], err = t.subscriber(ctx, j); err != nil {
			return MQResult{}, fmt.Errorf("subscriber %d: %w", j, err)
		}
		subs[j] = newMQSub(cfg)
	}
	prods, senders, err := newMQProducers(ctx, cfg, t)
	if err != nil {
		return MQResult{}, err
	}

	subCtx, stopSubs := context.WithCancel(ctx)
	defer stopSubs()
	var subWG sync.WaitGroup
	subErrs := make([]error, len(subs))
	for j, s := range subs {
		subWG.Go(func() {
			subErrs[j] = handles[j].run(subCtx, func(part int, val []byte) { s.receive(part, val, time.Now()) })
		})
	}
	cpu0, self0 := t.procs().cpu(), rusageCPU()
	start := time.Now()
	var prodWG sync.WaitGroup
	for i, p := range prods {
		prodWG.Go(func() { produceMQ(ctx, cfg, p, senders[i], start) })
	}
	prodDone := make(chan struct{})
	go func() { prodWG.Wait(); close(prodDone) }()
	waitMQ(ctx, cfg, prods, subs, start, prodDone)
	cpu1, self1 := t.procs().cpu(), rusageCPU()
	stopSubs()
	subWG.Wait()
	if err := errors.Join(subErrs...); err != nil {
		return MQResult{}, err
	}
	if ctx.Err() != nil {
		return MQResult{}, ctx.Err()
	}
	return mqRow(cfg, name, prods, subs, start, cpu0, cpu1, self1-self0)
}

// waitMQ waits until the producers have ended and the subscribers have
// every record acknowledged to them, or have received nothing for
// MQDrainIdle since the producers ended; it reports progress meanwhile.
func waitMQ(ctx context.Context, cfg *MQConfig, prods []*mqProducer, subs []*mqSub, start time.Time, prodDone <-chan struct{}) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var (
		ended                bool
		delivered, lastCount int64
		idleSince, lastProg  time.Time
	)
	for {
		select {
		case <-ctx.Done():
			<-prodDone
			return
		case <-prodDone:
			prodDone, ended, idleSince = nil, true, time.Now()
		case now := <-tick.C:
			if cfg.Progress != nil && now.Sub(lastProg) >= 200*time.Millisecond {
				lastProg = now
				if cfg.Records > 0 {
					cfg.Progress(int(mqSum(prods, func(p *mqProducer) int64 { return p.acked.Load() })), cfg.Records*cfg.Producers)
				} else {
					cfg.Progress(int(min(now.Sub(start), cfg.Duration).Milliseconds()), int(cfg.Duration.Milliseconds()))
				}
			}
			if !ended {
				continue
			}
			want := mqSum(prods, func(p *mqProducer) int64 { return p.acked.Load() })
			all := true
			delivered = 0
			for _, s := range subs {
				n := s.got.Load()
				delivered += n
				all = all && n >= want
			}
			if delivered != lastCount {
				lastCount, idleSince = delivered, now
			}
			if all || now.Sub(idleSince) >= MQDrainIdle {
				return
			}
		}
	}
}

func mqSum(prods []*mqProducer, f func(*mqProducer) int64) int64 {
	var n int64
	for _, p := range prods {
		n += f(p)
	}
	return n
}

// produceMQ runs producer p: it makes records (paced by cfg.Rate),
// gathers them in batches of up to cfg.Batch (waiting at most
// cfg.Linger for one to fill), and hands each to a free sender, until
// cfg.Records records or cfg.Duration. An unpaced producer makes a
// batch once a sender is free for it, so that its records' end-to-end
// time starts when they can be sent; a paced one makes its records when
// they are due, and they wait for a free sender if none is.
func produceMQ(ctx context.Context, cfg *MQConfig, p *mqProducer, senders []mqSender, start time.Time) {
	queue := make(chan mqBatch, len(senders))
	free := make(chan struct{}, len(senders))
	var wg sync.WaitGroup
	for _, s := range senders {
		free <- struct{}{}
		wg.Go(func() {
			for b := range queue {
				p.sent(ctx, s, b)
				free <- struct{}{}
			}
		})
	}
	defer func() { close(queue); wg.Wait() }()
	end := start.Add(cfg.Duration)
	part := p.id % cfg.Partitions
	var (
		batch      [][]byte
		batchStart time.Time
		made       int
		held       bool // a free sender is this producer's
	)
	acquire := func() bool {
		select {
		case <-free:
			held = true
		case <-ctx.Done():
		}
		return held
	}
	dispatch := func() bool {
		if !held && !acquire() {
			return false
		}
		queue <- mqBatch{part: part, vals: batch}
		batch, part, held = nil, (part+1)%cfg.Partitions, false
		return true
	}
	for ctx.Err() == nil {
		due := time.Now()
		if cfg.Rate > 0 {
			due = start.Add(time.Duration(float64(made) / cfg.Rate * float64(time.Second)))
		}
		over := (cfg.Records > 0 && made >= cfg.Records) || (cfg.Records == 0 && !due.Before(end))
		// A paced producer sends what it has once the linger is over
		// before the next record is due; an unpaced one fills its batch.
		if len(batch) > 0 && (over || cfg.Rate > 0 && due.After(batchStart.Add(cfg.Linger))) {
			if !over {
				sleepUntil(ctx, batchStart.Add(cfg.Linger))
			}
			if !dispatch() {
				return
			}
			continue
		}
		if over {
			return
		}
		if cfg.Rate == 0 && !held {
			if !acquire() {
				return
			}
			continue // the time to end may have come meanwhile
		}
		sleepUntil(ctx, due)
		now := time.Now()
		if len(batch) == 0 {
			batchStart = now
		}
		p.seq[part]++
		v := make([]byte, cfg.RecordSize)
		mqRecord(v, p.id, part, p.seq[part], now)
		batch = append(batch, v)
		made++
		if len(batch) == cfg.Batch && !dispatch() {
			return
		}
	}
}

// sent sends b with s and counts it.
func (p *mqProducer) sent(ctx context.Context, s mqSender, b mqBatch) {
	began := time.Now()
	sctx, cancel := context.WithTimeout(ctx, mqSendTimeout)
	err := s.send(sctx, b.part, b.vals)
	cancel()
	now := time.Now()
	if err != nil {
		p.errs.Add(1)
		return
	}
	p.acked.Add(int64(len(b.vals)))
	p.mu.Lock()
	p.ack.add(now.Sub(began))
	p.last = now
	p.mu.Unlock()
}

// sleepUntil sleeps until t or ctx's end.
func sleepUntil(ctx context.Context, t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
}

// mqRow makes the row from the counts.
func mqRow(cfg *MQConfig, name string, prods []*mqProducer, subs []*mqSub, start time.Time,
	cpu0, cpu1 map[string]time.Duration, self time.Duration) (MQResult, error) {
	res := MQResult{Target: name, Producers: cfg.Producers, Subscribers: cfg.Subscribers, Partitions: cfg.Partitions,
		RecordSize: cfg.RecordSize, Batch: cfg.Batch, InFlight: cfg.InFlight, Copies: cfg.Copies, Processes: map[string]float64{}}
	var ack, e2e latHist
	var lastAck, lastGot time.Time
	for _, p := range prods {
		res.Produced += p.acked.Load()
		res.Errors += p.errs.Load()
		ack.merge(&p.ack)
		if p.last.After(lastAck) {
			lastAck = p.last
		}
	}
	for _, s := range subs {
		res.Delivered += s.got.Load()
		res.OutOfOrder += s.outOfOrder
		res.Wrong += s.wrong
		e2e.merge(&s.e2e)
		if s.last.After(lastGot) {
			lastGot = s.last
		}
	}
	if res.Produced == 0 || res.Delivered == 0 {
		return res, fmt.Errorf("%d records acknowledged, %d delivered (%d produce requests failed)", res.Produced, res.Delivered, res.Errors)
	}
	mb := float64(cfg.RecordSize) / 1e6
	res.ProducedPerSec = round(float64(res.Produced)/lastAck.Sub(start).Seconds(), 5)
	res.DeliveredPerSec = round(float64(res.Delivered)/lastGot.Sub(start).Seconds(), 5)
	res.ProducedMBPerSec = round(res.ProducedPerSec*mb, 4)
	res.DeliveredMBPerSec = round(res.DeliveredPerSec*mb, 4)
	res.AckP50, res.AckP99 = ack.pctUS(50), ack.pctUS(99)
	res.EndToEndP50, res.EndToEndP99 = e2e.pctUS(50), e2e.pctUS(99)
	perRec := func(d time.Duration) float64 { return round(us(d)/float64(res.Delivered), 4) }
	res.ClientCPU = perRec(self)
	var server time.Duration
	for n, t1 := range cpu1 {
		if t0, ok := cpu0[n]; ok {
			res.Processes[n] = perRec(t1 - t0)
			server += t1 - t0
		}
	}
	res.ServerCPU = perRec(server)
	return res, nil
}

// newMQProducers makes cfg's producers and, for each, cfg.InFlight
// senders of t.
func newMQProducers(ctx context.Context, cfg *MQConfig, t mqTarget) ([]*mqProducer, [][]mqSender, error) {
	prods := make([]*mqProducer, cfg.Producers)
	senders := make([][]mqSender, cfg.Producers)
	for i := range prods {
		prods[i] = &mqProducer{id: i, seq: make([]uint64, cfg.Partitions)}
		for k := range cfg.InFlight {
			s, err := t.sender(ctx, i, k)
			if err != nil {
				return nil, nil, fmt.Errorf("producer %d: %w", i, err)
			}
			senders[i] = append(senders[i], s)
		}
	}
	return prods, senders, nil
}

// newMQSub is a subscriber's counts for cfg's producers and partitions.
func newMQSub(cfg *MQConfig) *mqSub {
	s := &mqSub{next: make([][]uint64, cfg.Producers)}
	for i := range s.next {
		s.next[i] = make([]uint64, cfg.Partitions)
	}
	return s
}

// serverCPU adds to each[name] each server process's CPU between cpu0
// and cpu1, as per makes it, and returns their sum, as per makes it.
func serverCPU(each map[string]float64, cpu0, cpu1 map[string]time.Duration, per func(seconds float64) float64) float64 {
	var sum float64
	for n, t1 := range cpu1 {
		if t0, ok := cpu0[n]; ok {
			each[n] = per((t1 - t0).Seconds())
			sum += (t1 - t0).Seconds()
		}
	}
	return per(sum)
}
