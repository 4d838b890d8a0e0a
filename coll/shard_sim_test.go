package coll

import (
	"context"
	"errors"
	"fmt"
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

// shardWorld is what simShards hands its function: the ranks'
// communicators, the network and the k switches (their addresses and
// servers, in Config.Switches order).
type shardWorld struct {
	net   *simnet.Network
	comms []*Communicator
	addrs []netip.AddrPort
	srvs  []*fabric.Server
}

// simShards runs f with n communicators sharded over k switches on a
// simnet network inside a synctest bubble (as simWorld does for one): each
// rank has one endpoint per switch, all on links like link; the switches
// are crossbars (no rate or latency of their own) that share link's loss.
func simShards(t *testing.T, n, k int, link simnet.LinkConfig, seed int64, f func(t *testing.T, w *shardWorld)) {
	t.Helper()
	simShardsConfig(t, n, k, link, seed, nil, f)
}

// simShardsConfig is simShards with every rank's Config passed through
// configure (if not nil) before New.
func simShardsConfig(t *testing.T, n, k int, link simnet.LinkConfig, seed int64, configure func(*Config), f func(t *testing.T, w *shardWorld)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		t.Logf("seed %d, %d ranks, %d switches", seed, n, k)
		net := simnet.New(seed)
		net.Quiesce = true
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- net.Serve(ctx) }()
		w := &shardWorld{net: net}
		swLink := link
		swLink.Rate, swLink.Latency = 0, 0
		var switches []string
		for i := range k {
			addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + i)}), 7471)
			s, err := fabric.New(fabric.Config{Token: testToken, Transport: transport.Config{MTU: 9000, Seed: uint64(seed)*100 + uint64(i)}})
			if err != nil {
				t.Fatal(err)
			}
			w.srvs = append(w.srvs, fabric.NewServer(net.ListenConn(addr, swLink, swLink), s, nil))
			w.addrs = append(w.addrs, addr)
			switches = append(switches, addr.String())
		}
		var eps []*endpoint.Endpoint
		cfgs := make([]Config, n)
		for r := range n {
			cfgs[r] = Config{Rank: r, Size: n, Switches: switches, Job: "sim", Token: testToken}
			for i := range k {
				addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1 + byte(i), byte(r >> 8), byte(r)}), 9000)
				ep, err := endpoint.New(net.ListenConn(addr, link, link), endpoint.Config{
					Transport: transport.Config{MTU: 9000, Seed: uint64(seed)*1000 + uint64(r*k+i) + 1},
				}, endpoint.Options{})
				if err != nil {
					t.Fatal(err)
				}
				eps = append(eps, ep)
				if i == 0 {
					cfgs[r].Endpoint = ep
				} else {
					cfgs[r].StripeEndpoints = append(cfgs[r].StripeEndpoints, ep)
				}
			}
		}
		w.comms = make([]*Communicator, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		jctx, jcancel := context.WithTimeout(ctx, time.Minute)
		for r := range n {
			if configure != nil {
				configure(&cfgs[r])
			}
			wg.Go(func() { w.comms[r], errs[r] = New(jctx, cfgs[r]) })
		}
		wg.Wait()
		jcancel()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("seed %d: rank %d: %v", seed, r, err)
			}
		}
		f(t, w)
		for _, ep := range eps {
			ep.Close()
		}
		for _, srv := range w.srvs {
			srv.Close()
		}
		cancel()
		if err := <-served; !errors.Is(err, context.Canceled) {
			t.Errorf("seed %d: simnet: %v", seed, err)
		}
	})
}

// kill crashes switch i (simnet.Detach): it is never called again.
func (w *shardWorld) kill(i int) {
	w.net.Locked(func() { w.net.Detach(w.addrs[i]) })
}

// runEach runs f on every rank at once and returns each rank's error and
// how long its call took.
func runEach(comms []*Communicator, f func(ctx context.Context, c *Communicator) error) ([]error, []time.Duration) {
	errs := make([]error, len(comms))
	took := make([]time.Duration, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() {
			start := time.Now()
			errs[r] = f(context.Background(), c)
			took[r] = time.Since(start)
		})
	}
	wg.Wait()
	return errs, took
}

// firstErr fails the test with the first rank's error.
func firstErr(t *testing.T, what string, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("%s: rank %d: %v", what, r, err)
		}
	}
}

// shardName names a subtest by its switch count.
func shardName(k int) string { return fmt.Sprintf("switches=%d", k) }
