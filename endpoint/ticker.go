package endpoint

import (
	"sync"
	"time"

	"github.com/ndma/ndma/netio"
)

// ticker ticks every d, as time.NewTicker, from a timer of the endpoint's
// socket where it offers one (netio.TimerConn: the simulated network then
// runs the tick after the goroutines woken at the same instant, as it
// runs the driver's timer, so that a simulation replays from its seed).
// stop ends it.
func (ep *Endpoint) ticker(d time.Duration) (c <-chan time.Time, stop func()) {
	tc, ok := ep.io.Conn().(netio.TimerConn)
	if !ok {
		t := time.NewTicker(d)
		return t.C, t.Stop
	}
	ch := make(chan time.Time, 1)
	var (
		mu      sync.Mutex
		stopped bool
		t       netio.Timer
	)
	t = tc.AfterFunc(func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		select {
		case ch <- time.Now():
		default: // as time.Ticker: a slow reader misses ticks
		}
		t.Reset(d)
	})
	mu.Lock()
	t.Reset(d)
	mu.Unlock()
	return ch, func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
	}
}
