package coll

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
)

// simWorld runs f with n communicators whose endpoints (and switch, when
// innet) talk over a simnet network, inside a synctest bubble: time is
// virtual, so link rates and latencies are exact and seconds of traffic
// take milliseconds. The network runs with Quiesce: goroutines at the same
// virtual instant interleave freely, but the network takes what they send
// in one order, so a run is repeated exactly from its seed.
func simWorld(t *testing.T, n int, innet bool, link simnet.LinkConfig, seed int64, f func(t *testing.T, net *simnet.Network, comms []*Communicator)) {
	t.Helper()
	simWorldConfig(t, n, innet, link, seed, nil, f)
}

// simWorldConfig is simWorld with every rank's Config passed through
// configure (if not nil) before New.
func simWorldConfig(t *testing.T, n int, innet bool, link simnet.LinkConfig, seed int64, configure func(*Config), f func(t *testing.T, net *simnet.Network, comms []*Communicator)) {
	t.Helper()
	simWorldJoin(t, n, innet, link, seed, configure, func(t *testing.T, net *simnet.Network, comms []*Communicator, errs []error) {
		for i, err := range errs {
			if err != nil {
				t.Fatalf("seed %d: rank %d: %v", seed, i, err)
			}
		}
		f(t, net, comms)
	})
}

// simWorldJoin is simWorldConfig that hands f every rank's error from New
// (and a nil communicator where it failed) instead of failing the test.
func simWorldJoin(t *testing.T, n int, innet bool, link simnet.LinkConfig, seed int64, configure func(*Config), f func(t *testing.T, net *simnet.Network, comms []*Communicator, errs []error)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		t.Logf("seed %d", seed)
		net := simnet.New(seed)
		net.Quiesce = true
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- net.Serve(ctx) }()
		var sw string
		var srv *fabric.Server
		if innet {
			swAddr := netip.MustParseAddrPort("10.0.0.1:7471")
			swLink := link
			swLink.Rate, swLink.Latency = 0, 0 // the switch is the crossbar: a port per member
			s, err := fabric.New(fabric.Config{Token: testToken, Transport: transport.Config{MTU: 9000, Seed: uint64(seed)}})
			if err != nil {
				t.Fatal(err)
			}
			srv = fabric.NewServer(net.ListenConn(swAddr, swLink, swLink), s, nil)
			sw = swAddr.String()
		}
		eps := make([]*endpoint.Endpoint, n)
		peers := make([]netip.AddrPort, n)
		for i := range n {
			addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), 9000)
			ep, err := endpoint.New(net.ListenConn(addr, link, link), endpoint.Config{
				Transport: transport.Config{MTU: 9000, Seed: uint64(seed)*1000 + uint64(i) + 1},
			}, endpoint.Options{})
			if err != nil {
				t.Fatal(err)
			}
			eps[i], peers[i] = ep, addr
		}
		comms := make([]*Communicator, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		jctx, jcancel := context.WithTimeout(ctx, time.Minute)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cfg := Config{Endpoint: eps[i], Rank: i, Size: n}
				if innet {
					cfg.Switch, cfg.Job, cfg.Token = sw, "sim", testToken
				} else {
					cfg.Peers = peers
				}
				if configure != nil {
					configure(&cfg)
				}
				comms[i], errs[i] = New(jctx, cfg)
			}()
		}
		wg.Wait()
		jcancel()
		f(t, net, comms, errs)
		for _, ep := range eps {
			ep.Close()
		}
		if srv != nil {
			srv.Close()
		}
		cancel()
		if err := <-served; !errors.Is(err, context.Canceled) {
			t.Errorf("seed %d: simnet: %v", seed, err)
		}
	})
}

// simRun runs f on every rank and returns the virtual time it took.
func simRun(t *testing.T, comms []*Communicator, f func(ctx context.Context, c *Communicator) error) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(ctx, c)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", i, err)
		}
	}
	return time.Since(start)
}
