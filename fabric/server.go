package fabric

import (
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire/ctrl"
)

// Server drives a Switch over netio.Conns: a goroutine per socket reads
// datagram batches, a timer serves deadlines, and a mutex makes whoever
// holds it the Switch's owner. The datagrams a Poll gives are written
// after that mutex is released, under a second one held until the next
// Poll may reuse their buffers, so that with several sockets (and cores)
// one goroutine steps the packets it read while another writes.
type Server struct {
	conn  netio.Conn   // datagrams go out through it
	conns []netio.Conn // the sockets read from: conn, then ServerOptions.Conns
	log   *slog.Logger

	mu      sync.Mutex // owns sw, events, timer, timerAt, sec, wireOut
	sw      *Switch
	events  []Event
	timer   *time.Timer
	timerAt time.Time
	closed  atomic.Bool

	// wmu is held from a Poll until its datagrams are written (they
	// point into buffers of the switch that its next Poll reuses); its
	// holder owns out. Lock order: mu, then wmu.
	wmu     sync.Mutex
	out     []netio.Datagram
	grouper grouper

	// sec, when not nil, seals every datagram written and opens every
	// datagram read (ServerOptions.Security); wireOut holds its output.
	sec     *secure.Layer
	wireOut []netio.Datagram

	readers sync.WaitGroup
}

// ServerOptions configure NewServerWith.
type ServerOptions struct {
	// Logger receives the switch's events and socket errors; nil
	// discards.
	Logger *slog.Logger
	// Security, when set, protects every datagram with a secure.Layer
	// of this identity (of role secure.RoleSwitch): the switch talks
	// only to processes that prove an identity of the same fabric, in
	// sessions sealed with SecurityOptions, and drops (and counts)
	// everything else.
	Security        *secure.Identity
	SecurityOptions secure.Options
	// Conns are more sockets bound to the address of the switch's conn
	// (netio.UDPConfig.ReusePort), each read by a goroutine of its own;
	// the server owns them. Datagrams go out through conn.
	Conns []netio.Conn
}

// NewServer starts serving sw on conn without a security layer; the
// server owns both from now on. logger nil discards logs.
func NewServer(conn netio.Conn, sw *Switch, logger *slog.Logger) *Server {
	return newServer(conn, nil, sw, logger, nil)
}

// NewServerWith starts serving sw on conn as opts say; the server owns
// both from now on (also when it fails: conn and opts.Conns are closed
// then).
func NewServerWith(conn netio.Conn, sw *Switch, opts ServerOptions) (*Server, error) {
	var sec *secure.Layer
	if opts.Security != nil {
		if opts.Security.Cert.Role != secure.RoleSwitch {
			closeConns(conn, opts.Conns)
			return nil, fmt.Errorf("fabric: security: the switch's identity is of role %v", opts.Security.Cert.Role)
		}
		var err error
		if sec, err = secure.NewLayer(opts.Security, opts.SecurityOptions, rand.Reader); err != nil {
			closeConns(conn, opts.Conns)
			return nil, fmt.Errorf("fabric: security: %w", err)
		}
	}
	if sec != nil {
		sw.SetIdentities(sec.Peer)
		sw.SetVerified()
		sec.Log = opts.Logger
	}
	return newServer(conn, opts.Conns, sw, opts.Logger, sec), nil
}

func closeConns(conn netio.Conn, more []netio.Conn) {
	conn.Close()
	for _, c := range more {
		c.Close()
	}
}

func newServer(conn netio.Conn, more []netio.Conn, sw *Switch, logger *slog.Logger, sec *secure.Layer) *Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{conn: conn, conns: append([]netio.Conn{conn}, more...), log: logger, sw: sw, sec: sec}
	// The server writes a poll's datagrams before the next Poll, Tails
	// included (the results of an aggregation, not copied per member),
	// unless the security layer or fault injection rewrite them.
	sw.eng.SetGather(sec == nil && !sw.cfg.Fault.active())
	s.timer = time.AfterFunc(time.Hour, s.onTimer)
	s.timer.Stop()
	s.mu.Lock()
	s.pumpUnlock(time.Now())
	for _, c := range s.conns {
		s.readers.Go(func() { s.reader(c) })
	}
	return s
}

// Addr is the address the switch listens on.
func (s *Server) Addr() netip.AddrPort { return s.conn.LocalAddr() }

// Stats returns the switch's counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sw.Stats()
}

// SecurityStats returns the security layer's counters (zero without
// ServerOptions.Security).
func (s *Server) SecurityStats() secure.LayerStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sec == nil {
		return secure.LayerStats{}
	}
	return s.sec.Stats()
}

// PeerIdentity returns the certified identity of the process at addr,
// once a secure session with it is established (never without
// ServerOptions.Security).
func (s *Server) PeerIdentity(addr netip.AddrPort) (secure.Cert, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sec == nil {
		return secure.Cert{}, false
	}
	return s.sec.Peer(addr)
}

// Groups lists the switch's groups.
func (s *Server) Groups() []GroupInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sw.Groups()
}

// Pool returns the pool's memory nodes (with their counters) and regions.
func (s *Server) Pool() ([]ctrl.PoolNodeInfo, []ctrl.PoolSpec) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sw.PoolNodes(), s.sw.PoolRegions()
}

func (s *Server) reader(conn netio.Conn) {
	ds := make([]netio.Datagram, conn.BatchSize())
	bufs := make([][]byte, len(ds))
	for i := range bufs {
		bufs[i] = make([]byte, netio.MaxDatagram)
	}
	for {
		// The switch copies what it keeps of a packet: it can step
		// packets still in the socket's receive buffers.
		k, err := netio.ReadViews(conn, ds, bufs)
		if err != nil {
			if errors.Is(err, netio.ErrClosed) || s.closed.Load() {
				return
			}
			s.log.Warn("fabric: read", "err", err)
			continue
		}
		s.mu.Lock()
		now := time.Now()
		for i := 0; i < k; i++ {
			pkt := ds[i].Buf
			if s.sec != nil {
				pkt = s.sec.Receive(now, ds[i].Addr, pkt)
			}
			if pkt != nil {
				s.sw.StepAt(now, ds[i].RxTime, ds[i].Addr, pkt)
			}
		}
		s.pumpUnlock(now)
	}
}

func (s *Server) onTimer() {
	s.mu.Lock()
	s.timerAt = time.Time{}
	if s.closed.Load() {
		s.mu.Unlock()
		return
	}
	s.pumpUnlock(time.Now())
}

// pumpUnlock polls the switch, arms the timer and sends. The caller holds
// mu; pumpUnlock releases it, before the last write when datagrams go out
// unsealed, so that packets another reader got are stepped meanwhile.
func (s *Server) pumpUnlock(now time.Time) {
	for i := 0; ; i++ {
		s.wmu.Lock()
		out, next := s.sw.Poll(now, s.out[:0])
		s.grouper.group(out)
		if s.sec != nil {
			next = s.sealLocked(now, out, next)
		}
		last := next.IsZero() || next.After(now) || i == 63
		if last {
			s.logEventsLocked()
			s.armLocked(next)
			s.mu.Unlock()
		}
		if s.sec == nil && len(out) > 0 {
			s.write(out)
		}
		clear(out)
		s.out = out[:0]
		s.wmu.Unlock()
		if last {
			return
		}
		now = time.Now()
	}
}

// armLocked sets the timer to fire at next, unless it fires earlier.
// Caller holds mu.
func (s *Server) armLocked(next time.Time) {
	if next.IsZero() {
		return
	}
	if s.timerAt.IsZero() || next.Before(s.timerAt) {
		s.timerAt = next
		s.timer.Reset(max(time.Until(next), 0))
	}
}

// maxGroupAddrs bounds the destinations a grouper sorts by counting; a
// batch with more is sorted by comparison.
const maxGroupAddrs = 64

// grouper orders ds by destination, keeping the order of the datagrams to
// each one: the socket's segmentation offload sends a run of datagrams to
// one address in one go, and the switch's output interleaves destinations
// (a multicast packet's replicas, a reduced chunk's results to every
// member). Across destinations, order carries no meaning: they come out
// in the order of their first datagram (by address beyond maxGroupAddrs
// destinations). A counting sort over the few destinations of a batch,
// with scratch space kept between calls.
type grouper struct {
	addrs []netip.AddrPort // distinct destinations, in order of first appearance
	idx   []uint8          // idx[i]: ds[i]'s destination in addrs
	next  []int            // per destination, where its next datagram goes
	tmp   []netio.Datagram
}

func (g *grouper) group(ds []netio.Datagram) {
	if len(ds) < 3 {
		return
	}
	g.addrs = g.addrs[:0]
	g.idx = slices.Grow(g.idx[:0], len(ds))[:len(ds)]
	cur, runs := -1, 0
	for i := range ds {
		a := ds[i].Addr
		if cur < 0 || g.addrs[cur] != a {
			runs++
			if cur = slices.Index(g.addrs, a); cur < 0 {
				if len(g.addrs) == maxGroupAddrs {
					slices.SortStableFunc(ds, func(a, b netio.Datagram) int { return a.Addr.Compare(b.Addr) })
					return
				}
				g.addrs = append(g.addrs, a)
				cur = len(g.addrs) - 1
			}
		}
		g.idx[i] = uint8(cur)
	}
	if runs == len(g.addrs) {
		return // already grouped
	}
	g.next = slices.Grow(g.next[:0], len(g.addrs))[:len(g.addrs)]
	clear(g.next)
	for _, k := range g.idx {
		g.next[k]++
	}
	at := 0
	for k, n := range g.next {
		g.next[k] = at
		at += n
	}
	g.tmp = append(g.tmp[:0], ds...)
	for i, k := range g.idx {
		ds[g.next[k]] = g.tmp[i]
		g.next[k]++
	}
	clear(g.tmp) // no references kept to the switch's buffers
}

// write writes ds to the socket. Caller holds wmu.
func (s *Server) write(ds []netio.Datagram) {
	if err := s.conn.WriteBatch(ds); err != nil && !s.closed.Load() {
		s.log.Warn("fabric: write", "err", err)
	}
}

// sealLocked hands the switch's datagrams to the security layer, runs its
// timers when due, writes what it gives to send (sealed datagrams,
// handshake messages) and returns next moved to the layer's deadline.
// Caller holds mu and wmu.
func (s *Server) sealLocked(now time.Time, out []netio.Datagram, next time.Time) time.Time {
	var dl time.Time
	s.wireOut, dl = s.sec.Flush(now, out, s.wireOut, s.write)
	if !dl.IsZero() && (next.IsZero() || dl.Before(next)) {
		next = dl
	}
	return next
}

// logEventsLocked logs the switch's events at info level. Caller holds mu.
func (s *Server) logEventsLocked() {
	s.events = s.sw.Events(s.events[:0])
	for _, e := range s.events {
		switch e.Kind {
		case EventJobJoined:
			s.log.Info("switch: job joined", "job", e.Job, "group", e.Group, "size", e.Size)
		case EventMemberDead:
			if e.Left {
				s.log.Info("switch: member left", "job", e.Job, "group", e.Group, "rank", e.Member, "addr", e.Addr)
			} else {
				s.log.Info("switch: member dead (stopped heartbeating)", "job", e.Job, "group", e.Group, "rank", e.Member, "addr", e.Addr,
					"silent", e.Silent.Round(time.Millisecond))
			}
		case EventPoolNodeJoined:
			s.log.Info("switch: memory node joined the pool", "node", e.Node, "addr", e.Addr, "bytes", e.Capacity)
		case EventAuthRefused:
			s.log.Warn("switch: control request refused: it does not carry this switch's fabric token", "addr", e.Addr, "more_since_last", e.Count)
		case EventPoolNodeDied:
			if e.Left {
				s.log.Info("switch: memory node left the pool (it stopped)", "node", e.Node, "addr", e.Addr, "forgotten", e.Forgot)
			} else {
				s.log.Info("switch: memory node dead (stopped heartbeating)", "node", e.Node, "addr", e.Addr)
			}
		case EventPoolNodeBack:
			s.log.Info("switch: memory node back", "node", e.Node, "addr", e.Addr, "bytes", e.Capacity)
		case EventPoolNodeRestarted:
			s.log.Info("switch: memory node restarted; its copies are lost and rebuilt where another copy exists", "node", e.Node, "addr", e.Addr, "bytes", e.Capacity)
		case EventCopyRebuilt:
			s.log.Info("switch: lost copy rebuilt", "region", e.Region, "copy", e.Copy, "node", e.Node, "addr", e.Addr)
		case EventPoolNodeReported:
			s.log.Info("switch: memory node reported its regions", "node", e.Node, "addr", e.Addr)
		case EventCopyLost:
			s.log.Warn("switch: pool region copy lost (its memory node does not hold it)", "region", e.Region, "copy", e.Copy, "node", e.Node, "addr", e.Addr)
		case EventRegionLost:
			s.log.Warn("switch: pool region lost: every copy of some of its bytes is gone", "region", e.Region)
		case EventPoolRecovered:
			s.log.Info("switch: pool map rebuilt from the memory nodes", "regions", e.Count, "nodes", e.Node)
		}
	}
	clear(s.events)
}

// Close stops the server and closes its sockets. It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed.Swap(true) {
		s.mu.Unlock()
		return nil
	}
	s.timer.Stop()
	s.mu.Unlock()
	var errs []error
	for _, c := range s.conns {
		errs = append(errs, c.Close())
	}
	s.readers.Wait()
	return errors.Join(errs...)
}
