//go:build !linux

package netio

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"
)

// UDPConn is a Conn over a kernel UDP socket. This portable version moves
// one datagram per system call (ReadBatch returns one datagram per call);
// GSO and GRO are Linux-only and always reported off. It is safe for one
// concurrent reader and one concurrent writer; Stats, LocalAddr,
// BatchSize and Close may be called from any goroutine.
type UDPConn struct {
	pc       *net.UDPConn
	ipv4Only bool
	local    netip.AddrPort
	batch    int
	log      *slog.Logger
	closed   atomic.Bool
	stats    udpCounters

	unroutable unroutableLog // writer-owned
	joined     []byte        // writer-owned: a datagram with a Tail, in one piece
}

// ListenUDP opens a UDP socket bound to addr ("127.0.0.1:0", "[::1]:0",
// ":9000"; a wildcard host gives a dual-stack socket where the system
// supports it) and configures it as cfg says. It fails with an error
// wrapping ErrInvalidConfig if cfg does not validate.
func ListenUDP(addr string, cfg UDPConfig) (*UDPConn, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("netio: %w", err)
	}
	uc := pc.(*net.UDPConn)
	la := uc.LocalAddr().(*net.UDPAddr)
	c := &UDPConn{
		pc:       uc,
		ipv4Only: la.IP.To4() != nil && len(la.IP) == net.IPv4len,
		local:    localAddrPort(la.AddrPort()),
		batch:    cfg.BatchSize,
		log:      cfg.Logger,
	}
	if err := uc.SetReadBuffer(cfg.SocketBuffer); err != nil {
		c.log.Warn("netio: cannot set socket buffer", "option", "SO_RCVBUF", "bytes", cfg.SocketBuffer, "err", err)
	}
	if err := uc.SetWriteBuffer(cfg.SocketBuffer); err != nil {
		c.log.Warn("netio: cannot set socket buffer", "option", "SO_SNDBUF", "bytes", cfg.SocketBuffer, "err", err)
	}
	c.log.Debug("netio: UDP socket open", "local", c.local, "batch", c.batch, "gso", false, "gro", false)
	return c, nil
}

// LocalAddr returns the bound address; an IPv4-mapped address is reported
// as IPv4.
func (c *UDPConn) LocalAddr() netip.AddrPort { return c.local }

// BatchSize returns UDPConfig.BatchSize after defaults.
func (c *UDPConn) BatchSize() int { return c.batch }

// Stats returns a snapshot of the connection's counters.
func (c *UDPConn) Stats() UDPStats { return c.stats.snapshot() }

// Close closes the socket and unblocks a pending ReadBatch, which then
// returns ErrClosed, as do all later ReadBatch and WriteBatch calls. Close
// is idempotent: later calls return nil.
func (c *UDPConn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	return c.pc.Close()
}

func (c *UDPConn) ioErr(op string, err error) error {
	if c.closed.Load() || errors.Is(err, net.ErrClosed) {
		return ErrClosed
	}
	return fmt.Errorf("netio: %s on %v: %w", op, c.local, err)
}

// ReadBatch blocks until a datagram has arrived and stores it in ds[0],
// Buf resliced to the payload and Addr set to the sender; it returns 1.
// Every ds[i].Buf must have capacity of at least MaxDatagram, or ReadBatch
// returns an error wrapping ErrShortBuffer. It returns ErrClosed after
// Close.
func (c *UDPConn) ReadBatch(ds []Datagram) (int, error) {
	if c.closed.Load() {
		return 0, ErrClosed
	}
	if len(ds) == 0 {
		return 0, nil
	}
	if err := checkReadBufs(ds); err != nil {
		return 0, err
	}
	n, addr, err := c.pc.ReadFromUDPAddrPort(ds[0].Buf[:cap(ds[0].Buf)])
	if err != nil {
		return 0, c.ioErr("read", err)
	}
	ds[0].Buf = ds[0].Buf[:n]
	ds[0].Addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	c.stats.datagramsReceived.Add(1)
	c.stats.bytesReceived.Add(uint64(n))
	return 1, nil
}

// WriteBatch sends every datagram in ds, in order, one system call each.
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
	var sent, bytes, drops uint64
	defer func() {
		c.stats.datagramsSent.Add(sent)
		c.stats.bytesSent.Add(bytes)
		c.stats.sendDrops.Add(drops)
	}()
	for i := range ds {
		b := ds[i].Joined(c.joined)
		if len(ds[i].Tail) > 0 {
			c.joined = b
		}
		_, err := c.pc.WriteToUDPAddrPort(b, ds[i].Addr)
		switch {
		case err == nil:
			sent++
			bytes += uint64(len(b))
		case errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EADDRNOTAVAIL):
			// Not routable from the socket's address (a loopback
			// source, another host).
			drops++
			c.unroutable.drop(c.log, c.local, ds[i].Addr, 1, err)
		case isDropErr(err):
			drops++
			c.log.Debug("netio: datagram dropped on send", "local", c.local, "dest", ds[i].Addr, "err", err)
		default:
			return c.ioErr("write", err)
		}
	}
	return nil
}

// isDropErr reports whether a send error concerns only the datagram being
// sent, so that WriteBatch counts it as loss and carries on.
func isDropErr(err error) bool {
	for _, e := range []error{
		syscall.EMSGSIZE, syscall.ENOBUFS, syscall.ECONNREFUSED,
		syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.EHOSTDOWN,
		syscall.ENETDOWN, syscall.EADDRNOTAVAIL, syscall.EPERM, syscall.EACCES,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
