package bubble

import (
	"sync"
	"testing"
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
