package endpoint

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ndma/ndma/netio/simnet"
)

// TestSimGateOrder: goroutines woken at one instant that pass gates go on
// one at a time in the order the gates were made, whatever order they
// were started and woken in; on a socket without ordered timers Pass
// returns at once.
func TestSimGateOrder(t *testing.T) {
	const goroutines = 8
	for round := range 20 {
		synctest.Test(t, func(t *testing.T) {
			n := simnet.New(int64(round))
			n.Quiesce = true
			link := simnet.LinkConfig{Rate: 10e9, Latency: 5 * time.Microsecond}
			conn := n.ListenConn(netip.MustParseAddrPort("10.0.0.1:9000"), link, link)
			ctx, cancel := context.WithCancel(t.Context())
			served := make(chan error, 1)
			go func() { served <- n.Serve(ctx) }()
			ep, err := New(conn, Config{}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			gates := make([]*Gate, goroutines)
			for i := range gates {
				gates[i] = ep.NewGate()
			}
			var (
				mu    sync.Mutex
				order []int
				wg    sync.WaitGroup
			)
			for _, i := range rand.New(rand.NewPCG(uint64(round), 0)).Perm(goroutines) {
				wg.Go(func() {
					time.Sleep(time.Millisecond)
					gates[i].Pass()
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					// Blocked again before the next one goes on: what it
					// does after this wait is not ordered.
					time.Sleep(time.Millisecond)
				})
			}
			wg.Wait()
			if want := []int{0, 1, 2, 3, 4, 5, 6, 7}; !slices.Equal(order, want) {
				t.Errorf("round %d: the goroutines went on in order %v, want %v", round, order, want)
			}
			ep.Close()
			cancel()
			if err := <-served; !errors.Is(err, context.Canceled) {
				t.Errorf("Serve = %v", err)
			}
		})
	}
	// Elsewhere a gate does not wait.
	ep, err := Listen("127.0.0.1:0", Config{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	ep.NewGate().Pass()
}
