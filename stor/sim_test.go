package stor

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/transport"
)

var testToken = []byte("stor test token")

// simStor is a switch, storage nodes and clients on a simulated network
// inside a synctest bubble: time is virtual, so leases, heartbeats and
// timeouts take no real time.
type simStor struct {
	t     *testing.T
	seed  int64
	net   *simnet.Network
	link  simnet.LinkConfig
	swA   netip.AddrPort
	srv   *fabric.Server
	dirs  []string
	nodes []*Node
	neps  []*endpoint.Endpoint
	ceps  []*endpoint.Endpoint
	fab   endpoint.FabricOptions
	port  int
}

// simStorage runs f with n storage nodes (ids 0..n-1) up.
func simStorage(t *testing.T, n int, seed int64, f func(s *simStor)) {
	t.Helper()
	dirs := make([]string, n)
	for i := range dirs {
		dirs[i] = t.TempDir()
	}
	synctest.Test(t, func(t *testing.T) {
		t.Logf("seed %d", seed)
		s := &simStor{t: t, seed: seed, net: simnet.New(seed), dirs: dirs,
			link: simnet.LinkConfig{Rate: 10e9, Latency: 5 * time.Microsecond},
			swA:  netip.MustParseAddrPort("10.0.0.1:7471"),
			fab:  endpoint.FabricOptions{Token: testToken}, port: 9000}
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- s.net.Serve(ctx) }()
		s.startSwitch()
		s.nodes = make([]*Node, n)
		s.neps = make([]*endpoint.Endpoint, n)
		for i := range n {
			s.startNode(i)
		}
		f(s)
		for _, ep := range s.ceps {
			ep.Close()
		}
		for i := range s.nodes {
			s.stopNode(i)
		}
		s.srv.Close()
		cancel()
		if err := <-served; !errors.Is(err, context.Canceled) {
			t.Errorf("seed %d: simnet: %v", seed, err)
		}
	})
}

func (s *simStor) startSwitch() {
	sw, err := fabric.New(fabric.Config{Token: testToken, Transport: transport.Config{MTU: 9000, Seed: uint64(s.seed)}})
	if err != nil {
		s.t.Fatal(err)
	}
	l := s.link
	l.Rate, l.Latency = 0, 0
	s.srv = fabric.NewServer(s.net.ListenConn(s.swA, l, l), sw, nil)
}

// endpoint makes an endpoint at a fresh address.
func (s *simStor) endpoint() *endpoint.Endpoint {
	s.port++
	addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, 0, 1}), uint16(s.port))
	ep, err := endpoint.New(s.net.ListenConn(addr, s.link, s.link), endpoint.Config{
		Transport: transport.Config{MTU: 9000, Seed: uint64(s.seed)*1000 + uint64(s.port)},
	}, endpoint.Options{})
	if err != nil {
		s.t.Fatal(err)
	}
	return ep
}

func (s *simStor) startNode(i int) {
	ep := s.endpoint()
	n, err := NewNode(ep, NodeConfig{Dir: s.dirs[i], ID: i, Switch: s.swA.String(), Fabric: s.fab})
	if err != nil {
		s.t.Fatalf("seed %d: node %d: %v", s.seed, i, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		s.t.Fatalf("seed %d: node %d start: %v", s.seed, i, err)
	}
	s.nodes[i], s.neps[i] = n, ep
}

// crashNode cuts node i off the network at once (its datagrams stop, as
// when the process dies), then releases what it held.
func (s *simStor) crashNode(i int) {
	s.neps[i].Close()
	s.nodes[i].Close()
	s.nodes[i], s.neps[i] = nil, nil
}

func (s *simStor) stopNode(i int) {
	if s.nodes[i] == nil {
		return
	}
	s.nodes[i].Close()
	s.neps[i].Close()
	s.nodes[i], s.neps[i] = nil, nil
}

func (s *simStor) client() *Client {
	ep := s.endpoint()
	s.ceps = append(s.ceps, ep)
	return NewClient(ep, s.swA.String(), ClientOptions{Fabric: s.fab})
}

func (s *simStor) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	s.t.Cleanup(cancel)
	return ctx
}

// model is what a volume must hold.
type model struct{ b []byte }

func (m *model) write(t *testing.T, v *Volume, rng *rand.Rand, off, n int) {
	t.Helper()
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(rng.Uint32())
	}
	if _, err := v.WriteAt(p, int64(off)); err != nil {
		t.Fatalf("write %d at %d: %v", n, off, err)
	}
	copy(m.b[off:], p)
}

func (m *model) verify(t *testing.T, v *Volume) {
	t.Helper()
	got := make([]byte, len(m.b))
	if _, err := v.ReadAt(got, 0); err != nil {
		t.Fatalf("read back: %v", err)
	}
	if i := firstDiff(got, m.b); i >= 0 {
		t.Fatalf("read back differs at byte %d (extent %d): got %#x want %#x", i, i/int(v.d.Extent), got[i], m.b[i])
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// checkFiles verifies that every node's backing file holds the model's
// bytes of every extent it holds.
func (s *simStor) checkFiles(d Descriptor, m *model) {
	s.t.Helper()
	for i, dir := range s.dirs {
		data, err := os.ReadFile(filepath.Join(dir, "vols", d.Name, "data"))
		if err != nil {
			s.t.Fatalf("node %d: %v", i, err)
		}
		for e := range d.Extents() {
			if !d.Holds(uint16(i), e) {
				continue
			}
			lo, hi := e*int(d.Extent), (e+1)*int(d.Extent)
			if !bytes.Equal(data[lo:hi], m.b[lo:hi]) {
				s.t.Fatalf("seed %d: node %d extent %d: backing file differs at byte %d", s.seed, i, e, lo+firstDiff(data[lo:hi], m.b[lo:hi]))
			}
		}
	}
}

func TestSimReplicatedWriteRead(t *testing.T) {
	simStorage(t, 4, 1, func(s *simStor) {
		c := s.client()
		ctx := s.ctx()
		d, err := c.Create(ctx, VolumeSpec{Name: "v1", Size: 16 * MinExtent, Extent: MinExtent, Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Nodes) != 4 || d.Replicas != 3 {
			t.Fatalf("placed on %v with %d replicas", d.Nodes, d.Replicas)
		}
		if _, err := c.Create(ctx, VolumeSpec{Name: "v1", Size: MinExtent, Extent: MinExtent}); !errors.Is(err, ErrExists) {
			t.Fatalf("second create: %v, want ErrExists", err)
		}
		v, err := c.Open(ctx, "v1", OpenOptions{Write: true})
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(uint64(s.seed), 1))
		m := &model{b: make([]byte, d.Size)}
		m.write(t, v, rng, 0, int(d.Size)) // every extent, in pieces of MaxIO at most
		for range 200 {
			n := 1 + rng.IntN(3*MinExtent)
			off := rng.IntN(int(d.Size) - n)
			m.write(t, v, rng, off, n)
		}
		if err := v.Flush(); err != nil {
			t.Fatal(err)
		}
		m.verify(t, v)
		s.checkFiles(d, m)
		// Reads of one extent spread over its replicas.
		buf := make([]byte, 4096)
		for range 30 {
			if _, err := v.ReadAt(buf, 0); err != nil {
				t.Fatal(err)
			}
		}
		served := 0
		for _, n := range s.nodes {
			if n.Stats().Reads > 0 {
				served++
			}
		}
		if served < 3 {
			t.Errorf("reads served by %d nodes, want every replica (3)", served)
		}
		// Out of range is refused.
		if _, err := v.ReadAt(buf, int64(d.Size)-10); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("read past the end: %v", err)
		}
		if _, err := v.WriteAt(buf, int64(d.Size)); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("write past the end: %v", err)
		}
		if err := v.Close(); err != nil {
			t.Fatal(err)
		}
		// A reader sees it all too.
		r, err := c.Open(ctx, "v1", OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		m.verify(t, r)
		if _, err := r.WriteAt(buf, 0); !errors.Is(err, ErrReadOnly) {
			t.Errorf("write on a read-only volume: %v", err)
		}
		vs, err := c.List(ctx)
		if err != nil || len(vs) != 1 || vs[0].Name != "v1" || vs[0].Live != 4 {
			t.Fatalf("list: %+v, %v", vs, err)
		}
		if err := c.Remove(ctx, "v1", false); err != nil {
			t.Fatal(err)
		}
		if vs, err := c.List(ctx); err != nil || len(vs) != 0 {
			t.Fatalf("list after remove: %+v, %v", vs, err)
		}
	})
}
