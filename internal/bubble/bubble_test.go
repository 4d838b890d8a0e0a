package bubble

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestRunVirtualTime: an hour of sleeping goroutines passes in virtual
// time, Run returns only when they are done, and it can run again.
func TestRunVirtualTime(t *testing.T) {
	for round := range 2 {
		var virtual time.Duration
		var wg sync.WaitGroup
		real := time.Now()
		err := Run(func() {
			start := time.Now()
			for i := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					time.Sleep(time.Duration(i+1) * 15 * time.Minute)
				}()
			}
			wg.Wait()
			virtual = time.Since(start)
		})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if virtual != time.Hour {
			t.Errorf("round %d: virtual time %v, want 1h", round, virtual)
		}
		if d := time.Since(real); d > 30*time.Second {
			t.Errorf("round %d: took %v of real time", round, d)
		}
	}
}

// TestGoroutines: the count is the bubble's own, whatever runs outside it.
func TestGoroutines(t *testing.T) {
	if n := Goroutines(); n != 0 {
		t.Fatalf("outside a bubble: %d, want 0", n)
	}
	outside := make(chan struct{})
	defer close(outside)
	for range 3 {
		go func() { <-outside }()
	}
	synctest.Test(t, func(t *testing.T) {
		base := Goroutines()
		if base < 1 {
			t.Fatalf("in a bubble: %d", base)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 5 {
			wg.Go(func() { <-stop })
		}
		synctest.Wait()
		if n := Goroutines(); n != base+5 {
			t.Errorf("with 5 started: %d, want %d", n, base+5)
		}
		close(stop)
		wg.Wait()
		// Done runs before a goroutine exits: wait until they have.
		synctest.Wait()
		if n := Goroutines(); n != base {
			t.Errorf("after they returned: %d, want %d", n, base)
		}
	})
}
