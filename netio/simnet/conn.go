package simnet

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ndma/ndma/netio"
)

// Conn buffer limits, in bytes of payload, like a UDP socket's SO_SNDBUF
// and SO_RCVBUF.
const (
	// ConnSendBuffer is how many bytes a Conn holds between WriteBatch and
	// the network taking them; WriteBatch blocks while it is full.
	ConnSendBuffer = 4 << 20
	// ConnRecvBuffer is how many bytes a Conn holds between the network
	// delivering them and ReadBatch; datagrams that do not fit are dropped
	// and counted in Stats.DroppedRecvBuffer.
	ConnRecvBuffer = 4 << 20
	// connBatchSize is what BatchSize reports.
	connBatchSize = 64
)

// ListenConn attaches a [netio.Conn] at addr, with links configured as for
// Attach (and panics as Attach does). The Conn's datagrams move only while
// [Network.Serve] runs; ListenConn, the Conn and Serve must all be used
// inside one testing/synctest bubble (see Serve). ListenConn may be called
// before or while Serve runs. Close detaches addr.
func (n *Network) ListenConn(addr netip.AddrPort, up, down LinkConfig) netio.Conn {
	c := &simConn{
		n:       n,
		addr:    addr,
		ready:   make(chan struct{}, 1),
		drained: make(chan struct{}, 1),
		closed:  make(chan struct{}),
		// Of each class, no more than the queues can hold at once; any
		// datagram of up to 2 KiB takes the same class.
		bufs: netio.Pool{Min: 2048, Keep: 1024, KeepBytes: ConnRecvBuffer + ConnSendBuffer},
	}
	n.Locked(func() { n.Attach(addr, c, up, down) })
	return c
}

// simConn is a Node that buffers between the network, driven by Serve,
// and the goroutines calling its netio.Conn methods. Lock order: n.mu, then
// c.mu; the Conn methods never hold c.mu while taking n.mu.
type simConn struct {
	n       *Network
	addr    netip.AddrPort
	ready   chan struct{} // signalled when inbox becomes non-empty
	drained chan struct{} // signalled when Poll empties the outbox
	closed  chan struct{} // closed by Close

	mu        sync.Mutex
	isClosed  bool
	inbox     []netio.Datagram // received, not yet read; owns its buffers
	inHead    int
	inBytes   int
	outbox    []netio.Datagram // written, not yet polled; owns its buffers
	outBytes  int
	lent      []netio.Datagram // returned by the last Poll; recycled by the next
	viewed    [][]byte         // handed out by the last ReadBatchView; recycled by the next read
	bufs      netio.Pool       // the inbox's and outbox's buffers
	closeOnce sync.Once
	timers    atomic.Uint64 // the timers AfterFunc made
	// Signals owed to the reader (ready) and writer (drained), and
	// whether the network holds c in its list to send them.
	sigReady, sigDrained, sigQueued bool
}

// AfterFunc implements netio.TimerConn: with Quiesce, f runs when Serve
// has seen every goroutine woken at its instant blocked, so that a
// loop.Driver's timer pump at an instant comes after what the
// application did at that instant, whichever goroutine the scheduler ran
// first; the timers due at one instant run one after another, in address
// order and a Conn's in the order they were made, each once what the
// previous one set off is done.
func (c *simConn) AfterFunc(f func()) netio.Timer {
	seq := c.timers.Add(1)
	t := time.AfterFunc(time.Hour, func() { c.n.timerDue(c.addr, seq, f) })
	t.Stop()
	return heapTimer{t}
}

// heapTimer is a timer of a bubble whose Reset to fire at once leaves it
// to the bubble's clock, which runs it before Serve's synctest.Wait
// returns, as it runs every timer due: a bubbled timer that has fired (it
// is out of the clock's heap) and is Reset to fire at once instead runs
// its func there and then, starting a goroutine from the system stack,
// which the race detector of Go 1.26 crashes on (SIGSEGV) now and then.
// Armed ahead and stopped first, the timer is in the heap, and fires as
// one reset from there does.
type heapTimer struct{ t *time.Timer }

func (h heapTimer) Reset(d time.Duration) bool {
	if d > 0 {
		return h.t.Reset(d)
	}
	active := h.t.Reset(time.Hour)
	h.t.Stop()
	h.t.Reset(d)
	return active
}

func (h heapTimer) Stop() bool { return h.t.Stop() }

// Receive implements Node. It runs on the goroutine driving the network,
// which holds n.mu.
func (c *simConn) Receive(_ time.Time, d netio.Datagram) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isClosed || c.inBytes+len(d.Buf) > ConnRecvBuffer {
		c.n.stats.DroppedRecvBuffer++
		return
	}
	b := c.bufs.Get(len(d.Buf))
	copy(b, d.Buf)
	// The arrival time on the clock of the goroutines using the conn
	// (Serve's mapping of virtual time); unknown when not serving.
	var rx int64
	if n := c.n; n.serving && d.RxTime != 0 {
		rx = n.clockStart.UnixNano() + (d.RxTime - epoch.UnixNano() - n.virtStart)
	}
	c.inbox = append(c.inbox, netio.Datagram{Addr: d.Addr, Buf: b, RxTime: rx})
	c.inBytes += len(b)
	c.sigReady = true
	c.deferSignalLocked()
}

// deferSignalLocked signals c's reader (sigReady) or writer
// (sigDrained): under Serve with Quiesce, once every event due has run, so
// that a reader sees every datagram of an instant together. The caller
// holds n.mu, when Serve runs, and c.mu.
func (c *simConn) deferSignalLocked() {
	if !c.n.quiesce {
		c.signalLocked()
		return
	}
	if !c.sigQueued {
		c.sigQueued = true
		c.n.signals = append(c.n.signals, c)
	}
}

// signal wakes c's reader and writer if deferSignalLocked asked to.
// The caller holds n.mu.
func (c *simConn) signal() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sigQueued = false
	c.signalLocked()
}

func (c *simConn) signalLocked() {
	if c.sigReady {
		c.sigReady = false
		select {
		case c.ready <- struct{}{}:
		default:
		}
	}
	if c.sigDrained {
		c.sigDrained = false
		select {
		case c.drained <- struct{}{}:
		default:
		}
	}
}

// Poll implements Node: it hands the outbox to the network. The buffers
// stay lent until the next Poll, by which time the network has copied them.
func (c *simConn) Poll(_ time.Time, out []netio.Datagram) ([]netio.Datagram, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.lent {
		c.bufs.Put(c.lent[i].Buf)
	}
	clear(c.lent)
	out = append(out, c.outbox...)
	c.lent, c.outbox = c.outbox, c.lent[:0]
	c.outBytes = 0
	c.sigDrained = true
	c.deferSignalLocked()
	return out, time.Time{}
}

// ReadBatch implements netio.Conn. A datagram longer than the capacity of
// the Buf it is read into is truncated, as by a UDP socket.
func (c *simConn) ReadBatch(ds []netio.Datagram) (int, error) { return c.read(ds, false) }

// ReadBatchView implements netio.ViewReader: every datagram is handed out
// in the conn's own buffer, valid until the next read; ds[i].Buf is not
// used (netio.ViewOnlyReader). The same datagrams in the same batches as
// ReadBatch.
func (c *simConn) ReadBatchView(ds []netio.Datagram) (int, error) { return c.read(ds, true) }

// ViewsOnly implements netio.ViewOnlyReader.
func (c *simConn) ViewsOnly() {}

func (c *simConn) read(ds []netio.Datagram, view bool) (int, error) {
	for {
		c.mu.Lock()
		if c.isClosed {
			c.mu.Unlock()
			return 0, netio.ErrClosed
		}
		for i, b := range c.viewed {
			c.bufs.Put(b)
			c.viewed[i] = nil
		}
		c.viewed = c.viewed[:0]
		k := 0
		for k < len(ds) && c.inHead < len(c.inbox) {
			src := &c.inbox[c.inHead]
			ds[k].Addr, ds[k].RxTime = src.Addr, src.RxTime
			if view {
				ds[k].Buf = src.Buf[:len(src.Buf):len(src.Buf)]
				c.viewed = append(c.viewed, src.Buf)
			} else {
				ds[k].Buf = ds[k].Buf[:copy(ds[k].Buf[:cap(ds[k].Buf)], src.Buf)]
				c.bufs.Put(src.Buf)
			}
			c.inBytes -= len(src.Buf)
			*src = netio.Datagram{}
			c.inHead++
			k++
		}
		if c.inHead == len(c.inbox) {
			c.inbox, c.inHead = c.inbox[:0], 0
		}
		c.mu.Unlock()
		if k > 0 {
			return k, nil
		}
		select {
		case <-c.ready:
		case <-c.closed:
		}
	}
}

// WriteBatch implements netio.Conn. It copies the datagrams into the send
// buffer, blocking while it is full, and wakes the node.
func (c *simConn) WriteBatch(ds []netio.Datagram) error {
	for len(ds) > 0 {
		c.mu.Lock()
		if c.isClosed {
			c.mu.Unlock()
			return netio.ErrClosed
		}
		for len(ds) > 0 && (c.outBytes == 0 || c.outBytes+ds[0].Len() <= ConnSendBuffer) {
			b := c.bufs.Get(ds[0].Len())
			copy(b[copy(b, ds[0].Buf):], ds[0].Tail)
			c.outbox = append(c.outbox, netio.Datagram{Addr: ds[0].Addr, Buf: b, Control: ds[0].Control})
			c.outBytes += len(b)
			ds = ds[1:]
		}
		c.mu.Unlock()
		c.n.Locked(func() { c.n.Wake(c.addr) })
		if len(ds) > 0 {
			select {
			case <-c.drained:
			case <-c.closed:
			}
		}
	}
	return nil
}

// LocalAddr implements netio.Conn.
func (c *simConn) LocalAddr() netip.AddrPort { return c.addr }

// BatchSize implements netio.Conn.
func (c *simConn) BatchSize() int { return connBatchSize }

// Close implements netio.Conn: it unblocks ReadBatch and WriteBatch and
// detaches the address. Datagrams still buffered are discarded. Calls
// after the first return netio.ErrClosed.
func (c *simConn) Close() error {
	err := netio.ErrClosed
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.isClosed = true
		c.inbox, c.inHead, c.inBytes = nil, 0, 0
		c.outbox, c.outBytes = nil, 0
		c.mu.Unlock()
		close(c.closed)
		c.n.Locked(func() { c.n.Detach(c.addr) })
		err = nil
	})
	return err
}
