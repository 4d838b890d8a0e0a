// Package simpool runs a switch and memory nodes lending to its pool on
// a simulated network (netio/simnet), for the tests of what is built on
// the pool (kv, mq): processes crash and restart at their addresses, and
// each start draws its own transport seed, as a real process does (a
// process restarted with its previous incarnation's sequence numbers
// would be taken for that one's duplicates until its peers forgot it).
//
// A Fabric lives inside a testing/synctest bubble: Start it there, and
// Close it before the bubble ends.
package simpool

import (
	"bufio"
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/memnode/node"
	"github.com/ndma/ndma/memnode/server"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// Config configures Start.
type Config struct {
	// Seed draws the network's losses and the processes' transport
	// seeds.
	Seed int64
	// Token is the fabric token.
	Token []byte
	// Nodes memory nodes lend NodeSize bytes each (zero: 4 MiB).
	Nodes, NodeSize int
	// Link is every host's link (zero: 10 Gbit/s, 5 µs); the switch's
	// is a port of a crossbar, without rate or latency.
	Link simnet.LinkConfig
	// Durable makes every memory node durable (Mem.Durable).
	Durable bool
	// Authority, when set, seals the fabric as deployed: the switch and
	// the memory nodes hold credentials it issues, every endpoint one
	// of the role and name NewEndpointAs gives (Endpoint: a client), and
	// every datagram is sealed and encrypted.
	Authority *secure.Authority
}

// Fabric is the switch, the memory nodes and the endpoints a test made.
type Fabric struct {
	T      testing.TB
	Seed   int64
	Net    *simnet.Network
	Link   simnet.LinkConfig
	Switch netip.AddrPort
	Srv    *fabric.Server // the switch's current incarnation
	Fab    endpoint.FabricOptions
	Mems   []*Mem

	token     []byte
	auth      *secure.Authority
	port      atomic.Int64 // the last address's port (Addr)
	switches  int          // switch starts: each its own transport seed
	memStarts int          // memory node starts: each its own transport seed
	eps       []*endpoint.Endpoint
	wg        sync.WaitGroup // the memory nodes' offers
	stop      context.CancelFunc
	served    chan error
	trace     func() error // closes the trace file (traceTo)
}

// Mem is a memory node.
type Mem struct {
	Addr   netip.AddrPort
	Size   int
	Node   *node.Node // nil while down
	cancel context.CancelFunc
	// Durable makes the node keep its memory and grants across
	// restarts (as ndma memd --dir with --sync always does across a
	// crash or a power loss); Dir holds them while it is down.
	Durable bool
	Dir     *MemDir
}

// MemDir is a durable memory node's directory, kept in memory by the
// test: the lent memory, the last grant record saved (SaveGrants
// replaces it whole, as memnode/durable's atomic rename does) and the
// newest reply records (memnode/durable's reply journal).
type MemDir struct {
	Mem     []byte
	Grants  []byte // the last record saved (nil: none yet)
	Saves   int    // records saved
	Replies []memnode.ReplyRecord
}

// memDirReplies bounds MemDir.Replies: the server's default reply cache.
const memDirReplies = 1 << 16

// Begin and Abort do nothing: the test's memory outlives the node, and
// a request is never cut between its bytes and its reply record.
func (d *MemDir) Begin(spans []memnode.Span) error { return nil }
func (d *MemDir) Abort() error                     { return nil }

// Commit keeps r, forgetting the oldest record beyond memDirReplies.
func (d *MemDir) Commit(spans []memnode.Span, r memnode.ReplyRecord) error {
	d.Replies = append(d.Replies, r)
	if len(d.Replies) > memDirReplies {
		d.Replies = d.Replies[len(d.Replies)-memDirReplies:]
	}
	return nil
}

// SaveGrants keeps a copy of rec.
func (d *MemDir) SaveGrants(rec []byte) error {
	d.Grants = append(d.Grants[:0:0], rec...)
	d.Saves++
	return nil
}

// Flush does nothing: the test's memory outlives the node.
func (d *MemDir) Flush(off, n uint64) error { return nil }

// Start starts the network, the switch and cfg.Nodes memory nodes, and
// waits until the switch has taken every node's memory.
func Start(t testing.TB, cfg Config) *Fabric {
	t.Helper()
	if cfg.NodeSize == 0 {
		cfg.NodeSize = 4 << 20
	}
	if cfg.Link == (simnet.LinkConfig{}) {
		cfg.Link = simnet.LinkConfig{Rate: 10e9, Latency: 5 * time.Microsecond}
	}
	f := &Fabric{T: t, Seed: cfg.Seed, Net: simnet.New(cfg.Seed), Link: cfg.Link,
		Switch: netip.MustParseAddrPort("10.0.0.1:7471"), Fab: endpoint.FabricOptions{Token: cfg.Token},
		token: cfg.Token, auth: cfg.Authority, served: make(chan error, 1)}
	f.port.Store(9000)
	// Deliveries in an order fixed by the seed, whatever order the
	// bubble's goroutines run in.
	f.Net.Quiesce = true
	f.traceTo(os.Getenv("NDMA_SIM_TRACE"))
	ctx, cancel := context.WithCancel(context.Background())
	f.stop = cancel
	go func() { f.served <- f.Net.Serve(ctx) }()
	f.StartSwitch()
	for range cfg.Nodes {
		f.addMem(cfg.NodeSize, cfg.Durable)
	}
	return f
}

// Close stops the memory nodes, the endpoints Endpoint made, the switch
// and the network.
func (f *Fabric) Close() {
	for _, m := range f.Mems {
		f.CrashMem(m)
	}
	f.wg.Wait()
	for _, ep := range f.eps {
		ep.Close()
	}
	f.Srv.Close()
	f.stop()
	if err := <-f.served; !errors.Is(err, context.Canceled) {
		f.T.Errorf("seed %d: simnet: %v", f.Seed, err)
	}
	if f.trace != nil {
		if err := f.trace(); err != nil {
			f.T.Errorf("seed %d: trace: %v", f.Seed, err)
		}
	}
}

// Ctx is a context of 30 s (virtual time), canceled when the test ends.
func (f *Fabric) Ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	f.T.Cleanup(cancel)
	return ctx
}

// Addr is a fresh host address.
func (f *Fabric) Addr() netip.AddrPort {
	port := f.port.Add(1)
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, 0, 1}), uint16(port))
}

// Endpoint is an endpoint at a fresh address, closed by Close.
func (f *Fabric) Endpoint() *endpoint.Endpoint {
	ep := f.NewEndpoint(endpoint.Config{})
	f.eps = append(f.eps, ep)
	return ep
}

// NewEndpoint is an endpoint of cfg (its transport set here) at a fresh
// address, a client on a sealed fabric; the caller closes it.
func (f *Fabric) NewEndpoint(cfg endpoint.Config) *endpoint.Endpoint {
	return f.NewEndpointAs(cfg, secure.RoleClient, "client")
}

// NewEndpointAs is NewEndpoint holding, on a sealed fabric, a credential
// of role and name.
func (f *Fabric) NewEndpointAs(cfg endpoint.Config, role secure.Role, name string) *endpoint.Endpoint {
	addr := f.Addr() // safe from several goroutines (restarts)
	cfg.Transport = transport.Config{MTU: 9000, Seed: uint64(f.Seed)*1000 + uint64(addr.Port()) - 1}
	var opts endpoint.Options
	if f.auth != nil {
		opts = endpoint.Options{Security: f.identity(role, name), SecurityOptions: secure.Options{}}
	}
	ep, err := endpoint.New(f.Net.ListenConn(addr, f.Link, f.Link), cfg, opts)
	if err != nil {
		f.T.Fatal(err)
	}
	return ep
}

// PoolClient is a pool client of ep.
func (f *Fabric) PoolClient(ep *endpoint.Endpoint) *pool.Client {
	pc, err := pool.New(ep, f.Switch.String(), pool.Options{Fabric: f.Fab})
	if err != nil {
		f.T.Fatal(err)
	}
	return pc
}

// StartSwitch starts a switch at the switch's address (the first, or a
// new incarnation after Srv.Close).
func (f *Fabric) StartSwitch() {
	f.switches++
	sw, err := fabric.New(fabric.Config{Token: f.token, Transport: transport.Config{MTU: 9000, Seed: uint64(f.Seed)*1000 + uint64(f.switches)}})
	if err != nil {
		f.T.Fatal(err)
	}
	conn := f.Net.ListenConn(f.Switch, simnet.LinkConfig{}, simnet.LinkConfig{})
	if f.auth == nil {
		f.Srv = fabric.NewServer(conn, sw, nil)
		return
	}
	if f.Srv, err = fabric.NewServerWith(conn, sw, fabric.ServerOptions{
		Security: f.identity(secure.RoleSwitch, "sw"), SecurityOptions: secure.Options{}}); err != nil {
		f.T.Fatal(err)
	}
}

// identity issues a credential of role and name.
func (f *Fabric) identity(role secure.Role, name string) *secure.Identity {
	id, err := f.auth.Issue(role, name, crand.Reader)
	if err != nil {
		f.T.Fatal(err)
	}
	return id
}

// AddMem starts a memory node lending size bytes, waiting up to 10 s
// for the switch to take it.
func (f *Fabric) AddMem(size int) *Mem { return f.addMem(size, false) }

func (f *Fabric) addMem(size int, durable bool) *Mem {
	m := &Mem{Addr: f.Addr(), Size: size, Durable: durable}
	f.Mems = append(f.Mems, m)
	if err := f.StartMem(m, 10*time.Second); err != nil {
		f.T.Fatal(err)
	}
	return m
}

// StartMem starts memory node m (again) at its address with empty
// memory, lending it to the switch; it waits at most wait for the switch
// to take the offer, and goes on offering it in the background.
func (f *Fabric) StartMem(m *Mem, wait time.Duration) error {
	f.memStarts++
	st, err := memnode.NewStore(memnode.Config{})
	if err != nil {
		return err
	}
	ps := &server.PoolServe{Switch: f.Switch, Token: f.token}
	var key uint64
	if m.Durable {
		if m.Dir == nil {
			m.Dir = &MemDir{Mem: make([]byte, m.Size)}
		}
		if m.Dir.Grants != nil {
			if ps.Kept, err = memnode.ParseGrants(m.Dir.Grants); err != nil {
				return err
			}
		}
		ps.Durable, ps.KeptReplies = m.Dir, m.Dir.Replies
		key, err = st.Register(m.Dir.Mem, wire.PermAll, 0)
	} else {
		key, err = st.Alloc(m.Size, wire.PermAll, 0)
	}
	if err != nil {
		return err
	}
	ps.Key = key
	cfg := node.Config{Store: st, Pool: ps,
		Transport: transport.Config{MTU: 9000, Seed: uint64(f.Seed)*1000 + 100000 + uint64(f.memStarts)}}
	var opts node.Options
	if f.auth != nil {
		opts = node.Options{Security: f.identity(secure.RoleMemoryNode, fmt.Sprint("m", f.memStarts)), SecurityOptions: secure.Options{}}
	}
	nd, err := node.New(f.Net.ListenConn(m.Addr, f.Link, f.Link), cfg, opts)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.Node, m.cancel = nd, cancel
	// Offer the region until the switch takes it (a switch that still
	// holds the node's previous incarnation may take a few tries); from
	// then on Lend repeats the offer as the node's heartbeat, under ctx.
	lent := make(chan error, 1)
	f.wg.Go(func() {
		var err error
		for ctx.Err() == nil {
			if _, err = nd.Lend(ctx, f.Switch, key, uint64(m.Size), f.Fab); err == nil {
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

// CrashMem stops memory node m at once; its memory is lost, unless it
// is durable (its Dir keeps it).
func (f *Fabric) CrashMem(m *Mem) {
	if m.Node == nil {
		return
	}
	m.cancel()
	m.Node.Close()
	m.Node = nil
}

// Whole reports, asking the switch from ep, whether every copy of
// every region is in place (an error saying what is not).
func (f *Fabric) Whole(ep *endpoint.Endpoint) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ps, err := ep.PoolStat(ctx, f.Switch.String(), f.Fab)
	if err != nil {
		return fmt.Errorf("pool stat: %w", err)
	}
	for _, r := range ps.Regions {
		if r.Health != ctrl.HealthOK {
			return fmt.Errorf("region %d is %v", r.Region, r.Health)
		}
	}
	return nil
}

// SetLoss gives the link of the process at addr a loss rate (1: cut);
// zero restores it.
func (f *Fabric) SetLoss(addr netip.AddrPort, loss float64) {
	l := f.Link
	l.Loss = loss
	f.Net.Locked(func() { f.Net.SetLink(addr, l, l) })
}

// Holder is the memory node that serves a read of byte off of region
// r: the node of its column (of its first copy that answers), found by
// reading that byte and seeing which node's count of served requests
// moved. It fails the test when no node, or more than one, served it.
func (f *Fabric) Holder(r *pool.Region, off int64) *Mem {
	f.T.Helper()
	served := func() []uint64 {
		s := make([]uint64, len(f.Mems))
		for i, mn := range f.Mems {
			if mn.Node != nil {
				s[i] = mn.Node.Stats().Server.Pool.Served
			}
		}
		return s
	}
	b := served()
	if _, err := r.ReadAtContext(f.Ctx(), make([]byte, 1), off); err != nil {
		f.T.Fatalf("seed %d: reading byte %d of region %d: %v", f.Seed, off, r.ID(), err)
	}
	a := served()
	var found *Mem
	for i := range a {
		if a[i] != b[i] {
			if found != nil {
				f.T.Fatalf("seed %d: byte %d of region %d: two memory nodes served one read", f.Seed, off, r.ID())
			}
			found = f.Mems[i]
		}
	}
	if found == nil {
		f.T.Fatalf("seed %d: byte %d of region %d: no memory node served the read", f.Seed, off, r.ID())
	}
	return found
}

// traceTo writes the run's datagrams to a file in dir (Trace), when dir
// is not empty.
func (f *Fabric) traceTo(dir string) {
	if dir != "" {
		f.trace = Trace(f.T, f.Net, dir, f.Seed)
	}
}

// Trace writes every datagram network n sends, delivers or drops (not
// its polls) to a file in dir named after the test and the seed, one
// event a line with the datagram's header: two runs of one seed that
// should replay can then be compared line by line (NDMA_SIM_TRACE=DIR
// for the runs of this package; other harnesses call Trace). It returns
// what closes the file once the network has stopped.
func Trace(t testing.TB, n *simnet.Network, dir string, seed int64) (close func() error) {
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	file, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-seed%d.trace", name, seed)))
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(file, 1<<20)
	n.Trace = func(ev simnet.TraceEvent) {
		if ev.Kind == simnet.TracePoll {
			return
		}
		var h wire.Header
		if ev.Buf == nil {
			fmt.Fprintln(w, ev)
		} else if _, _, err := wire.Parse(ev.Buf, &h); err != nil {
			fmt.Fprintln(w, ev, "unparsed")
		} else {
			fmt.Fprintln(w, ev, h.Op, h.Mode, "flags", h.Flags, "msg", h.MsgID, "psn", h.PSN, "group", h.Group, "addr", h.Addr, "op1", h.Operand1, "op2", h.Operand2, "st", h.Status)
		}
	}
	return func() error {
		n.Trace = nil
		return errors.Join(w.Flush(), file.Close())
	}
}
