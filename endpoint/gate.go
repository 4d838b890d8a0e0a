package endpoint

import "github.com/ndma/ndma/netio"

// A Gate orders an application's goroutines that the simulated network
// wakes at one instant: on a socket that offers netio.TimerConn (netio/
// simnet with Quiesce), a goroutine that passes a gate waits until every
// goroutine woken at its instant has run, and the gates passed at one
// instant then let their goroutines on one at a time, in the order the
// endpoint's gates were made, each once the previous one's goroutine is
// blocked again. What those goroutines send then reaches the network in
// an order fixed by the run's seed rather than by the Go scheduler. On
// any other socket Pass returns at once.
//
// One goroutine at a time may pass a gate: an application makes one per
// thing its goroutines hold in turn (a lock, a shard), in a fixed order,
// and passes it where a goroutine holding that thing goes on after a
// wait (for the thing, or for the network).
type Gate struct {
	t  netio.Timer // nil: not on the simulated network
	ch chan struct{}
}

// NewGate returns a gate of the endpoint's (see Gate).
func (ep *Endpoint) NewGate() *Gate {
	g := &Gate{}
	if tc, ok := ep.io.Conn().(netio.TimerConn); ok {
		g.ch = make(chan struct{}, 1)
		g.t = tc.AfterFunc(func() { g.ch <- struct{}{} })
	}
	return g
}

// Pass waits, on the simulated network, for the gate's turn at this
// instant; elsewhere it returns at once.
func (g *Gate) Pass() {
	if g.t == nil {
		return
	}
	g.t.Reset(0)
	<-g.ch
}
