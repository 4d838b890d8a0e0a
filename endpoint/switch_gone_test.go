package endpoint_test

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
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// heartbeatTimeout is the switches' heartbeat timeout in these tests (the
// default), four times the members' default heartbeat interval.
const heartbeatTimeout = time.Second

// switchNet is a simulated network of forwarding nodes and endpoints, in
// a synctest bubble: its time is virtual.
type switchNet struct {
	t    *testing.T
	net  *simnet.Network
	link simnet.LinkConfig
	srvs []*fabric.Server
	eps  []*endpoint.Endpoint
}

// simSwitchNet runs f in a synctest bubble on a simulated network seeded
// with seed, and closes what f started.
func simSwitchNet(t *testing.T, seed int64, f func(t *testing.T, sn *switchNet)) {
	synctest.Test(t, func(t *testing.T) {
		t.Logf("seed %d", seed)
		net := simnet.New(seed)
		net.Quiesce = true
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- net.Serve(ctx) }()
		sn := &switchNet{t: t, net: net, link: simnet.LinkConfig{Rate: 10e9, Latency: 10 * time.Microsecond}}
		defer func() { // also after a t.Fatal: the bubble must end with no goroutine left
			for _, ep := range sn.eps {
				ep.Close()
			}
			for _, srv := range sn.srvs {
				srv.Close()
			}
			cancel()
			<-served
		}()
		f(t, sn)
	})
}

// addSwitch starts a forwarding node at addr.
func (sn *switchNet) addSwitch(addr netip.AddrPort, cfg fabric.Config) {
	sn.t.Helper()
	cfg.Token = []byte("t")
	cfg.HeartbeatTimeout = heartbeatTimeout
	cfg.Transport = transport.Config{MTU: 9000, Seed: uint64(sn.net.Seed())*100 + uint64(len(sn.srvs)) + 1}
	s, err := fabric.New(cfg)
	if err != nil {
		sn.t.Fatal(err)
	}
	sn.srvs = append(sn.srvs, fabric.NewServer(sn.net.ListenConn(addr, sn.link, sn.link), s, nil))
}

// kill crashes the forwarding node at addr: it is never run again.
func (sn *switchNet) kill(addr netip.AddrPort) {
	sn.net.Locked(func() { sn.net.Detach(addr) })
}

// join starts an endpoint for each of sws and has it join job as rank i
// at the switch sws[i], and returns their groups.
func (sn *switchNet) join(job string, sws []netip.AddrPort) []*endpoint.Group {
	sn.t.Helper()
	gs := make([]*endpoint.Group, len(sws))
	errs := make([]error, len(sws))
	var wg sync.WaitGroup
	for i, sw := range sws {
		addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(len(sn.eps) >> 8), byte(len(sn.eps))}), 9000)
		ep, err := endpoint.New(sn.net.ListenConn(addr, sn.link, sn.link), endpoint.Config{
			Transport: transport.Config{MTU: 9000, Seed: uint64(sn.net.Seed())*1000 + uint64(len(sn.eps)) + 1},
		}, endpoint.Options{})
		if err != nil {
			sn.t.Fatal(err)
		}
		sn.eps = append(sn.eps, ep)
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			gs[i], errs[i] = ep.JoinJob(ctx, sw.String(), job, len(sws), i, endpoint.FabricOptions{Token: []byte("t")})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			sn.t.Fatalf("seed %d: rank %d joins %q: %v", sn.net.Seed(), i, job, err)
		}
	}
	return gs
}

// outcome is how a rank's call ended, and when (virtual time).
type outcome struct {
	err error
	at  time.Time
}

// calls runs call for every rank at once and returns a wait for their
// outcomes. The calls have no deadline of their own.
func calls(gs []*endpoint.Group, call func(r int, g *endpoint.Group) error) (wait func() []outcome) {
	outs := make([]outcome, len(gs))
	var wg sync.WaitGroup
	for r, g := range gs {
		wg.Go(func() {
			err := call(r, g)
			outs[r] = outcome{err, time.Now()}
		})
	}
	return func() []outcome {
		wg.Wait()
		return outs
	}
}

// TestSimSwitchDiesFailsGroupOps: the switch of 4 members dies while
// three of them are in an Allreduce that waits for the fourth, which
// waits for a multicast: every member's call fails with ErrSwitchSilent
// within twice the switch's heartbeat timeout of virtual time, not after
// the transport's dead-peer timeout. Closing the endpoints then does not
// wait for the dead switch.
func TestSimSwitchDiesFailsGroupOps(t *testing.T) {
	simSwitchNet(t, 51, func(t *testing.T, sn *switchNet) {
		sw := netip.MustParseAddrPort("10.0.0.1:7471")
		sn.addSwitch(sw, fabric.Config{})
		gs := sn.join("dies", []netip.AddrPort{sw, sw, sw, sw})
		wait := calls(gs, func(r int, g *endpoint.Group) error {
			if r == 3 {
				return g.Recv(context.Background(), 0, make([]byte, 64<<10))
			}
			return g.Allreduce(context.Background(), make([]byte, 64<<10), make([]byte, 64<<10), wire.DtypeI32, wire.AluAdd, endpoint.ReduceOptions{})
		})
		time.Sleep(5 * time.Millisecond) // virtual: the calls are at the switch
		killed := time.Now()
		sn.kill(sw)
		for r, o := range wait() {
			took := o.at.Sub(killed)
			t.Logf("rank %d failed %v after the switch died: %v", r, took, o.err)
			if !errors.Is(o.err, endpoint.ErrSwitchSilent) {
				t.Errorf("rank %d: %v, want ErrSwitchSilent", r, o.err)
			}
			if took > 2*heartbeatTimeout {
				t.Errorf("rank %d failed %v after the switch died, want within %v", r, took, 2*heartbeatTimeout)
			}
		}
	})
}

// TestSimTreeLeafDiesFailsItsMembers: a tree of a root and two leaves
// with 4 members under each; a leaf dies while 7 members are in an
// Allreduce (the dead leaf's last member calls just after): every member
// gets an error within twice the heartbeat timeout of virtual time, those
// under the other leaf a *MemberError naming a member of the dead leaf,
// those under the dead leaf ErrSwitchSilent.
func TestSimTreeLeafDiesFailsItsMembers(t *testing.T) {
	simSwitchNet(t, 52, func(t *testing.T, sn *switchNet) {
		root := netip.MustParseAddrPort("10.0.0.1:7471")
		leaves := []netip.AddrPort{netip.MustParseAddrPort("10.0.1.1:7471"), netip.MustParseAddrPort("10.0.1.2:7471")}
		sn.addSwitch(root, fabric.Config{Children: leaves})
		for _, l := range leaves {
			sn.addSwitch(l, fabric.Config{Parent: root})
		}
		var sws []netip.AddrPort
		for _, l := range leaves {
			for range 4 {
				sws = append(sws, l)
			}
		}
		gs := sn.join("tree", sws)
		var killed time.Time
		died := make(chan struct{})
		wait := calls(gs, func(r int, g *endpoint.Group) error {
			if r == 7 {
				<-died // it calls when its switch is dead
			}
			return g.Allreduce(context.Background(), make([]byte, 64<<10), make([]byte, 64<<10), wire.DtypeI32, wire.AluAdd, endpoint.ReduceOptions{})
		})
		time.Sleep(5 * time.Millisecond) // virtual: the calls are at the switches
		killed = time.Now()
		sn.kill(leaves[1])
		close(died)
		for r, o := range wait() {
			took := o.at.Sub(killed)
			t.Logf("rank %d failed %v after its leaf died: %v", r, took, o.err)
			var me *endpoint.MemberError
			switch {
			case r < 4 && (!errors.As(o.err, &me) || me.Member < 4):
				t.Errorf("rank %d (the live leaf's): %v, want a *MemberError naming a member of the dead leaf", r, o.err)
			case r >= 4 && !errors.Is(o.err, endpoint.ErrSwitchSilent):
				t.Errorf("rank %d (the dead leaf's): %v, want ErrSwitchSilent", r, o.err)
			}
			if took > 2*heartbeatTimeout {
				t.Errorf("rank %d failed %v after its leaf died, want within %v", r, took, 2*heartbeatTimeout)
			}
		}
	})
}

// TestSimSlowSwitchIsNotSilent: a switch that stops answering now and
// then for 3.5 heartbeat intervals (its process not scheduled: simnet's
// Stall), below the members' silence threshold of 4, each stall starting
// at another point of the members' heartbeat interval, fails nothing: an
// Allreduce in flight across the stalls completes with the sum.
func TestSimSlowSwitchIsNotSilent(t *testing.T) {
	simSwitchNet(t, 53, func(t *testing.T, sn *switchNet) {
		sw := netip.MustParseAddrPort("10.0.0.1:7471")
		sn.addSwitch(sw, fabric.Config{})
		gs := sn.join("slow", []netip.AddrPort{sw, sw})
		start := make(chan struct{})
		recv := [][]byte{make([]byte, 4), make([]byte, 4)}
		wait := calls(gs, func(r int, g *endpoint.Group) error {
			if r == 1 {
				<-start // rank 0's call waits at the switch meanwhile
			}
			return g.Allreduce(context.Background(), []byte{byte(r + 1), 0, 0, 0}, recv[r], wire.DtypeI32, wire.AluAdd, endpoint.ReduceOptions{})
		})
		iv := new(endpoint.FabricOptions).HeartbeatInterval()
		for range 8 {
			sn.net.Locked(func() { sn.net.Stall(sw, 7*iv/2) })
			time.Sleep(6*iv + 2*iv/3) // virtual; the next stall starts 2/3 of an interval later in it
		}
		close(start)
		for r, o := range wait() {
			if o.err != nil || recv[r][0] != 3 {
				t.Errorf("rank %d: %v, sum %v; want 3", r, o.err, recv[r])
			}
		}
		for r, g := range gs {
			if err := g.Err(); err != nil {
				t.Errorf("rank %d: the switch counted it dead: %v", r, err)
			}
		}
	})
}
