package loop

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ndma/ndma/netio"
)

// MaxPolls bounds the Polls of one pump: a machine that keeps asking to
// be polled at once is polled again from its timer, so that the readers
// get the lock in between.
const MaxPolls = 64

// Config configures a Driver. The zero value is a single socket read
// with ReadBatch, written under the owner's lock, logging nowhere.
type Config struct {
	// Logger receives socket errors (at warning level); nil discards.
	Logger *slog.Logger
	// Name prefixes log messages ("endpoint", "fabric"); empty means
	// "loop".
	Name string
	// Views reads with netio.ReadViews: a datagram's Buf may be a view
	// of the socket's receive buffers, valid only during Receive, so the
	// machine must copy what it keeps of it (fabric.Switch does).
	Views bool
	// Overlap lets the readers and the timer release the owner's lock
	// before a pump's last write, so that another reader steps the
	// packets it read while this one writes. Only for a machine whose
	// Poll output survives Receive calls (fabric.Switch's does); the
	// datagrams are still written before the next Poll. PumpLocked
	// always writes under the lock.
	Overlap bool
}

// Driver runs one Machine over netio.Conns: a reader goroutine per socket,
// a timer for the machine's deadline, and the pump (Poll, write, arm the
// timer) after each batch read, each timer expiry and each PumpLocked.
// The machine's owner supplies the lock under which the driver calls the
// machine; whoever holds it may call the machine too, and must call
// PumpLocked after anything that gives it something to send.
type Driver struct {
	m     Machine
	s     Streamer // m, if it is one
	mu    sync.Locker
	conn  netio.Conn   // datagrams go out through it
	conns []netio.Conn // the sockets read from: conn first
	log   *slog.Logger
	name  string
	cfg   Config

	// Under mu.
	timer   netio.Timer
	timerAt time.Time
	closed  atomic.Bool // set under mu, read anywhere

	// wmu is held from a Poll until its datagrams are written (they
	// point into buffers of the machine that its next call may reuse);
	// its holder owns out and scratch. Lock order: mu, then wmu.
	wmu     sync.Mutex
	out     []netio.Datagram
	scratch []netio.Datagram
	writeFn func([]netio.Datagram) // write, made once: a method value handed to PollWrite escapes

	readers   sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
	errMu     sync.Mutex
	err       error // the first socket error met before Close
}

// New returns a driver of m over conns (conns[0] is written to; every one
// is read from once Start runs), calling m under mu. The driver owns
// conns from now on: Close closes them.
func New(m Machine, mu sync.Locker, conns []netio.Conn, cfg Config) *Driver {
	if len(conns) == 0 {
		panic("loop: New without a conn")
	}
	d := &Driver{m: m, mu: mu, conn: conns[0], conns: conns, log: cfg.Logger, name: cfg.Name, cfg: cfg}
	d.s, _ = m.(Streamer)
	d.writeFn = d.write
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	if d.name == "" {
		d.name = "loop"
	}
	if tc, ok := d.conn.(netio.TimerConn); ok {
		d.timer = tc.AfterFunc(d.onTimer)
	} else {
		t := time.AfterFunc(time.Hour, d.onTimer)
		t.Stop()
		d.timer = t
	}
	return d
}

// Start starts the reader goroutines. Call it once, not under mu.
func (d *Driver) Start() {
	for _, c := range d.conns {
		d.readers.Go(func() { d.reader(c) })
	}
}

// Conn is the socket datagrams go out through.
func (d *Driver) Conn() netio.Conn { return d.conn }

func (d *Driver) reader(conn netio.Conn) {
	ds := make([]netio.Datagram, conn.BatchSize())
	vo, viewOnly := conn.(netio.ViewOnlyReader)
	viewOnly = viewOnly && d.cfg.Views
	var bufs [][]byte
	if !viewOnly {
		// (A conn that only hands out views needs none: 64 KiB times
		// the batch, which thousands of simulated endpoints would hold.)
		bufs = make([][]byte, len(ds))
		for i := range bufs {
			bufs[i] = make([]byte, netio.MaxDatagram)
			ds[i].Buf = bufs[i]
		}
	}
	for {
		var k int
		var err error
		switch {
		case viewOnly:
			k, err = vo.ReadBatchView(ds)
		case d.cfg.Views:
			k, err = netio.ReadViews(conn, ds, bufs)
		default:
			k, err = conn.ReadBatch(ds)
		}
		if err != nil {
			if errors.Is(err, netio.ErrClosed) || d.closed.Load() {
				return
			}
			d.fail("read", err)
			continue
		}
		d.mu.Lock()
		now := time.Now()
		d.receiveLocked(now, ds[:k])
		d.pump(now, d.cfg.Overlap)
		if !d.cfg.Overlap {
			d.mu.Unlock()
		}
	}
}

// ReceiveLocked hands ds to the machine, as the readers do, and pumps. It
// is for an owner that reads a socket itself (endpoint.Drive); each Buf
// is resliced to its capacity afterwards, ready for the next ReadBatch.
// The caller holds mu.
func (d *Driver) ReceiveLocked(ds []netio.Datagram) {
	now := time.Now()
	d.receiveLocked(now, ds)
	d.PumpLocked(now)
}

// receiveLocked hands ds to the machine. Caller holds mu.
func (d *Driver) receiveLocked(now time.Time, ds []netio.Datagram) {
	for i := range ds {
		d.m.Receive(now, ds[i])
		if !d.cfg.Views {
			ds[i].Buf = ds[i].Buf[:cap(ds[i].Buf)]
		}
	}
}

func (d *Driver) onTimer() {
	d.mu.Lock()
	d.timerAt = time.Time{}
	if d.closed.Load() {
		d.mu.Unlock()
		return
	}
	d.pump(time.Now(), d.cfg.Overlap)
	if !d.cfg.Overlap {
		d.mu.Unlock()
	}
}

// ServeTimerLocked pumps if the timer is due, for an owner whose
// goroutine may hold the thread the timer would run on
// (endpoint.Drive). The caller holds mu.
func (d *Driver) ServeTimerLocked() {
	if at := d.timerAt; !at.IsZero() {
		if now := time.Now(); !now.Before(at) {
			d.timerAt = time.Time{} // as onTimer: the pump arms it again
			d.PumpLocked(now)
		}
	}
}

// TimerLocked is when the timer is next due (zero: not armed). The
// caller holds mu.
func (d *Driver) TimerLocked() time.Time { return d.timerAt }

// PumpLocked polls the machine, writes what it gives, polls again while
// it asks to be polled at once (MaxPolls times at most) and arms the
// timer for its deadline. The caller holds mu, and still holds it when
// PumpLocked returns.
func (d *Driver) PumpLocked(now time.Time) { d.pump(now, false) }

// pump is PumpLocked; with unlock it releases mu once the timer is armed,
// before the last write.
func (d *Driver) pump(now time.Time, unlock bool) {
	for i := 0; ; i++ {
		d.wmu.Lock()
		var out []netio.Datagram
		var next time.Time
		if d.s != nil {
			d.scratch, next = d.s.PollWrite(now, d.scratch, d.writeFn)
		} else {
			out, next = d.m.Poll(now, d.out[:0])
		}
		last := next.IsZero() || next.After(now) || i == MaxPolls-1
		if last {
			d.armLocked(next)
			if unlock {
				d.mu.Unlock()
			}
		}
		if len(out) > 0 {
			d.write(out)
		}
		clear(out)
		d.out = out[:0]
		d.wmu.Unlock()
		if last {
			return
		}
		now = time.Now()
	}
}

// armLocked sets the timer to fire at next, unless it fires earlier.
// Caller holds mu.
func (d *Driver) armLocked(next time.Time) {
	if next.IsZero() {
		return
	}
	if d.timerAt.IsZero() || next.Before(d.timerAt) {
		d.timerAt = next
		d.timer.Reset(max(time.Until(next), 0))
	}
}

// write writes ds to the socket. Caller holds wmu.
func (d *Driver) write(ds []netio.Datagram) {
	if err := d.conn.WriteBatch(ds); err != nil && !d.closed.Load() {
		d.fail("write", err)
	}
}

// fail logs a socket error and keeps the first.
func (d *Driver) fail(op string, err error) {
	d.log.Warn(d.name+": "+op, "err", err)
	d.errMu.Lock()
	if d.err == nil {
		d.err = err
	}
	d.errMu.Unlock()
}

// Err returns the first socket error the driver met (and logged) before
// it was stopped, or nil.
func (d *Driver) Err() error {
	d.errMu.Lock()
	defer d.errMu.Unlock()
	return d.err
}

// StopLocked stops the timer: from now on only the readers (until Close)
// and PumpLocked pump, and socket errors are no longer logged. The owner
// may still pump to send what it must before closing. The caller holds
// mu.
func (d *Driver) StopLocked() {
	d.closed.Store(true)
	d.timer.Stop()
}

// LingerLocked calls done, and then every millisecond, until it reports
// true or limit has passed, releasing the owner's lock in between so
// that the readers step what arrives (an owner that closes lingers so
// while it owes peers acknowledgments). The caller holds mu; so does
// done.
func (d *Driver) LingerLocked(limit time.Duration, done func() bool) {
	for end := time.Now().Add(limit); !done() && time.Now().Before(end); {
		d.mu.Unlock()
		time.Sleep(time.Millisecond)
		d.mu.Lock()
	}
}

// Stopped reports whether StopLocked or Close ran.
func (d *Driver) Stopped() bool { return d.closed.Load() }

// Close stops the driver, closes its sockets and waits for its readers.
// It returns the sockets' Close errors the first time and nil after.
// Call it not under mu.
func (d *Driver) Close() error {
	d.closeOnce.Do(func() {
		d.mu.Lock()
		d.StopLocked()
		d.mu.Unlock()
		var errs []error
		for _, c := range d.conns {
			errs = append(errs, c.Close())
		}
		d.readers.Wait()
		d.closeErr = errors.Join(errs...)
	})
	return d.closeErr
}
