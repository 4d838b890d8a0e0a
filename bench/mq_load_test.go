package bench

import (
	"context"
	"math/rand"
	"slices"
	"sync"
	"testing"
	"time"
)

// memQueue is a queue in this process for the load generator's tests:
// a log per partition; it records every request's size and can drop
// one record from what subscribers see.
type memQueue struct {
	mu      sync.Mutex
	cond    *sync.Cond
	logs    [][][]byte
	batches []int
	drop    int // the index in partition 0's log that subscribers skip (-1: none)
}

func newMemQueue(parts int) *memQueue {
	q := &memQueue{logs: make([][][]byte, parts), drop: -1}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *memQueue) sender(context.Context, int, int) (mqSender, error) { return q, nil }

func (q *memQueue) send(_ context.Context, part int, vals [][]byte) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.logs[part] = append(q.logs[part], vals...)
	q.batches = append(q.batches, len(vals))
	q.cond.Broadcast()
	return nil
}

func (q *memQueue) subscriber(context.Context, int) (mqSubscriber, error) { return &memSub{q: q}, nil }

type memSub struct{ q *memQueue }

func (s *memSub) run(ctx context.Context, got func(int, []byte)) error {
	stop := context.AfterFunc(ctx, func() {
		s.q.mu.Lock()
		s.q.cond.Broadcast()
		s.q.mu.Unlock()
	})
	defer stop()
	pos := make([]int, len(s.q.logs))
	s.q.mu.Lock()
	defer s.q.mu.Unlock()
	for ctx.Err() == nil {
		moved := false
		for p, l := range s.q.logs {
			for ; pos[p] < len(l); pos[p]++ {
				if p != 0 || pos[p] != s.q.drop {
					got(p, l[pos[p]])
				}
				moved = true
			}
		}
		if !moved {
			s.q.cond.Wait()
		}
	}
	return nil
}

func (q *memQueue) procs() *procGroup { return &procGroup{} }
func (q *memQueue) close()            {}

// runMem runs the load generator on a memQueue.
func runMem(t *testing.T, cfg MQConfig, q *memQueue) MQResult {
	t.Helper()
	cfg.Binary = "unused"
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	res, err := runMQLoad(t.Context(), &cfg, "mem", q)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestMQLoadCounts: unpaced producers fill their batches (the last one
// with what is left), send them to the partitions in turn, and every
// subscriber receives every record in order.
func TestMQLoadCounts(t *testing.T) {
	q := newMemQueue(3)
	r := runMem(t, MQConfig{Producers: 2, Subscribers: 4, Partitions: 3, Batch: 8, InFlight: 1, Records: 100}, q)
	if r.Produced != 200 || r.Delivered != 800 || r.OutOfOrder != 0 || r.Wrong != 0 || r.Errors != 0 {
		t.Errorf("counts %+v", r)
	}
	want := slices.Repeat([]int{8}, 2*12)
	want = append(want, 4, 4)
	if slices.Sort(q.batches); !slices.Equal(q.batches, slices.Sorted(slices.Values(want))) {
		t.Errorf("batches of %v records, want %v", q.batches, want)
	}
	// Producer i starts at partition i: each sends 13 batches in turn,
	// its last (of 4 records) to the partition it started at.
	for p, want := range []int{68, 68, 64} {
		if len(q.logs[p]) != want {
			t.Errorf("partition %d holds %d records, want %d", p, len(q.logs[p]), want)
		}
	}
	if r.ProducedPerSec <= 0 || r.EndToEndP99 < r.EndToEndP50 || r.AckP99 < r.AckP50 {
		t.Errorf("rates or latencies %+v", r)
	}
}

// TestMQLoadLinger: a paced producer sends what it has when its linger
// is over, so a long linger gathers several records a request and a
// large batch is never filled at this rate.
func TestMQLoadLinger(t *testing.T) {
	q := newMemQueue(1)
	r := runMem(t, MQConfig{Subscribers: 1, Batch: 1000, InFlight: 1, Rate: 1000, Linger: 20 * time.Millisecond, Records: 100}, q)
	if r.Produced != 100 || r.Delivered != 100 {
		t.Fatalf("counts %+v", r)
	}
	// 100 records due 1 ms apart, cut every 20 ms: about 5 requests;
	// a stalled scheduler makes them fewer and larger, never one.
	if len(q.batches) < 2 || len(q.batches) > 50 {
		t.Errorf("%d requests of %v records, want them cut by the 20 ms linger", len(q.batches), q.batches)
	}
}

// TestMQLoadShort: a run whose subscribers miss a record ends once they
// have received nothing for MQDrainIdle, one delivery short per
// subscriber.
func TestMQLoadShort(t *testing.T) {
	q := newMemQueue(1)
	q.drop = 5
	r := runMem(t, MQConfig{Subscribers: 2, Batch: 4, InFlight: 2, Records: 40}, q)
	if r.Produced != 40 || r.Delivered != 78 {
		t.Errorf("counts %+v, want 78 deliveries of 40 records to 2 subscribers", r)
	}
}

// TestMQSubChecks: a subscriber counts a record received twice or after
// a later one as out of order, and one of another partition, another
// producer or not the benchmark's as wrong.
func TestMQSubChecks(t *testing.T) {
	s := &mqSub{next: [][]uint64{make([]uint64, 2)}}
	rec := func(producer, part int, seq uint64) []byte {
		b := make([]byte, mqMinRecord)
		mqRecord(b, producer, part, seq, time.Now())
		return b
	}
	now := time.Now()
	for _, seq := range []uint64{1, 2, 4, 3, 4, 5} {
		s.receive(1, rec(0, 1, seq), now)
	}
	s.receive(0, rec(0, 1, 6), now)           // another partition's
	s.receive(1, rec(1, 1, 1), now)           // an unknown producer's
	s.receive(1, []byte("not a record"), now) // not the benchmark's
	if s.got.Load() != 6 || s.outOfOrder != 2 || s.wrong != 3 {
		t.Errorf("got %d, out of order %d, wrong %d; want 6, 2, 3", s.got.Load(), s.outOfOrder, s.wrong)
	}
}

// TestLatHist compares the histogram's percentiles with the exact ones
// of random durations: within 1/32.
func TestLatHist(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var h, a, b latHist
	var ds []time.Duration
	for i := range 20000 {
		d := time.Duration(rng.ExpFloat64() * float64(200*time.Microsecond))
		if i%97 == 0 {
			d = time.Duration(rng.Int63n(int64(time.Second)))
		}
		ds = append(ds, d)
		h.add(d)
		if i%2 == 0 {
			a.add(d)
		} else {
			b.add(d)
		}
	}
	a.merge(&b)
	slices.Sort(ds)
	for _, p := range []int{1, 50, 90, 99, 100} {
		exact := us(ds[(len(ds)*p+99)/100-1])
		got := h.pctUS(p)
		if got < exact*(1-1.0/32)-0.001 || got > exact*(1+1.0/32)+0.001 {
			t.Errorf("p%d: %.3f µs, exact %.3f µs", p, got, exact)
		}
		if a.pctUS(p) != got {
			t.Errorf("p%d: merged halves %.3f µs, whole %.3f µs", p, a.pctUS(p), got)
		}
	}
	var empty latHist
	if empty.pctUS(50) != 0 {
		t.Error("an empty histogram has a percentile")
	}
	for _, v := range []uint64{0, 63, 64, 65, 1 << 20, 1<<63 + 12345} {
		if m := histMid(histBucket(v)); v >= 64 && (float64(m) < float64(v)*(1-1.0/32) || float64(m) > float64(v)*(1+1.0/32)) {
			t.Errorf("%d lands in a bucket around %d", v, m)
		} else if v < 64 && m != v {
			t.Errorf("%d lands in bucket %d", v, m)
		}
	}
}
