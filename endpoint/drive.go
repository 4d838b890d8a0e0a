package endpoint

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ndma/ndma/netio"
)

// driveSlice bounds one wait of a driving caller in the socket, in which
// it holds its thread's scheduler slot (P); once nothing has arrived for
// a slice it waits giving the P back, so that the process's other
// goroutines run.
const driveSlice = time.Millisecond

// drivingKey marks a context made by Driving.
type drivingKey struct{}

// Driving returns a context under which the endpoint's waits (Do, Drive)
// read and process the socket on the waiting goroutine's own thread
// instead of sleeping until the endpoint's reader goroutine wakes them.
// On a goroutine locked to its thread (a C thread calling into Go) that
// saves a thread switch per reply: the kernel wakes the waiting thread
// itself. One goroutine drives at a time; others wait as usual. Only
// sockets that support it (netio.DirectConn: UDP on Linux) are driven;
// elsewhere the mark changes nothing.
func Driving(ctx context.Context) context.Context {
	return context.WithValue(ctx, drivingKey{}, true)
}

// driving is the endpoint's state for callers that drive it.
type driving struct {
	mu      sync.Mutex // held by the driving caller
	once    sync.Once
	r       netio.DirectReader // nil: the conn cannot be driven
	ds      []netio.Datagram
	waiting atomic.Bool // the driver sleeps in r.Wait: wake it on completions
	// Under Endpoint.mu: a driver is at work; an op it completed has a
	// goroutine waiting for it (in Do, or on a notify channel); and how
	// often the driver let such goroutines have its thread.
	active bool
	woke   bool
	yields atomic.Uint64
}

// directReader makes the direct reader on first use.
func (ep *Endpoint) directReader() netio.DirectReader {
	d := &ep.drv
	d.once.Do(func() {
		dc, ok := ep.io.Conn().(netio.DirectConn)
		if !ok {
			return
		}
		r, err := dc.NewDirectReader()
		if err != nil {
			ep.log.Debug("endpoint: no direct reads", "err", err)
			return
		}
		d.r = r
		d.ds = make([]netio.Datagram, ep.io.Conn().BatchSize())
		for i := range d.ds {
			d.ds[i].Buf = make([]byte, netio.MaxDatagram)
		}
	})
	return d.r
}

// Drive reads and steps the endpoint's socket on the calling goroutine
// until ready reports true or ctx ends, if ctx is marked Driving, the
// socket supports it and no other goroutine drives; otherwise, or if
// the socket fails or the endpoint closes, it returns at once. Either
// way the caller then waits as it would without Drive: Drive only
// changes which thread does the receiving. ready is called often and
// must be cheap (a non-blocking channel check).
func (ep *Endpoint) Drive(ctx context.Context, ready func() bool) {
	if ctx.Value(drivingKey{}) == nil || ready() {
		return
	}
	d := &ep.drv
	r := ep.directReader()
	if r == nil || !d.mu.TryLock() {
		return
	}
	defer d.mu.Unlock()
	ep.mu.Lock()
	d.active, d.woke = true, false
	ep.mu.Unlock()
	defer func() {
		ep.mu.Lock()
		d.active = false
		ep.mu.Unlock()
	}()
	var idle time.Duration // waited since the last datagram read
	for !ready() && ctx.Err() == nil {
		k, err := r.TryReadBatch(d.ds)
		if err != nil {
			return
		}
		if k > 0 {
			idle = 0
			open, woke := ep.receive(d.ds[:k])
			if !open {
				return
			}
			if woke && !ready() {
				// Another goroutine's op completed: it cannot run while
				// this one holds the thread's P in a wait (GOMAXPROCS=1),
				// so give it the P now rather than after a slice.
				d.yields.Add(1)
				runtime.Gosched()
			}
			continue
		}
		if !ep.serveTimer() {
			return
		}
		wait := driveSlice
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(dl))
		}
		if at := ep.nextTimer(); !at.IsZero() {
			wait = min(wait, time.Until(at))
		}
		d.waiting.Store(true)
		if ready() {
			d.waiting.Store(false)
			return
		}
		if idle < driveSlice {
			err = r.Wait(max(wait, 0))
		} else {
			// Nothing for a slice: a long wait, where a thread switch
			// more on return costs little. Give the P back meanwhile,
			// so that the process's other goroutines, timers and network
			// poller (other endpoints' readers) run.
			err = r.Sleep(max(wait, 0))
		}
		d.waiting.Store(false)
		if err != nil {
			return
		}
		idle += max(wait, 0)
	}
}

// wakeDriver makes a driver waiting in the socket look at its condition
// again: an op completed outside it.
func (ep *Endpoint) wakeDriver() {
	if ep.drv.waiting.Load() {
		ep.drv.r.Wake()
	}
}

// receive steps ds[:k] through the core, as the reader goroutine does,
// and reports whether the endpoint is still open and whether an op with
// another goroutine waiting for it completed.
func (ep *Endpoint) receive(ds []netio.Datagram) (open, woke bool) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.closed {
		return false, false
	}
	ep.io.ReceiveLocked(ds)
	woke, ep.drv.woke = ep.drv.woke, false
	return true, woke
}

// serveTimer runs the endpoint's timer work if it is due (the timer's
// own goroutine may not get the thread while a driver holds it), and
// reports whether the endpoint is still open.
func (ep *Endpoint) serveTimer() bool {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.closed {
		return false
	}
	ep.io.ServeTimerLocked()
	return true
}

// nextTimer is when the endpoint's timer is next due (zero: not armed).
func (ep *Endpoint) nextTimer() time.Time {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.io.TimerLocked()
}

// closeDriver closes the direct reader once no goroutine drives. The
// endpoint is closed already, so a driver stops at its next step.
func (ep *Endpoint) closeDriver() {
	d := &ep.drv
	d.once.Do(func() {}) // not made yet: never made now
	if d.r == nil {
		return
	}
	d.r.Wake()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.r.Close()
}
