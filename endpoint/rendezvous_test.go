package endpoint_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/transport"
)

var rdvSwitch = netip.MustParseAddrPort("10.0.0.1:7471")

// rdvNet runs f in a synctest bubble on a simulated network with n
// endpoints and, if withSwitch, a forwarding node at rdvSwitch (passed to
// f, which may close it).
func rdvNet(t *testing.T, n int, withSwitch bool, f func(t *testing.T, srv *fabric.Server, eps []*endpoint.Endpoint)) {
	synctest.Test(t, func(t *testing.T) {
		net := simnet.New(1)
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- net.Serve(ctx) }()
		link := simnet.LinkConfig{Rate: 10e9, Latency: 10 * time.Microsecond}
		var srv *fabric.Server
		eps := make([]*endpoint.Endpoint, n)
		defer func() { // also after a t.Fatal: the bubble must end with no goroutine left
			for _, ep := range eps {
				if ep != nil {
					ep.Close()
				}
			}
			if srv != nil {
				srv.Close()
			}
			cancel()
			<-served
		}()
		if withSwitch {
			s, err := fabric.New(fabric.Config{Token: []byte("t"), Transport: transport.Config{MTU: 9000, Seed: 1}})
			if err != nil {
				t.Fatal(err)
			}
			srv = fabric.NewServer(net.ListenConn(rdvSwitch, link, link), s, nil)
		}
		for i := range eps {
			addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, 0, byte(i)}), 9000)
			ep, err := endpoint.New(net.ListenConn(addr, link, link), endpoint.Config{Transport: transport.Config{MTU: 9000, Seed: uint64(i) + 2}}, endpoint.Options{})
			if err != nil {
				t.Fatal(err)
			}
			eps[i] = ep
		}
		f(t, srv, eps)
	})
}

// joinAll has eps[i] join job of size as ranks[i], all with a timeout of
// wait, and returns their errors.
func joinAll(eps []*endpoint.Endpoint, job string, size int, ranks []int, wait time.Duration) []error {
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for i, r := range ranks {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			_, errs[i] = eps[i].JoinJob(ctx, rdvSwitch.String(), job, size, r, endpoint.FabricOptions{Token: []byte("t")})
		})
	}
	wg.Wait()
	return errs
}

// TestJoinTimeoutNamesMissingRanks: a rendezvous that times out says how
// many ranks of how many joined and which are missing, as a
// *RendezvousError that still matches context.DeadlineExceeded.
func TestJoinTimeoutNamesMissingRanks(t *testing.T) {
	rdvNet(t, 3, true, func(t *testing.T, _ *fabric.Server, eps []*endpoint.Endpoint) {
		errs := joinAll(eps, "job", 4, []int{0, 1, 3}, 30*time.Second)
		for i, err := range errs {
			var re *endpoint.RendezvousError
			if !errors.As(err, &re) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("rank %d: %v, want a RendezvousError matching DeadlineExceeded", i, err)
			}
			if re.Size != 4 || !slices.Equal(re.Joined, []int{0, 1, 3}) || !slices.Equal(re.Missing, []int{2}) {
				t.Errorf("rank %d: size %d, joined %v, missing %v", i, re.Size, re.Joined, re.Missing)
			}
			want := `endpoint: join "job": rendezvous timed out after 30s: 3 of 4 ranks joined; missing rank 2`
			if err.Error() != want {
				t.Errorf("rank %d:\n got %s\nwant %s", i, err, want)
			}
			if errors.Is(err, endpoint.ErrNoSwitch) {
				t.Errorf("rank %d: %v matches ErrNoSwitch", i, err)
			}
		}
	})
}

// TestJoinTimeoutManyMissing: the error lists the first 16 missing ranks
// and counts the others.
func TestJoinTimeoutManyMissing(t *testing.T) {
	rdvNet(t, 1, true, func(t *testing.T, _ *fabric.Server, eps []*endpoint.Endpoint) {
		err := joinAll(eps, "big", 40, []int{5}, time.Minute)[0]
		var re *endpoint.RendezvousError
		if !errors.As(err, &re) || len(re.Missing) != 39 {
			t.Fatalf("%v, want 39 missing ranks", err)
		}
		want := `endpoint: join "big": rendezvous timed out after 1m0s: 1 of 40 ranks joined; missing ranks 0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 and 23 more`
		if err.Error() != want {
			t.Errorf("\n got %s\nwant %s", err, want)
		}
	})
}

// TestJoinTimeoutSwitchGone: the switch took the join and then went away:
// the question who joined goes unanswered too, and the error says so.
func TestJoinTimeoutSwitchGone(t *testing.T) {
	rdvNet(t, 1, true, func(t *testing.T, srv *fabric.Server, eps []*endpoint.Endpoint) {
		done := make(chan error, 1)
		go func() { done <- joinAll(eps, "job", 2, []int{0}, 10*time.Second)[0] }()
		time.Sleep(time.Second) // virtual: the join is at the switch
		srv.Close()
		err := <-done
		var re *endpoint.RendezvousError
		if !errors.As(err, &re) || !errors.Is(err, endpoint.ErrNoSwitch) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%v, want a RendezvousError matching ErrNoSwitch and DeadlineExceeded", err)
		}
		if want := `endpoint: join "job": rendezvous timed out after 10s; no switch answers at 10.0.0.1:7471`; err.Error() != want {
			t.Errorf("\n got %s\nwant %s", err, want)
		}
	})
}

// TestControlNoSwitch: a control exchange with an address where no
// switch answers fails with an error naming the address and the wait,
// matching ErrNoSwitch and what it matched before (the context's
// deadline, or the transport giving up on the peer).
func TestControlNoSwitch(t *testing.T) {
	rdvNet(t, 1, false, func(t *testing.T, _ *fabric.Server, eps []*endpoint.Endpoint) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := eps[0].PoolStat(ctx, rdvSwitch.String(), endpoint.FabricOptions{Token: []byte("t")})
		cancel()
		// The endpoint seals nothing: the message says a sealing switch
		// would drop its requests too.
		if want := "endpoint: pool stat: no switch answers at 10.0.0.1:7471 after 2s" + endpoint.UnsealedHint; err == nil || err.Error() != want {
			t.Errorf("pool stat within 2s:\n got %v\nwant %s", err, want)
		}
		if !errors.Is(err, endpoint.ErrNoSwitch) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("pool stat within 2s: %v does not match ErrNoSwitch and DeadlineExceeded", err)
		}
		var na *endpoint.NoAnswerError
		if !errors.As(err, &na) || na.Switch != rdvSwitch || na.Acked || !na.Unsealed {
			t.Errorf("pool stat within 2s: %#v, want a NoAnswerError for %v, not acknowledged", na, rdvSwitch)
		}

		// Without a deadline the transport gives up after its DeadTimeout.
		_, err = eps[0].PoolStat(context.Background(), rdvSwitch.String(), endpoint.FabricOptions{Token: []byte("t")})
		want := fmt.Sprintf("endpoint: pool stat: no switch answers at 10.0.0.1:7471 after %v", transport.DefaultDeadTimeout) + endpoint.UnsealedHint
		if err == nil || err.Error() != want || !errors.Is(err, endpoint.ErrNoSwitch) || !errors.Is(err, transport.ErrPeerDead) {
			t.Errorf("pool stat:\n got %v\nwant %s, matching ErrNoSwitch and transport.ErrPeerDead", err, want)
		}

		ctx, cancel = context.WithTimeout(context.Background(), 3*time.Second)
		_, err = eps[0].JoinJob(ctx, rdvSwitch.String(), "job", 2, 0, endpoint.FabricOptions{Token: []byte("t")})
		cancel()
		if want := `endpoint: join "job": no switch answers at 10.0.0.1:7471 after 3s` + endpoint.UnsealedHint; err == nil || err.Error() != want ||
			!errors.Is(err, endpoint.ErrNoSwitch) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("join:\n got %v\nwant %s, matching ErrNoSwitch and DeadlineExceeded", err, want)
		}
		if strings.Contains(fmt.Sprint(err), "operation timed out") {
			t.Errorf("join: %v", err)
		}
	})
}

// TestJoinSizeMismatch: rank 0 launched with size 2 waits; rank 1,
// launched with size 3, asks for the job. It is refused at once, and so
// is the waiting rank, told which rank asked what (not, a minute later,
// that rank 1 is missing); the job can be launched again at once.
func TestJoinSizeMismatch(t *testing.T) {
	rdvNet(t, 2, true, func(t *testing.T, _ *fabric.Server, eps []*endpoint.Endpoint) {
		start := time.Now()
		var waiting error
		var wg sync.WaitGroup
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, waiting = eps[0].JoinJob(ctx, rdvSwitch.String(), "job", 2, 0, endpoint.FabricOptions{Token: []byte("t")})
		})
		time.Sleep(100 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := eps[1].JoinJob(ctx, rdvSwitch.String(), "job", 3, 1, endpoint.FabricOptions{Token: []byte("t")})
		cancel()
		wg.Wait()
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("the ranks learned of the mismatch after %v", d)
		}
		if err == nil || !strings.Contains(err.Error(), "joined with size 2") {
			t.Errorf("the rank with size 3: %v", err)
		}
		want := `rank 1 asked for the job with size 3 and MTU 9000, this endpoint with size 2 and MTU 9000`
		if waiting == nil || !strings.Contains(waiting.Error(), want) {
			t.Errorf("the waiting rank: %v, want it to say %q", waiting, want)
		}
		// Launched again, with one size: the group forms.
		if errs := joinAll(eps, "job", 2, []int{0, 1}, 10*time.Second); errs[0] != nil || errs[1] != nil {
			t.Fatalf("the relaunch: %v", errs)
		}
	})
}
