package mq

import (
	"testing"
	"testing/synctest"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/internal/simpool"
)

var testToken = []byte("mq test token")

// simMQ is a switch and memory nodes lending to its pool, with a topic,
// on a simulated network inside a synctest bubble.
type simMQ struct {
	*simpool.Fabric
	t     *testing.T
	seed  int64
	topic *Topic // as its creator opened it
}

// testLayout is a small topic: 3 partitions of 4 segments of 8 KiB.
func testLayout() Layout {
	return Layout{Partitions: 3, SegmentBytes: 8 << 10, Segments: 4, MaxBatch: 4 << 10, Groups: 4}
}

// simDurable makes simTopic's memory nodes durable (ndma memd --dir):
// they keep their memory across crashes.
var simDurable bool

// simTopic runs f with a switch, nodes memory nodes of 4 MiB and a
// topic of layout l shaped by o.
func simTopic(t *testing.T, seed int64, nodes int, l Layout, o CreateOptions, f func(t *testing.T, s *simMQ)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		t.Logf("seed %d", seed)
		s := &simMQ{Fabric: simpool.Start(t, simpool.Config{Seed: seed, Token: testToken, Nodes: nodes, Durable: simDurable}), t: t, seed: seed}
		defer s.Close()
		var err error
		if s.topic, err = Create(s.Ctx(), s.PoolClient(s.Endpoint()), "test", l, o); err != nil {
			t.Fatal(err)
		}
		f(t, s)
	})
}

// open opens the topic on a new endpoint: a client of its own.
func (s *simMQ) open() (*Topic, *endpoint.Endpoint) {
	ep := s.Endpoint()
	t, err := Open(s.Ctx(), s.PoolClient(ep), s.topic.Ref())
	if err != nil {
		s.t.Fatalf("seed %d: open: %v", s.seed, err)
	}
	return t, ep
}

// dataOnlyNodes are the memory nodes that hold none of the topic's
// control region, for a topic created with ControlColumns 1 and a data
// region on every node: the one node holding both regions is left out.
func (s *simMQ) dataOnlyNodes() []*simpool.Mem {
	var data []*simpool.Mem
	for _, m := range s.Mems {
		if m.Node.Stats().Server.Pool.GrantsHeld == 1 {
			data = append(data, m)
		}
	}
	if len(data) != len(s.Mems)-1 {
		s.t.Fatalf("seed %d: %d of %d memory nodes hold only the data region, want all but one", s.seed, len(data), len(s.Mems))
	}
	return data
}

// controlNode is the memory node that holds tp's control region, for a
// topic created with ControlColumns 1: the one that serves a read of a
// partition header (nothing else may run meanwhile).
func (s *simMQ) controlNode(tp *Topic) *simpool.Mem {
	served := func() []uint64 {
		var n []uint64
		for _, m := range s.Mems {
			n = append(n, m.Node.Stats().Server.Pool.Served)
		}
		return n
	}
	before := served()
	if _, err := tp.State(s.Ctx(), 0); err != nil {
		s.t.Fatal(err)
	}
	var found *simpool.Mem
	for i, n := range served() {
		if n != before[i] {
			if found != nil {
				s.t.Fatalf("seed %d: more than one memory node served a partition header", s.seed)
			}
			found = s.Mems[i]
		}
	}
	if found == nil {
		s.t.Fatalf("seed %d: no memory node served a partition header", s.seed)
	}
	return found
}
