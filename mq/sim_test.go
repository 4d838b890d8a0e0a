package mq

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/memnode/node"
	"github.com/ndma/ndma/memnode/server"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

var testToken = []byte("mq test token")

// simMQ is a switch and memory nodes lending to its pool, with a topic,
// on a simulated network inside a synctest bubble.
type simMQ struct {
	t     *testing.T
	seed  int64
	net   *simnet.Network
	link  simnet.LinkConfig
	swA   netip.AddrPort
	srv   *fabric.Server
	fab   endpoint.FabricOptions
	port  int
	eps   []*endpoint.Endpoint // closed at the end
	topic *Topic               // as its creator opened it
	mems  []*simMem
	wg    sync.WaitGroup // the memory nodes' offers
	// switches counts the switch's restarts: each runs with its own
	// transport seed, as a real process draws its own.
	switches int
	// memStarts counts memory node starts (each its own transport seed).
	memStarts int
}

// simMem is a memory node of the harness.
type simMem struct {
	addr   netip.AddrPort
	size   int
	node   *node.Node // nil while down
	cancel context.CancelFunc
}

// testLayout is a small topic: 3 partitions of 4 segments of 8 KiB.
func testLayout() Layout {
	return Layout{Partitions: 3, SegmentBytes: 8 << 10, Segments: 4, MaxBatch: 4 << 10, Groups: 4}
}

// simTopic runs f with a switch, nodes memory nodes of 4 MiB and a
// topic of layout l shaped by o.
func simTopic(t *testing.T, seed int64, nodes int, l Layout, o CreateOptions, f func(t *testing.T, s *simMQ)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		t.Logf("seed %d", seed)
		s := &simMQ{t: t, seed: seed, net: simnet.New(seed),
			link: simnet.LinkConfig{Rate: 10e9, Latency: 5 * time.Microsecond},
			swA:  netip.MustParseAddrPort("10.0.0.1:7471"), fab: endpoint.FabricOptions{Token: testToken}, port: 9000}
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- s.net.Serve(ctx) }()
		s.startSwitch()
		for range nodes {
			s.memoryNode(4 << 20)
		}
		var err error
		if s.topic, err = Create(s.ctx(), s.poolClient(s.endpoint()), "test", l, o); err != nil {
			t.Fatal(err)
		}
		defer func() {
			for _, m := range s.mems {
				s.crashMem(m)
			}
			s.wg.Wait()
			for _, ep := range s.eps {
				ep.Close()
			}
			s.srv.Close()
			cancel()
			if err := <-served; !errors.Is(err, context.Canceled) {
				t.Errorf("seed %d: simnet: %v", seed, err)
			}
		}()
		f(t, s)
	})
}

func (s *simMQ) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	s.t.Cleanup(cancel)
	return ctx
}

func (s *simMQ) addr() netip.AddrPort {
	s.port++
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, 0, 1}), uint16(s.port))
}

// endpoint is a new endpoint, closed at the end.
func (s *simMQ) endpoint() *endpoint.Endpoint {
	ep := s.newEndpoint()
	s.eps = append(s.eps, ep)
	return ep
}

func (s *simMQ) newEndpoint() *endpoint.Endpoint {
	cfg := endpoint.Config{Transport: transport.Config{MTU: 9000, Seed: uint64(s.seed)*1000 + uint64(s.port)}}
	ep, err := endpoint.New(s.net.ListenConn(s.addr(), s.link, s.link), cfg, endpoint.Options{})
	if err != nil {
		s.t.Fatal(err)
	}
	return ep
}

func (s *simMQ) poolClient(ep *endpoint.Endpoint) *pool.Client {
	pc, err := pool.New(ep, s.swA.String(), pool.Options{Fabric: s.fab})
	if err != nil {
		s.t.Fatal(err)
	}
	return pc
}

// open opens the topic on a new endpoint: a client of its own.
func (s *simMQ) open() (*Topic, *endpoint.Endpoint) {
	ep := s.endpoint()
	t, err := Open(s.ctx(), s.poolClient(ep), s.topic.Ref())
	if err != nil {
		s.t.Fatalf("seed %d: open: %v", s.seed, err)
	}
	return t, ep
}

// startSwitch starts a switch at the switch's address, each with its own
// transport seed.
func (s *simMQ) startSwitch() {
	s.switches++
	sw, err := fabric.New(fabric.Config{Token: testToken, Transport: transport.Config{MTU: 9000, Seed: uint64(s.seed)*1000 + uint64(s.switches)}})
	if err != nil {
		s.t.Fatal(err)
	}
	s.srv = fabric.NewServer(s.net.ListenConn(s.swA, simnet.LinkConfig{}, simnet.LinkConfig{}), sw, nil)
}

// memoryNode starts a memory node lending size bytes.
func (s *simMQ) memoryNode(size int) {
	m := &simMem{addr: s.addr(), size: size}
	s.mems = append(s.mems, m)
	if err := s.startMem(m, 10*time.Second); err != nil {
		s.t.Fatal(err)
	}
}

// startMem starts memory node m (again) at its address with empty
// memory, lending it to the switch; it waits at most wait for the
// switch to take the offer, and goes on offering it in the background.
func (s *simMQ) startMem(m *simMem, wait time.Duration) error {
	// Each start draws its own transport seed, as a real process does: a
	// node restarted with its previous incarnation's sequence numbers
	// would be taken for that one's duplicates until the switch forgot it.
	s.memStarts++
	st, err := memnode.NewStore(memnode.Config{})
	if err != nil {
		return err
	}
	key, err := st.Alloc(m.size, wire.PermAll, 0)
	if err != nil {
		return err
	}
	cfg := node.Config{Store: st, Pool: &server.PoolServe{Switch: s.swA, Key: key, Token: testToken},
		Transport: transport.Config{MTU: 9000, Seed: uint64(s.seed)*1000 + 100000 + uint64(s.memStarts)}}
	nd, err := node.New(s.net.ListenConn(m.addr, s.link, s.link), cfg, node.Options{})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.node, m.cancel = nd, cancel
	lent := make(chan error, 1)
	s.wg.Go(func() {
		var err error
		for ctx.Err() == nil {
			if _, err = nd.Lend(ctx, s.swA, key, uint64(m.size), s.fab); err == nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		lent <- err
	})
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case err := <-lent:
		return err
	case <-t.C:
		return nil // still offering it
	}
}

// crashMem stops memory node m at once; its memory is lost.
func (s *simMQ) crashMem(m *simMem) {
	if m.node == nil {
		return
	}
	m.cancel()
	m.node.Close()
	m.node = nil
}

func mustAddr(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// chanLock is a mutex made of a channel: a goroutine waiting for it
// blocks durably, so inside a synctest bubble virtual time moves on
// while the holder waits for the network (a sync.Mutex would stall it).
type chanLock chan struct{}

func newChanLock() chanLock { return make(chanLock, 1) }
func (l chanLock) Lock()    { l <- struct{}{} }
func (l chanLock) Unlock()  { <-l }

// dataOnlyNodes are the memory nodes that hold none of the topic's
// control region, for a topic created with ControlColumns 1 and a data
// region on every node: the one node holding both regions is left out.
func (s *simMQ) dataOnlyNodes() []*simMem {
	var data []*simMem
	for _, m := range s.mems {
		if m.node.Stats().Server.Pool.GrantsHeld == 1 {
			data = append(data, m)
		}
	}
	if len(data) != len(s.mems)-1 {
		s.t.Fatalf("seed %d: %d of %d memory nodes hold only the data region, want all but one", s.seed, len(data), len(s.mems))
	}
	return data
}

// controlNode is the memory node that holds tp's control region, for a
// topic created with ControlColumns 1: the one that serves a read of a
// partition header (nothing else may run meanwhile).
func (s *simMQ) controlNode(tp *Topic) *simMem {
	served := func() []uint64 {
		var n []uint64
		for _, m := range s.mems {
			n = append(n, m.node.Stats().Server.Pool.Served)
		}
		return n
	}
	before := served()
	if _, err := tp.State(s.ctx(), 0); err != nil {
		s.t.Fatal(err)
	}
	var found *simMem
	for i, n := range served() {
		if n != before[i] {
			if found != nil {
				s.t.Fatalf("seed %d: more than one memory node served a partition header", s.seed)
			}
			found = s.mems[i]
		}
	}
	if found == nil {
		s.t.Fatalf("seed %d: no memory node served a partition header", s.seed)
	}
	return found
}
