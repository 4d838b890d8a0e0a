package coll

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio"
)

// udpComms starts n endpoints on loopback (and a switch when innet) and
// returns one communicator per rank. Everything is closed at cleanup.
func udpComms(t testing.TB, n int, innet bool) []*Communicator {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var sw string
	if innet {
		conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
		if err != nil {
			t.Fatal(err)
		}
		s, err := fabric.New(fabric.Config{Token: testToken})
		if err != nil {
			t.Fatal(err)
		}
		srv := fabric.NewServer(conn, s, nil)
		t.Cleanup(func() { srv.Close() })
		sw = srv.Addr().String()
	}
	eps := make([]*endpoint.Endpoint, n)
	peers := make([]netip.AddrPort, n)
	for i := range n {
		ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ep.Close() })
		eps[i] = ep
		peers[i] = ep.LocalAddr()
	}
	comms := make([]*Communicator, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := Config{Endpoint: eps[i], Rank: i, Size: n}
			if innet {
				cfg.Switch, cfg.Job, cfg.Token = sw, t.Name(), testToken
			} else {
				cfg.Peers = peers
			}
			comms[i], errs[i] = New(ctx, cfg)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", i, err)
		}
	}
	return comms
}

// runAll runs f on every rank concurrently and fails the test with the
// first error.
func runAll(t testing.TB, comms []*Communicator, f func(ctx context.Context, c *Communicator) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
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
}

// testToken is the fabric token of the tests' switches and ranks.
var testToken = []byte("coll test token")
