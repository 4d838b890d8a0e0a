package simnet

import (
	"cmp"
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing/synctest"
	"time"
)

// This file bridges goroutine-based code onto the network. It is the only
// part of the package that reads the clock: the time package's clock, which
// inside a testing/synctest bubble is the bubble's fake clock.

// ErrServing is returned by Serve when another Serve is already running.
var ErrServing = errors.New("simnet: Serve is already running")

// Serve drives the network in step with the time package's clock until ctx
// is done, so that [netio.Conn]s from ListenConn and goroutine-based code
// using them can share the network with sans-I/O Nodes. Virtual time
// advances one-for-one with the clock from the moment Serve starts: Serve
// sleeps until the next event is due, runs every event due, and wakes early
// when a Conn writes or Locked is called.
//
// Serve is meant to run in its own goroutine inside a testing/synctest
// bubble, where the clock is fake and advances only when every goroutine in
// the bubble is blocked, so a test over seconds of virtual time finishes in
// milliseconds and its timing is exact. Outside a bubble it runs at wall
// clock speed. Goroutines that run at the same fake instant may interleave
// in any order, and by default the network takes their datagrams in the
// order they write them, so unlike Step, RunFor and RunUntil, runs under
// Serve are deterministic only as far as the code using the Conns is.
//
// With Quiesce set (inside a bubble only), Serve runs the events of an
// instant only once every other goroutine of the bubble is blocked
// (synctest.Wait): it polls the Conns written to and the nodes woken at
// that instant in address order, runs every event due, and only then lets
// the Conns' readers see what arrived, all of an instant's datagrams
// together, and their blocked writers go on. The Conns' timers
// (netio.TimerConn, which loop.Driver uses for its machine's deadline)
// run at their instant after the goroutines the clock woke then, in
// address order. The order goroutines ran in no longer matters, and a
// run is repeated exactly from its seed as long as the code using the
// Conns decides only from what it reads and the clock, and no two of its
// goroutines that touch one Conn are woken by timers of their own at
// the same instant. Goroutines of the bubble must not call synctest.Wait themselves
// then.
//
// While Serve runs, other goroutines may touch the Network only through
// Locked, ListenConn and the Conns. Serve returns ctx's error when ctx is
// done, ErrServing if another Serve is running, or a *RunError wrapping
// ErrLivelock.
func (n *Network) Serve(ctx context.Context) error {
	n.mu.Lock()
	if n.serving {
		n.mu.Unlock()
		return ErrServing
	}
	n.serving, n.quiesce = true, n.Quiesce
	n.serveErr = nil
	n.clockStart = time.Now()
	n.virtStart = n.now
	kick := make(chan struct{}, 1)
	n.kick = kick
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		// What goroutines woke or were owed is handed on as without
		// Quiesce.
		for i, h := range n.woken {
			h.woken = false
			n.schedulePoll(h)
			n.woken[i] = nil
		}
		n.woken = n.woken[:0]
		n.signalLocked()
		for _, t := range n.timers {
			go t.f()
		}
		n.timers = nil
		n.serving, n.quiesce = false, false
		n.kick = nil
		n.mu.Unlock()
	}()

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		n.mu.Lock()
		quiesce := n.quiesce
		n.mu.Unlock()
		if quiesce {
			// Every other goroutine of the bubble is blocked: what they
			// did at this instant (the Wakes of their writes) is all in,
			// and runs in one order whichever of them ran first.
			synctest.Wait()
			n.mu.Lock()
			started := n.startTimersLocked()
			n.mu.Unlock()
			if started {
				continue // what they do at this instant is in before the events
			}
		}
		n.mu.Lock()
		n.catchUpLocked(true)
		err := n.serveErr
		wait := time.Duration(-1)
		if len(n.events) > 0 {
			wait = time.Duration(n.events[0].at - n.now)
		}
		n.mu.Unlock()
		if err != nil {
			return err
		}
		var fire <-chan time.Time
		if wait >= 0 {
			timer.Reset(wait)
			fire = timer.C
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-kick:
		case <-fire:
		}
	}
}

// Locked runs f with the network's lock held, after bringing virtual time
// up to the clock if Serve is running, and then wakes Serve so that it sees
// what f scheduled. It is how a goroutine calls Network methods (Stats,
// SetLink, Detach, Wake, Attach...) while Serve runs. f must not call Step,
// RunFor, RunUntil, Serve, Locked or ListenConn.
func (n *Network) Locked(f func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.catchUpLocked(false)
	f()
	n.kickLocked()
}

// catchUpLocked runs every event due up to the clock and sets virtual
// time to it. With Quiesce, it runs only the events due before the clock
// unless serve is set (Serve, once every other goroutine of the bubble is
// blocked): then it polls the hosts goroutines woke, in address order, and
// runs the events due at the clock too, so that Serve alone runs the
// events of an instant, in an order that does not depend on which
// goroutine ran first. A livelock is kept in serveErr for Serve to return.
// It does nothing unless Serve is running. The caller holds mu.
func (n *Network) catchUpLocked(serve bool) {
	if !n.serving || n.serveErr != nil {
		return
	}
	target := satAdd(n.virtStart, int64(time.Since(n.clockStart)))
	if target < n.now {
		target = n.now
	}
	if !n.quiesce {
		if err := n.run(n.now, target, nil); err != nil {
			n.serveErr = err
			n.kickLocked()
		}
		return
	}
	defer n.signalLocked()
	if target > n.now {
		if err := n.run(n.now, target-1, nil); err != nil {
			n.serveErr = err
			n.kickLocked()
			return
		}
		n.now = target
	}
	if !serve {
		return
	}
	slices.SortFunc(n.woken, func(a, b *host) int { return a.addr.Compare(b.addr) })
	for i, h := range n.woken {
		h.woken = false
		n.schedulePoll(h)
		n.woken[i] = nil
	}
	n.woken = n.woken[:0]
	if err := n.run(n.now, target, nil); err != nil {
		n.serveErr = err
		n.kickLocked()
	}
}

// signalLocked wakes the readers and writers of the Conns that received
// datagrams or had their send buffers drained. The caller holds mu.
func (n *Network) signalLocked() {
	for i, c := range n.signals {
		c.signal()
		n.signals[i] = nil
	}
	n.signals = n.signals[:0]
}

// dueTimer is a Conn's timer callback that fell due while Serve ran
// with quiesce.
type dueTimer struct {
	addr netip.AddrPort
	seq  uint64 // the Conn's count of timers when this one was made
	f    func()
}

// timerDue runs f, a Conn's timer callback, now; or, while Serve runs
// with quiesce, hands it to Serve, which starts it once every goroutine
// of the bubble is blocked.
func (n *Network) timerDue(addr netip.AddrPort, seq uint64, f func()) {
	n.mu.Lock()
	if n.serving && n.quiesce {
		n.timers = append(n.timers, dueTimer{addr, seq, f})
		n.kickLocked()
		n.mu.Unlock()
		return
	}
	n.mu.Unlock()
	f()
}

// startTimersLocked starts the first of the timer callbacks that fell
// due, in address order and a Conn's in the order they were made, on a
// goroutine of its own (it may wait for a lock that a blocked goroutine
// holds), and reports whether there was one. Serve starts the next once
// every goroutine of the bubble is blocked again, so that what each
// callback sets off is done before the next begins. The caller holds mu.
func (n *Network) startTimersLocked() bool {
	if len(n.timers) == 0 {
		return false
	}
	k := 0
	for i, t := range n.timers {
		if c := cmp.Or(t.addr.Compare(n.timers[k].addr), cmp.Compare(t.seq, n.timers[k].seq)); c < 0 {
			k = i
		}
	}
	f := n.timers[k].f
	n.timers = slices.Delete(n.timers, k, k+1)
	go f()
	return true
}

// kickLocked wakes Serve if it is running. The caller holds mu.
func (n *Network) kickLocked() {
	select {
	case n.kick <- struct{}{}:
	default: // already kicked, or not serving (nil channel)
	}
}
