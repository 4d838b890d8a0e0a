package stor

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/internal/simpool"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
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
	// switches counts the switch's starts (startSwitch).
	switches int
	// auth, when set, is the fabric's authority: the switch, the nodes
	// and the clients each hold a credential under it and seal every
	// datagram.
	auth *secure.Authority
}

// simTraffic, when set, sees every datagram the simulated runs send,
// deliver or drop (TestSimReplays).
var simTraffic func(simnet.TraceEvent)

// simStorage runs f with n storage nodes (ids 0..n-1) up.
func simStorage(t *testing.T, n int, seed int64, f func(t *testing.T, s *simStor)) {
	t.Helper()
	simStorageWith(t, n, seed, nil, f)
}

// simStorageWith is simStorage on a fabric of authority auth (nil: no
// security layer).
func simStorageWith(t *testing.T, n int, seed int64, auth *secure.Authority, f func(t *testing.T, s *simStor)) {
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
			fab:  endpoint.FabricOptions{Token: testToken}, port: 9000, auth: auth}
		// Deliveries in an order fixed by the seed, whatever order the
		// bubble's goroutines run in.
		s.net.Quiesce = true
		if dir := os.Getenv("NDMA_SIM_TRACE"); dir != "" {
			closeTrace := simpool.Trace(t, s.net, dir, seed)
			defer func() {
				if err := closeTrace(); err != nil {
					t.Error(err)
				}
			}()
		}
		if see := simTraffic; see != nil {
			trace := s.net.Trace
			s.net.Trace = func(ev simnet.TraceEvent) {
				if trace != nil {
					trace(ev)
				}
				if ev.Kind != simnet.TracePoll {
					see(ev)
				}
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- s.net.Serve(ctx) }()
		s.startSwitch()
		s.nodes = make([]*Node, n)
		s.neps = make([]*endpoint.Endpoint, n)
		for i := range n {
			s.startNode(i)
		}
		defer func() {
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
		}()
		f(t, s)
	})
}

func (s *simStor) startSwitch() {
	// Each incarnation its own transport seed, as a real process draws
	// its own: two with the same seed send datagrams their peers take
	// for the previous one's.
	sw, err := fabric.New(fabric.Config{Token: testToken, Transport: transport.Config{MTU: 9000, Seed: uint64(s.seed) + 1000*uint64(s.switches)}})
	s.switches++
	if err != nil {
		s.t.Fatal(err)
	}
	l := s.link
	l.Rate, l.Latency = 0, 0
	if s.auth == nil {
		s.srv = fabric.NewServer(s.net.ListenConn(s.swA, l, l), sw, nil)
		return
	}
	s.srv, err = fabric.NewServerWith(s.net.ListenConn(s.swA, l, l), sw, fabric.ServerOptions{
		Security: s.identity(secure.RoleSwitch, "sw"), SecurityOptions: secure.Options{}})
	if err != nil {
		s.t.Fatal(err)
	}
}

// identity issues a credential of role and name under s.auth.
func (s *simStor) identity(role secure.Role, name string) *secure.Identity {
	id, err := s.auth.Issue(role, name, crand.Reader)
	if err != nil {
		s.t.Fatal(err)
	}
	return id
}

// endpoint makes an endpoint at a fresh address; with s.auth, it holds
// a member credential named name.
func (s *simStor) endpoint(name string) *endpoint.Endpoint {
	s.port++
	addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, 0, 1}), uint16(s.port))
	var opts endpoint.Options
	if s.auth != nil {
		opts = endpoint.Options{Security: s.identity(secure.RoleMember, name), SecurityOptions: secure.Options{}}
	}
	ep, err := endpoint.New(s.net.ListenConn(addr, s.link, s.link), endpoint.Config{
		Transport: transport.Config{MTU: 9000, Seed: uint64(s.seed)*1000 + uint64(s.port)},
	}, opts)
	if err != nil {
		s.t.Fatal(err)
	}
	return ep
}

// drawSeed is the seed of the random draws (ClientOptions.Seed,
// NodeConfig.Seed, GatewayConfig.Seed) of the client, node or gateway on
// ep: drawn from the run's seed, as the endpoint's transport's is.
func (s *simStor) drawSeed(ep *endpoint.Endpoint) uint64 {
	return uint64(s.seed)<<20 | uint64(ep.LocalAddr().Port())
}

// logger is nil, or with STOR_DEBUG (STOR_TRACE: every read and write
// too) set one that writes to the test's output.
func (s *simStor) logger() *slog.Logger {
	level := slog.LevelDebug
	switch {
	case os.Getenv("STOR_TRACE") != "":
		level = LevelTrace // every read and write too
	case os.Getenv("STOR_DEBUG") == "":
		return nil
	}
	return slog.New(slog.NewTextHandler(s.t.Output(), &slog.HandlerOptions{Level: level}))
}

func (s *simStor) startNode(i int) { s.startNodeWith(i, 0) }

// startNodeWith starts node i with a capacity (0: none).
func (s *simStor) startNodeWith(i int, capacity uint64) {
	if err := s.tryStartNode(i, capacity); err != nil {
		s.t.Fatalf("seed %d: %v", s.seed, err)
	}
}

// tryStartNode starts node i with a capacity (0: none); on failure it
// leaves node i down and releases what it took.
func (s *simStor) tryStartNode(i int, capacity uint64) error {
	ep := s.endpoint(fmt.Sprintf("stor/s%d", i))
	cfg := NodeConfig{Dir: s.dirs[i], ID: i, Switch: s.swA.String(), Fabric: s.fab, Capacity: capacity, Seed: s.drawSeed(ep)}
	cfg.Logger = s.logger()
	n, err := NewNode(ep, cfg)
	if err != nil {
		ep.Close()
		return fmt.Errorf("node %d: %w", i, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		n.Close()
		ep.Close()
		return fmt.Errorf("node %d start: %w", i, err)
	}
	s.nodes[i], s.neps[i] = n, ep
	return nil
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

func (s *simStor) client() *Client { return s.clientAs("client") }

// clientAs is a client whose credential (with s.auth) is named name.
func (s *simStor) clientAs(name string) *Client {
	ep := s.endpoint(name)
	s.ceps = append(s.ceps, ep)
	return NewClient(ep, s.swA.String(), ClientOptions{Fabric: s.fab, Seed: s.drawSeed(ep)})
}

func (s *simStor) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	s.t.Cleanup(cancel)
	return ctx
}

// writtenVolume creates the volume spec names through c, opens it for
// writing and fills it with bytes drawn from the seed: its descriptor,
// the volume, what it holds, and the generator for later writes.
func (s *simStor) writtenVolume(c *Client, spec VolumeSpec) (Descriptor, *Volume, *model, *rand.Rand) {
	s.t.Helper()
	ctx := s.ctx()
	d, err := c.Create(ctx, spec)
	if err != nil {
		s.t.Fatal(err)
	}
	v, err := c.Open(ctx, spec.Name, OpenOptions{Write: true, Logger: s.logger()})
	if err != nil {
		s.t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(uint64(s.seed), 1))
	m := &model{b: make([]byte, d.Size)}
	m.write(s.t, v, rng, 0, int(d.Size))
	return d, v, m, rng
}

// flushAndClose flushes v, checks that it reads back as m and that every
// node's backing file holds m's bytes, and closes v.
func (s *simStor) flushAndClose(v *Volume, d Descriptor, m *model) {
	s.t.Helper()
	if err := v.Flush(); err != nil {
		s.t.Fatal(err)
	}
	m.verify(s.t, v)
	s.checkFiles(d, m)
	if err := v.Close(); err != nil {
		s.t.Fatal(err)
	}
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
// readsBack waits for volume name to be healthy, then checks that r
// reads want from its start and that every replica's file holds it.
func (s *simStor) readsBack(c *Client, r *Volume, name string, d Descriptor, want []byte) {
	s.t.Helper()
	s.waitHealth(c, name, "healthy")
	got := make([]byte, len(want))
	if _, err := r.ReadAt(got, 0); err != nil {
		s.t.Fatal(err)
	}
	if i := firstDiff(got, want); i >= 0 {
		s.t.Fatalf("byte %d reads %q, want the acknowledged %q", i, got[i], want[i])
	}
	s.checkFiles(d, &model{b: want})
}

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
	simStorage(t, 4, 1, func(t *testing.T, s *simStor) {
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
		if _, err := c.Remove(ctx, "v1", false); err != nil {
			t.Fatal(err)
		}
		if vs, err := c.List(ctx); err != nil || len(vs) != 0 {
			t.Fatalf("list after remove: %+v, %v", vs, err)
		}
	})
}

// TestSimSealedRankBound: on a fabric where every process holds a
// credential and seals every datagram, a client whose credential binds
// it to rank 3 of job "train" (as ndma testbed run gives its ranks)
// writes and reads a replicated volume: its write groups are the job's
// own with the storage service's scope as their guest
// (train.SUFFIX@stor), which the switch lets such a credential and the
// storage nodes (stor/s0...) join (any other job's join it refuses, and
// the writes would fail).
func TestSimSealedRankBound(t *testing.T) {
	a, err := secure.NewAuthority([]byte("stor sealed test secret"))
	if err != nil {
		t.Fatal(err)
	}
	simStorageWith(t, 3, 11, a, func(t *testing.T, s *simStor) {
		d, v, m, _ := s.writtenVolume(s.clientAs("train/3"), VolumeSpec{Name: "v", Size: 4 * MinExtent, Extent: MinExtent, Replicas: 3})
		s.flushAndClose(v, d, m)
	})
}

func TestSimLease(t *testing.T) {
	simStorage(t, 3, 2, func(t *testing.T, s *simStor) {
		a, b := s.client(), s.client()
		ctx := s.ctx()
		if _, err := a.Create(ctx, VolumeSpec{Name: "l", Size: 4 * MinExtent, Extent: MinExtent}); err != nil {
			t.Fatal(err)
		}
		va, err := a.Open(ctx, "l", OpenOptions{Write: true, Lease: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Open(ctx, "l", OpenOptions{Write: true}); !errors.Is(err, ErrLeaseHeld) {
			t.Fatalf("second writer: %v, want ErrLeaseHeld", err)
		}
		// The lease is renewed while the writer lives.
		time.Sleep(10 * time.Second)
		if _, err := b.Open(ctx, "l", OpenOptions{Write: true}); !errors.Is(err, ErrLeaseHeld) {
			t.Fatalf("second writer after 10 s: %v, want ErrLeaseHeld", err)
		}
		if _, err := b.Remove(ctx, "l", false); !errors.Is(err, ErrLeaseHeld) {
			t.Fatalf("remove of an open volume: %v, want ErrLeaseHeld", err)
		}
		rng := rand.New(rand.NewPCG(uint64(s.seed), 1))
		m := &model{b: make([]byte, 4*MinExtent)}
		m.write(t, va, rng, 0, len(m.b))
		if err := va.Flush(); err != nil {
			t.Fatal(err)
		}
		// The writer dies: its endpoint goes silent, nothing is given back.
		close(va.stop)
		<-va.done
		s.ceps[0].Close()
		start := time.Now()
		var vb *Volume
		for {
			vb, err = b.Open(ctx, "l", OpenOptions{Write: true})
			if err == nil {
				break
			}
			if !errors.Is(err, ErrLeaseHeld) || time.Since(start) > 10*time.Second {
				t.Fatalf("after the writer died: %v", err)
			}
			time.Sleep(500 * time.Millisecond)
		}
		if w := time.Since(start); w > 4*time.Second {
			t.Errorf("lease taken over after %v, want within the 3 s lease", w)
		}
		if vb.epoch <= va.epoch {
			t.Errorf("new writer's epoch %d, not above the old one's %d", vb.epoch, va.epoch)
		}
		m.verify(t, vb)
		m.write(t, vb, rng, 100, 5000)
		if err := vb.Close(); err != nil {
			t.Fatal(err)
		}
		r, err := b.Open(ctx, "l", OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		m.verify(t, r)
	})
}

func TestSimReplicaDiesMidWrite(t *testing.T) {
	for _, seed := range []int64{3, 4} {
		simStorage(t, 3, seed, func(t *testing.T, s *simStor) {
			c := s.client()
			ctx := s.ctx()
			d, err := c.Create(ctx, VolumeSpec{Name: "d", Size: 8 * MinExtent, Extent: MinExtent, Replicas: 3})
			if err != nil {
				t.Fatal(err)
			}
			v, err := c.Open(ctx, "d", OpenOptions{Write: true, Lease: 3 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(seed), 1))
			m := &model{b: make([]byte, d.Size)}
			m.write(t, v, rng, 0, int(d.Size))
			if err := v.Flush(); err != nil {
				t.Fatal(err)
			}
			// Node 2 dies while writes are in flight.
			dead := 2
			errc := make(chan error, 1)
			after := time.Duration(rng.IntN(500)) * time.Microsecond
			go func() {
				time.Sleep(after)
				s.crashNode(dead)
				errc <- nil
			}()
			for range 50 {
				n := 1 + rng.IntN(2*MinExtent)
				m.write(t, v, rng, rng.IntN(int(d.Size)-n), n)
			}
			<-errc
			if err := v.Flush(); err != nil {
				t.Fatalf("flush with a replica dead: %v", err)
			}
			if got := v.Degraded(); len(got) != 1 || got[0] != uint16(dead) {
				t.Fatalf("degraded nodes %v, want [%d]", got, dead)
			}
			st, err := c.Stat(ctx, "d")
			if err != nil {
				t.Fatal(err)
			}
			if !st.Degraded || len(st.Down) != 1 || st.Down[0] != uint16(dead) {
				t.Fatalf("stat: degraded %v, down %v", st.Degraded, st.Down)
			}
			for _, nv := range st.Nodes {
				if _, ok := nv.Missing[uint16(dead)]; !ok {
					t.Errorf("node %d does not record node %d as missing writes: %v", nv.Node, dead, nv.Missing)
				}
			}
			m.verify(t, v)
			// More writes while it is away, then it comes back: it is taken
			// into the groups, copies what it missed, and serves again.
			for range 30 {
				n := 1 + rng.IntN(MinExtent)
				m.write(t, v, rng, rng.IntN(int(d.Size)-n), n)
			}
			s.startNode(dead)
			deadline := time.Now().Add(30 * time.Second)
			for {
				st, err = c.Stat(ctx, "d")
				if err == nil && !st.Degraded {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("still degraded 30 s after the node returned: %+v %v", st, err)
				}
				// Writes go on meanwhile.
				n := 1 + rng.IntN(MinExtent)
				m.write(t, v, rng, rng.IntN(int(d.Size)-n), n)
				time.Sleep(200 * time.Millisecond)
			}
			if s.nodes[dead].Stats().Resynced == 0 {
				t.Errorf("the returned node copied no extent")
			}
			if err := v.Flush(); err != nil {
				t.Fatal(err)
			}
			if got := v.Degraded(); len(got) != 0 {
				t.Errorf("still degraded after the return: %v", got)
			}
			m.verify(t, v)
			s.checkFiles(d, m)
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestSimSwitchRestart(t *testing.T) {
	simStorage(t, 3, 5, func(t *testing.T, s *simStor) {
		c := s.client()
		ctx := s.ctx()
		_, v, m, rng := s.writtenVolume(c, VolumeSpec{Name: "r", Size: 6 * MinExtent, Extent: MinExtent, Replicas: 2})
		if err := v.Close(); err != nil {
			t.Fatal(err)
		}
		// The switch restarts with no memory of the nodes.
		s.srv.Close()
		time.Sleep(100 * time.Millisecond)
		s.startSwitch()
		restarted := time.Now()
		deadline := time.Now().Add(20 * time.Second)
		for {
			lctx, lcancel := context.WithTimeout(ctx, time.Second)
			vs, err := c.List(lctx)
			lcancel()
			if err == nil && len(vs) == 1 && vs[0].Live == 3 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("volumes 10 s after the switch restarted: %+v, %v", vs, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		r, err := c.Open(ctx, "r", OpenOptions{Write: true})
		if err != nil {
			t.Fatal(err)
		}
		m.verify(t, r)
		// Every node left and joined its groups again: no stream either
		// side forgot and the other kept holds a request up (that would
		// take an operation timeout, 10 s). Within that, the nodes check
		// their copies with each other and the writer starts a
		// generation: 6.4 s of virtual time in some interleavings of the
		// goroutines.
		if took := time.Since(restarted); took > 8*time.Second {
			t.Errorf("the volume was read back %v after the switch restarted; want within 8 s", took)
		}
		m.write(t, r, rng, 1000, 3*MinExtent)
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		r, err = c.Open(ctx, "r", OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		m.verify(t, r)
	})
}

func TestSimControllerMode(t *testing.T) {
	simStorage(t, 3, 6, func(t *testing.T, s *simStor) {
		gwEP := s.endpoint("stor/gateway")
		s.ceps = append(s.ceps, gwEP)
		gw := NewGateway(gwEP, GatewayConfig{Switch: s.swA.String(), Fabric: s.fab, Seed: s.drawSeed(gwEP)})
		ctx := s.ctx()
		if err := gw.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer gw.Close()
		c := s.client()
		d, err := c.Create(ctx, VolumeSpec{Name: "g", Size: 8 * MinExtent, Extent: MinExtent, Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		v, err := c.Open(ctx, "g", OpenOptions{Write: true, Controller: GatewayName(DefaultService)})
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(uint64(s.seed), 1))
		m := &model{b: make([]byte, d.Size)}
		m.write(t, v, rng, 0, int(d.Size))
		for range 100 {
			n := 1 + rng.IntN(2*MinExtent)
			m.write(t, v, rng, rng.IntN(int(d.Size)-n), n)
		}
		if err := v.Flush(); err != nil {
			t.Fatal(err)
		}
		m.verify(t, v)
		s.checkFiles(d, m)
		st := gw.Stats()
		if st.Writes == 0 || st.Copies != 3*(st.Writes+st.Flushes) || st.Reads == 0 || st.Flushes != 1 || st.Failed != 0 {
			t.Errorf("gateway: %+v: want 3 copies per write and flush, reads and one flush through it", st)
		}
		// Another client's write goes nowhere while this one holds the lease.
		w2 := (&oneReq{Name: "g", Holder: 12345, Ver: 1, Off: 0, Data: []byte("x")}).append(nil, opGwWrite)
		resp, err := s.ceps[len(s.ceps)-1].Anycast(ctx, s.swA.String(), GatewayName(DefaultService), 0, w2, s.fab)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := replyBody(-1, "write", resp); !errors.Is(err, ErrLeaseHeld) {
			t.Errorf("write without the lease through the gateway: %v, want ErrLeaseHeld", err)
		}
		if err := v.Close(); err != nil {
			t.Fatal(err)
		}
		m.verify(t, v)
	})
}

// TestSimPartitionedNode: a storage node cut off the network while its
// process lives on (the switch counts it dead): the writer goes on
// without it; when the network heals the node registers again, but it
// serves no read until it has copied what it missed, so that another
// client reading meanwhile never sees a stale block.
func TestSimPartitionedNode(t *testing.T) {
	simStorage(t, 3, 8, func(t *testing.T, s *simStor) {
		c := s.client()
		ctx := s.ctx()
		d, err := c.Create(ctx, VolumeSpec{Name: "p", Size: 4 * MinExtent, Extent: MinExtent, Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		v, err := c.Open(ctx, "p", OpenOptions{Write: true, Lease: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(uint64(s.seed), 1))
		m := &model{b: make([]byte, d.Size)}
		m.write(t, v, rng, 0, int(d.Size))
		if err := v.Flush(); err != nil {
			t.Fatal(err)
		}
		// Node 2's link drops everything, both ways; its process runs on.
		const cut = 2
		addr := s.neps[cut].LocalAddr()
		dead := s.link
		dead.Loss = 1
		s.net.Locked(func() { s.net.SetLink(addr, dead, dead) })
		deadline := time.Now().Add(30 * time.Second)
		for !slices.Contains(v.Degraded(), uint16(cut)) {
			if time.Now().After(deadline) {
				t.Fatalf("the writer still counts node %d in 30 s after its link went dead", cut)
			}
			n := 1 + rng.IntN(MinExtent)
			m.write(t, v, rng, rng.IntN(int(d.Size)-n), n)
			if err := v.Flush(); err != nil {
				t.Fatalf("flush with node %d cut off: %v", cut, err)
			}
		}
		// Every extent changes while it is away.
		for e := range d.Extents() {
			m.write(t, v, rng, e*int(d.Extent), 4096)
		}
		if err := v.Flush(); err != nil {
			t.Fatal(err)
		}
		// The network heals. Another client reads everything, over and
		// over, until node 2 serves the volume again.
		s.net.Locked(func() { s.net.SetLink(addr, s.link, s.link) })
		rc := s.client()
		rv, err := rc.Open(ctx, "p", OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, d.Size)
		deadline = time.Now().Add(30 * time.Second)
		for reads := 0; ; reads++ {
			if _, err := rv.ReadAt(got, 0); err != nil {
				t.Fatalf("read %d: %v", reads, err)
			}
			if i := firstDiff(got, m.b); i >= 0 {
				t.Fatalf("read %d after the heal: byte %d (extent %d) is stale", reads, i, i/int(d.Extent))
			}
			st, err := c.Stat(ctx, "p")
			if err == nil && !st.Degraded && s.nodes[cut].Stats().Resynced > 0 {
				t.Logf("node %d back after %d reads", cut, reads)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d not back 30 s after the heal: %+v %v", cut, st, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := rv.Close(); err != nil {
			t.Fatal(err)
		}
		s.flushAndClose(v, d, m)
	})
}

// TestSimReplays: a simulated run replays from its seed, datagram for
// datagram (each one's time, kind, ends, length and header): the nodes
// register their services in name order, the clients and nodes draw
// their random numbers (lease holder ids, backoff jitter) from seeded
// generators, and goroutines woken at one instant (a client's requests
// to each node, the pieces of a read, the workload's goroutines, a node's
// supervisor and resyncs) go on in the order of their endpoint.Gates.
// (Not yet the controller mode: the gateway serves each request on a
// goroutine of its own, which go on in the scheduler's order; under a
// loaded machine two runs of TestSimControllerMode differ.)
func TestSimReplays(t *testing.T) {
	for _, c := range []struct {
		name string
		run  func(*testing.T)
	}{{"lease", TestSimLease}, {"ackedread", TestSimReadAfterAckedWrite}} {
		var runs [2]string
		for i := range runs {
			h := sha256.New()
			simTraffic = func(ev simnet.TraceEvent) {
				var hd wire.Header
				if _, _, err := wire.Parse(ev.Buf, &hd); ev.Buf == nil || err != nil {
					fmt.Fprintln(h, ev)
				} else {
					fmt.Fprintln(h, ev, hd.Op, hd.Mode, hd.Flags, hd.MsgID, hd.PSN, hd.Group, hd.Addr, hd.Operand1, hd.Operand2, hd.Status)
				}
			}
			t.Run(fmt.Sprintf("%s/run%d", c.name, i), c.run)
			simTraffic = nil
			runs[i] = fmt.Sprintf("%x", h.Sum(nil))
		}
		if runs[0] != runs[1] {
			t.Errorf("%s: the second run's traffic (digest %s) differs from the first's (%s)", c.name, runs[1], runs[0])
		}
	}
}
