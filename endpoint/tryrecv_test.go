package endpoint_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
)

// TestTryRecvAtMost: a member takes the multicasts delivered to it
// (completed at the sender) without posting receives first, in order; a
// message that has not arrived is left to the next receive, and the
// try takes nothing of the sequence.
func TestTryRecvAtMost(t *testing.T) {
	rdvNet(t, 2, true, func(t *testing.T, _ *fabric.Server, eps []*endpoint.Endpoint) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		gs := make([]*endpoint.Group, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i := range gs {
			wg.Go(func() {
				gs[i], errs[i] = eps[i].JoinJob(ctx, rdvSwitch.String(), "try", 2, i, endpoint.FabricOptions{Token: []byte("t")})
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("join %d: %v", i, err)
			}
		}
		buf := make([]byte, 64)
		if n, ok, err := gs[1].TryRecvAtMost(0, buf); ok || err != nil {
			t.Fatalf("try before any multicast: %d, %v, %v", n, ok, err)
		}
		for i := range 3 {
			if err := gs[0].Multicast(ctx, fmt.Appendf(nil, "message %d", i), endpoint.MulticastOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		// Arrived: the three are here whole, none taken yet.
		if whole, taken := gs[1].Arrived(0); whole != 3 || taken != 0 {
			t.Fatalf("arrived before the tries: whole %d, taken %d, want 3, 0", whole, taken)
		}
		for i := range 3 {
			n, ok, err := gs[1].TryRecvAtMost(0, buf)
			if want := fmt.Sprintf("message %d", i); !ok || err != nil || string(buf[:n]) != want {
				t.Fatalf("try %d: %q, %v, %v, want %q", i, buf[:n], ok, err, want)
			}
			if whole, taken := gs[1].Arrived(0); whole != 3 || taken != uint64(i+1) {
				t.Fatalf("arrived after try %d: whole %d, taken %d, want 3, %d", i, whole, taken, i+1)
			}
		}
		if n, ok, err := gs[1].TryRecvAtMost(0, buf); ok || err != nil {
			t.Fatalf("try with nothing left: %d, %v, %v", n, ok, err)
		}
		// A message sent later is the next receive's.
		done := make(chan error, 1)
		go func() { done <- gs[0].Multicast(ctx, []byte("later"), endpoint.MulticastOptions{}) }()
		n, err := gs[1].RecvAtMost(ctx, 0, buf)
		if err != nil || string(buf[:n]) != "later" {
			t.Fatalf("receive after the tries: %q, %v", buf[:n], err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if whole, taken := gs[1].Arrived(0); whole != 4 || taken != 4 {
			t.Fatalf("arrived after the receive: whole %d, taken %d, want 4, 4", whole, taken)
		}
	})
}
