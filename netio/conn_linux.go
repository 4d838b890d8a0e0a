//go:build linux

package netio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// batchConn is what ipv4.PacketConn and ipv6.PacketConn have in common:
// recvmmsg/sendmmsg on the socket (ipv4.Message and ipv6.Message are the
// same type).
type batchConn interface {
	ReadBatch(ms []ipv4.Message, flags int) (int, error)
	WriteBatch(ms []ipv4.Message, flags int) (int, error)
}

// fixedReader is a batchConn that can skip rebuilding its receive headers
// for a caller whose messages never change (rawBatch.ReadBatchFixed).
type fixedReader interface {
	ReadBatchFixed(ms []ipv4.Message, flags int) (int, error)
}

// UDPConn is a Conn over a kernel UDP socket. On Linux it moves whole
// batches per system call with recvmmsg/sendmmsg, coalesces runs of
// same-destination datagrams with UDP GSO on send and splits UDP GRO
// buffers on receive when the kernel supports them. It is safe for one
// concurrent reader and one concurrent writer; Stats, LocalAddr, BatchSize
// and Close may be called from any goroutine.
type UDPConn struct {
	pc       *net.UDPConn
	bc       batchConn
	ipv4Only bool // AF_INET socket: IPv6 destinations are unreachable
	local    netip.AddrPort
	batch    int
	log      *slog.Logger
	closed   atomic.Bool
	gro      bool        // fixed at ListenUDP
	gso      atomic.Bool // cleared by the writer if the kernel rejects GSO
	// tos is the TOS byte of Control datagrams, or -1 when they go
	// unmarked (configured so, or the kernel rejected the cmsg).
	tos   int
	stats *udpCounters // shared with the conn's DirectReaders

	// Reader-owned state.
	rmsgs []ipv4.Message
	riov  [][]byte         // riov[i] backs rmsgs[i].Buffers
	rbufs [][]byte         // GRO only: internal receive buffers, groBufSize each
	rseg  []int            // GRO only: segment size of rmsgs[i], 0 if single
	rrx   []int64          // GRO only: kernel receive time of rmsgs[i] (Unix ns), 0 if unknown
	raddr []netip.AddrPort // GRO only: sender of rmsgs[i]
	// GRO only: rmsgs[ri:rn] still hold datagrams not yet delivered; the
	// next one of rmsgs[ri] starts at byte roff.
	rn, ri, roff int

	// Writer-owned state.
	wmsgs []ipv4.Message
	wiov  [][]byte      // iovecs for all wmsgs, sliced per message
	woob  []byte        // wOOBSpace bytes per message
	waddr []net.UDPAddr // wmsgs[i].Addr points at waddr[i]
	wip   [][16]byte    // waddr[i].IP points into wip[i]
	wspan []sendSpan
	// gsoMaxSeg is the largest datagram, in bytes, that WriteBatch
	// coalesces; lowered when a path's MTU rejects a segment size.
	gsoMaxSeg  int
	unroutable unroutableLog
	// sendmsgs performs one sendmmsg; tests substitute it to inject
	// errors and partial writes.
	sendmsgs func(ms []ipv4.Message) (int, error)
}

// sendSpan records which datagrams one send message carries.
type sendSpan struct {
	first, n int  // index into the WriteBatch argument, datagram count
	seg      int  // segment size in bytes (the first datagram's length)
	bytes    int  // payload bytes in total
	tos      bool // carries the Control TOS cmsg
}

// ListenUDP opens a UDP socket bound to addr ("127.0.0.1:0", "[::1]:0",
// ":9000"; a wildcard host gives a dual-stack socket) and configures it as
// cfg says. It fails with an error wrapping ErrInvalidConfig if cfg does
// not validate.
func ListenUDP(addr string, cfg UDPConfig) (*UDPConn, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	pc, err := listenUDP(addr, cfg.ReusePort)
	if err != nil {
		return nil, err
	}
	c := &UDPConn{
		pc:    pc,
		local: localAddrPort(pc.LocalAddr().(*net.UDPAddr).AddrPort()),
		batch: cfg.BatchSize,
		log:   cfg.Logger,
		stats: new(udpCounters),
	}
	rc, err := pc.SyscallConn()
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("netio: listen %s: %w", addr, err)
	}
	var (
		domain  int
		soErr   error
		gso, gr bool
	)
	if err := rc.Control(func(fd uintptr) {
		domain, soErr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DOMAIN)
		gso, gr = c.socketOpts(int(fd), cfg)
	}); err != nil {
		pc.Close()
		return nil, fmt.Errorf("netio: listen %s: %w", addr, err)
	}
	if soErr != nil {
		pc.Close()
		return nil, fmt.Errorf("netio: listen %s: SO_DOMAIN: %w", addr, soErr)
	}
	c.ipv4Only = domain == unix.AF_INET
	rb, err := newRawBatch(pc, !c.ipv4Only)
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("netio: listen %s: %w", addr, err)
	}
	rb.rcall.spin, rb.rcall.polls = cfg.BusyPoll, c.stats
	c.bc = rb
	c.gro = gr
	c.gso.Store(gso)
	c.gsoMaxSeg = MaxDatagram
	c.tos = max(cfg.ControlTOS, -1)
	c.initBuffers()
	c.sendmsgs = c.sendmmsg
	c.log.Debug("netio: UDP socket open", "local", c.local, "batch", c.batch, "gso", gso, "gro", gr, "busy_poll", cfg.BusyPoll)
	return c, nil
}

func listenUDP(addr string, reusePort bool) (*net.UDPConn, error) {
	var lc net.ListenConfig
	if reusePort {
		lc.Control = func(_, _ string, rc syscall.RawConn) error {
			var soErr error
			if err := rc.Control(func(fd uintptr) {
				soErr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
			}); err != nil {
				return err
			}
			if soErr != nil {
				return fmt.Errorf("SO_REUSEPORT: %w", soErr)
			}
			return nil
		}
	}
	pc, err := lc.ListenPacket(context.Background(), "udp", addr)
	if err != nil {
		return nil, fmt.Errorf("netio: %w", err)
	}
	return pc.(*net.UDPConn), nil
}

// initBuffers preallocates every per-call structure so that ReadBatch and
// WriteBatch allocate nothing themselves.
func (c *UDPConn) initBuffers() {
	n := c.batch
	c.rmsgs = make([]ipv4.Message, n)
	c.riov = make([][]byte, n)
	for i := range c.rmsgs {
		c.rmsgs[i].Buffers = c.riov[i : i+1 : i+1]
	}
	if c.gro {
		c.rbufs = make([][]byte, n)
		backing := make([]byte, n*groBufSize)
		oob := make([]byte, n*groOOBSpace)
		for i := range c.rbufs {
			c.rbufs[i] = backing[i*groBufSize : (i+1)*groBufSize : (i+1)*groBufSize]
			c.riov[i] = c.rbufs[i]
			c.rmsgs[i].OOB = oob[i*groOOBSpace : (i+1)*groOOBSpace : (i+1)*groOOBSpace]
		}
		c.rseg = make([]int, n)
		c.rrx = make([]int64, n)
		c.raddr = make([]netip.AddrPort, n)
	}

	c.wmsgs = make([]ipv4.Message, n)
	// Room for a full GSO message even when BatchSize is small.
	// Two iovecs per datagram: Buf and Tail.
	c.wiov = make([][]byte, 2*max(n, maxGSOSegments))
	c.woob = make([]byte, n*wOOBSpace)
	c.waddr = make([]net.UDPAddr, n)
	c.wip = make([][16]byte, n)
	c.wspan = make([]sendSpan, n)
	for i := range c.wmsgs {
		c.wmsgs[i].Addr = &c.waddr[i]
	}
}

// LocalAddr returns the bound address; an IPv4-mapped address is reported
// as IPv4.
func (c *UDPConn) LocalAddr() netip.AddrPort { return c.local }

// BatchSize returns UDPConfig.BatchSize after defaults: the preferred
// number of Datagram slots per ReadBatch and WriteBatch call.
func (c *UDPConn) BatchSize() int { return c.batch }

// Stats returns a snapshot of the connection's counters.
func (c *UDPConn) Stats() UDPStats {
	s := c.stats.snapshot()
	s.GSOEnabled = c.gso.Load()
	s.GROEnabled = c.gro
	return s
}

// Close closes the socket and unblocks a pending ReadBatch, which then
// returns ErrClosed, as do all later ReadBatch and WriteBatch calls. Close
// is idempotent: later calls return nil.
func (c *UDPConn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	return c.pc.Close()
}

// ioErr maps an error from the socket: ErrClosed after Close, otherwise
// err annotated with the operation.
func (c *UDPConn) ioErr(op string, err error) error {
	if c.closed.Load() || errors.Is(err, net.ErrClosed) {
		return ErrClosed
	}
	return fmt.Errorf("netio: %s on %v: %w", op, c.local, err)
}

// ReadBatch blocks until at least one datagram has arrived, then fills
// ds[0:n] with up to len(ds) datagrams, each Buf resliced to the payload
// and Addr set to the sender (IPv4 senders on a dual-stack socket are
// reported as IPv4). Every ds[i].Buf must have capacity of at least
// MaxDatagram, or ReadBatch returns an error wrapping ErrShortBuffer.
// With GRO one kernel buffer may hold more datagrams than ds has room
// for; the rest are returned by the next calls, before the socket is read
// again. Datagrams that arrived truncated are dropped and counted in
// UDPStats.ReceiveDrops. It returns ErrClosed after Close.
func (c *UDPConn) ReadBatch(ds []Datagram) (int, error) {
	return c.readBatch(ds, false)
}

// ReadBatchView is ReadBatch (netio.ViewReader): with GRO, the datagrams
// a coalesced kernel buffer holds are handed out as slices of it, not
// copied into ds's buffers; they are valid until the next ReadBatch or
// ReadBatchView.
func (c *UDPConn) ReadBatchView(ds []Datagram) (int, error) {
	return c.readBatch(ds, true)
}

func (c *UDPConn) readBatch(ds []Datagram, view bool) (int, error) {
	if c.closed.Load() {
		return 0, ErrClosed
	}
	if len(ds) == 0 {
		return 0, nil
	}
	if err := checkReadBufs(ds); err != nil {
		return 0, err
	}
	for {
		var (
			n   int
			err error
		)
		if c.gro {
			n, err = c.readGRO(ds, view)
		} else {
			n, err = c.readDirect(ds)
		}
		if err != nil || n > 0 {
			return n, err
		}
		// Everything received was truncated and dropped: read again.
	}
}

// readDirect receives straight into the caller's buffers (no GRO, so
// every kernel message is one datagram).
func (c *UDPConn) readDirect(ds []Datagram) (int, error) {
	ms := c.rmsgs[:min(len(ds), len(c.rmsgs))]
	for i := range ms {
		c.riov[i] = ds[i].Buf[:cap(ds[i].Buf)]
	}
	n, err := c.bc.ReadBatch(ms, 0)
	if err != nil {
		return 0, c.ioErr("recvmmsg", err)
	}
	k, bytes, drops := 0, 0, 0
	for i := range n {
		m := &ms[i]
		if m.Flags&unix.MSG_TRUNC != 0 || m.N > cap(ds[k].Buf) {
			// Truncated, or (after an earlier drop) too large for the
			// smaller slot it would move down to.
			drops++
			continue
		}
		addr := msgAddr(m)
		if k == i {
			ds[k].Buf = ds[k].Buf[:m.N]
		} else {
			// An earlier message was dropped: move this one down a slot,
			// keeping each slot's buffer its own.
			ds[k].Buf = append(ds[k].Buf[:0], c.riov[i][:m.N]...)
		}
		ds[k].Addr = addr
		ds[k].RxTime = 0
		bytes += m.N
		k++
	}
	c.stats.datagramsReceived.Add(uint64(k))
	c.stats.bytesReceived.Add(uint64(bytes))
	if drops > 0 {
		c.stats.receiveDrops.Add(uint64(drops))
	}
	return k, nil
}

// readGRO delivers datagrams held from the previous receive, or receives
// into the internal buffers and splits coalesced ones into ds.
func (c *UDPConn) readGRO(ds []Datagram, view bool) (int, error) {
	if c.ri >= c.rn {
		ms := c.rmsgs[:min(len(ds), len(c.rmsgs))]
		var (
			n   int
			err error
		)
		if fr, ok := c.bc.(fixedReader); ok {
			n, err = fr.ReadBatchFixed(ms, 0) // rmsgs keep their GRO buffers
		} else {
			n, err = c.bc.ReadBatch(ms, 0)
		}
		if err != nil {
			return 0, c.ioErr("recvmmsg", err)
		}
		coalesced, drops := 0, 0
		for i := range n {
			m := &ms[i]
			seg, rx := parseRecvCmsgs(m.OOB[:m.NN])
			c.rrx[i] = rx
			if m.Flags&unix.MSG_TRUNC != 0 {
				// Payload beyond groBufSize is lost; drop the message.
				m.N = 0
				seg = -1
				drops++
			} else if seg > 0 && seg < m.N {
				coalesced++
			}
			c.rseg[i] = seg
			c.raddr[i] = msgAddr(m)
		}
		c.rn, c.ri, c.roff = n, 0, 0
		if coalesced > 0 {
			c.stats.groReceives.Add(uint64(coalesced))
		}
		if drops > 0 {
			c.stats.receiveDrops.Add(uint64(drops))
		}
	}

	k, bytes, drops := 0, 0, 0
	for k < len(ds) && c.ri < c.rn {
		seg := c.rseg[c.ri]
		if seg < 0 { // dropped as truncated
			c.ri++
			continue
		}
		data := c.rbufs[c.ri][:c.rmsgs[c.ri].N]
		end := len(data)
		if seg > 0 {
			end = min(c.roff+seg, len(data))
		}
		p := data[c.roff:end]
		if len(p) > cap(ds[k].Buf) {
			// Larger than the caller may hold (an IPv6 datagram above
			// MaxDatagram): as if truncated.
			drops++
		} else {
			if view {
				ds[k].Buf = p[:len(p):len(p)]
			} else {
				ds[k].Buf = append(ds[k].Buf[:0], p...)
			}
			ds[k].Addr = c.raddr[c.ri]
			ds[k].RxTime = c.rrx[c.ri]
			bytes += len(p)
			k++
		}
		c.roff = end
		if c.roff >= len(data) {
			c.ri++
			c.roff = 0
		}
	}
	c.stats.datagramsReceived.Add(uint64(k))
	c.stats.bytesReceived.Add(uint64(bytes))
	if drops > 0 {
		c.stats.receiveDrops.Add(uint64(drops))
	}
	return k, nil
}

// msgAddr returns the sender of a received message, IPv4-mapped
// addresses unmapped.
func msgAddr(m *ipv4.Message) netip.AddrPort {
	ua, ok := m.Addr.(*net.UDPAddr)
	if !ok {
		return netip.AddrPort{}
	}
	ap := ua.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// WriteBatch sends every datagram in ds, in order, BatchSize messages per
// sendmmsg. With GSO on, each run of consecutive datagrams to the same
// destination whose sizes are equal (the last may be shorter) travels as
// one UDP_SEGMENT message of at most 64 datagrams and MaxDatagram bytes.
// A datagram the kernel refuses on its own account (see
// UDPStats.SendDrops) is dropped and counted, not reported. It returns an
// error wrapping ErrUnsupportedAddr, before sending anything, if a
// destination is invalid or unreachable by the socket's address family;
// ErrClosed after Close; otherwise an error only if the socket failed.
func (c *UDPConn) WriteBatch(ds []Datagram) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if err := checkDests(ds, c.ipv4Only); err != nil {
		return err
	}
	for len(ds) > 0 {
		nmsg := c.pack(ds)
		done, err := c.sendPacked(nmsg)
		if err != nil {
			return err
		}
		ds = ds[done:]
	}
	return nil
}

// pack fills wmsgs with the first datagrams of ds, coalescing for GSO when
// enabled, and returns the number of messages. It packs at most BatchSize
// messages carrying at most max(BatchSize, 64) datagrams.
func (c *UDPConn) pack(ds []Datagram) (nmsg int) {
	gso := c.gso.Load()
	j, iov := 0, 0
	for j < len(ds) && nmsg < len(c.wmsgs) && iov+2 <= len(c.wiov) {
		d := &ds[j]
		seg := d.Len()
		k, total, niov := 1, seg, iovs(d)
		if gso && seg > 0 && seg <= c.gsoMaxSeg {
			for j+k < len(ds) && k < maxGSOSegments {
				next := &ds[j+k]
				l := next.Len()
				if l == 0 || l > seg || total+l > maxGSOBytes || next.Addr != d.Addr || next.Control != d.Control || iov+niov+iovs(next) > len(c.wiov) {
					break
				}
				k++
				total += l
				niov += iovs(next)
				if l < seg {
					break // a shorter datagram ends the run
				}
			}
		}
		n := iov
		for i := range k {
			dd := &ds[j+i]
			c.wiov[n] = dd.Buf
			n++
			if len(dd.Tail) > 0 {
				c.wiov[n] = dd.Tail
				n++
			}
		}
		m := &c.wmsgs[nmsg]
		m.Buffers = c.wiov[iov:n:n]
		oob, no := c.woob[nmsg*wOOBSpace:(nmsg+1)*wOOBSpace], 0
		if k > 1 {
			no += len(putGSOSize(oob, seg))
		}
		tos := d.Control && c.tos >= 0
		if tos {
			no += len(putTOS(oob[no:], c.tos, is6(d.Addr)))
		}
		m.OOB = nil
		if no > 0 {
			m.OOB = oob[:no]
		}
		c.setDest(nmsg, d.Addr)
		c.wspan[nmsg] = sendSpan{first: j, n: k, seg: seg, bytes: total, tos: tos}
		nmsg++
		j += k
		iov = n
	}
	return nmsg
}

// iovs is the number of iovecs datagram d takes.
func iovs(d *Datagram) int {
	if len(d.Tail) > 0 {
		return 2
	}
	return 1
}

// setDest points wmsgs[i].Addr (which is &waddr[i]) at a.
func (c *UDPConn) setDest(i int, a netip.AddrPort) {
	ua := &c.waddr[i]
	ip := a.Addr()
	if ip.Is4() || ip.Is4In6() {
		v4 := ip.Unmap().As4()
		ua.IP = append(c.wip[i][:0], v4[:]...)
	} else {
		v6 := ip.As16()
		ua.IP = append(c.wip[i][:0], v6[:]...)
	}
	ua.Port = int(a.Port())
	ua.Zone = ip.Zone()
}

// sendPacked sends wmsgs[:nmsg], looping over partial sendmmsg results,
// and returns how many datagrams of the packed prefix are done (sent or
// dropped). It returns fewer than were packed when a GSO send failed:
// the caller repacks the rest with GSO off (EIO, EINVAL) or with a segment
// size cap below the failed one (EMSGSIZE: the path MTU cannot carry
// that segment size), or, when the kernel refused a TOS control message
// (EINVAL, where the same message without it went through), with Control
// datagrams unmarked.
func (c *UDPConn) sendPacked(nmsg int) (int, error) {
	start := 0
	for start < nmsg {
		n, err := c.sendmsgs(c.wmsgs[start:nmsg])
		n = max(n, 0) // the raw system call reports -1 with an error
		c.accountSent(start, start+n)
		start += n
		if err == nil {
			if n == 0 {
				return 0, c.ioErr("sendmmsg", io.ErrNoProgress)
			}
			continue
		}
		if start >= nmsg || c.closed.Load() || errors.Is(err, net.ErrClosed) {
			return 0, c.ioErr("sendmmsg", err)
		}
		sp := c.wspan[start]
		errno := sendErrno(err)
		if sp.tos && errno == unix.EINVAL {
			// The TOS control message or the route (a loopback source,
			// another host): the same message without the TOS tells.
			m := &c.wmsgs[start]
			if m.OOB = m.OOB[:len(m.OOB)-tosOOBSpace]; len(m.OOB) == 0 {
				m.OOB = nil
			}
			c.wspan[start].tos, sp.tos = false, false
			n, err = c.sendmsgs(c.wmsgs[start : start+1])
			if err == nil && n == 1 {
				c.tos = -1
				c.log.Warn("netio: kernel refuses a TOS control message, sending Control datagrams unmarked", "local", c.local)
				c.accountSent(start, start+1)
				return sp.first + sp.n, nil // repack the rest unmarked
			}
			if err == nil {
				return 0, c.ioErr("sendmmsg", io.ErrNoProgress)
			}
			if c.closed.Load() || errors.Is(err, net.ErrClosed) {
				return 0, c.ioErr("sendmmsg", err)
			}
			errno = sendErrno(err)
		}
		if sp.n > 1 {
			switch {
			case isGSODisableErrno(errno):
				c.gso.Store(false)
				c.log.Warn("netio: UDP GSO send failed, disabling GSO", "local", c.local, "err", err)
				return sp.first, nil
			case errno == unix.EMSGSIZE:
				c.gsoMaxSeg = sp.seg - 1
				c.log.Debug("netio: GSO segment size exceeds path MTU, lowering cap",
					"local", c.local, "segment", sp.seg, "cap", c.gsoMaxSeg)
				return sp.first, nil
			}
		}
		switch {
		case errno == unix.EINVAL:
			// The kernel will not route from the socket's address to
			// this destination (a loopback source, another host): the
			// datagram is undeliverable, the rest of the batch is not.
			c.stats.sendDrops.Add(uint64(sp.n))
			c.unroutable.drop(c.log, c.local, c.waddr[start].AddrPort(), sp.n, err)
		case isDropErrno(errno):
			c.stats.sendDrops.Add(uint64(sp.n))
			c.log.Debug("netio: datagram dropped on send", "local", c.local,
				"dest", c.wmsgs[start].Addr, "datagrams", sp.n, "err", err)
		default:
			return 0, c.ioErr("sendmmsg", err)
		}
		start++
	}
	last := c.wspan[nmsg-1]
	return last.first + last.n, nil
}

// accountSent adds the datagrams of wmsgs[from:to] to the counters.
func (c *UDPConn) accountSent(from, to int) {
	if from >= to {
		return
	}
	var dgrams, bytes, gso int
	for _, sp := range c.wspan[from:to] {
		dgrams += sp.n
		bytes += sp.bytes
		if sp.n > 1 {
			gso++
		}
	}
	c.stats.datagramsSent.Add(uint64(dgrams))
	c.stats.bytesSent.Add(uint64(bytes))
	if gso > 0 {
		c.stats.gsoSends.Add(uint64(gso))
	}
}

// sendmmsg is the default sendmsgs.
func (c *UDPConn) sendmmsg(ms []ipv4.Message) (int, error) {
	return c.bc.WriteBatch(ms, 0)
}
