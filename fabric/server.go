package fabric

import (
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
)

// Server drives a Switch over a netio.Conn: one goroutine reads datagram
// batches, a timer serves deadlines, and a mutex makes whoever holds it
// the Switch's owner.
type Server struct {
	conn netio.Conn
	log  *slog.Logger

	mu      sync.Mutex
	sw      *Switch
	out     []netio.Datagram
	events  []Event
	timer   *time.Timer
	timerAt time.Time
	closed  bool

	// sec, when not nil, seals every datagram written and opens every
	// datagram read (ServerOptions.Security); wireOut holds its output.
	sec     *secure.Layer
	wireOut []netio.Datagram

	readerDone chan struct{}
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
}

// NewServer starts serving sw on conn without a security layer; the
// server owns both from now on. logger nil discards logs.
func NewServer(conn netio.Conn, sw *Switch, logger *slog.Logger) *Server {
	return newServer(conn, sw, logger, nil)
}

// NewServerWith starts serving sw on conn as opts say; the server owns
// both from now on (also when it fails: conn is closed then).
func NewServerWith(conn netio.Conn, sw *Switch, opts ServerOptions) (*Server, error) {
	var sec *secure.Layer
	if opts.Security != nil {
		if opts.Security.Cert.Role != secure.RoleSwitch {
			conn.Close()
			return nil, fmt.Errorf("fabric: security: the switch's identity is of role %v", opts.Security.Cert.Role)
		}
		var err error
		if sec, err = secure.NewLayer(opts.Security, opts.SecurityOptions, rand.Reader); err != nil {
			conn.Close()
			return nil, fmt.Errorf("fabric: security: %w", err)
		}
	}
	if sec != nil {
		sw.SetIdentities(sec.Peer)
		sw.SetVerified()
	}
	return newServer(conn, sw, opts.Logger, sec), nil
}

func newServer(conn netio.Conn, sw *Switch, logger *slog.Logger, sec *secure.Layer) *Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{conn: conn, log: logger, sw: sw, sec: sec, readerDone: make(chan struct{})}
	s.timer = time.AfterFunc(time.Hour, s.onTimer)
	s.timer.Stop()
	s.mu.Lock()
	s.pumpLocked(time.Now())
	s.mu.Unlock()
	go s.reader()
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
func (s *Server) Pool() ([]PoolNodeInfo, []PoolSpec) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sw.PoolNodes(), s.sw.PoolRegions()
}

func (s *Server) reader() {
	defer close(s.readerDone)
	ds := make([]netio.Datagram, s.conn.BatchSize())
	for i := range ds {
		ds[i].Buf = make([]byte, netio.MaxDatagram)
	}
	for {
		k, err := s.conn.ReadBatch(ds)
		if err != nil {
			if errors.Is(err, netio.ErrClosed) {
				return
			}
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
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
				s.sw.Step(now, ds[i].Addr, pkt)
			}
			ds[i].Buf = ds[i].Buf[:cap(ds[i].Buf)]
		}
		s.pumpLocked(now)
		s.mu.Unlock()
	}
}

func (s *Server) onTimer() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timerAt = time.Time{}
	if !s.closed {
		s.pumpLocked(time.Now())
	}
}

// pumpLocked polls the switch, sends, and arms the timer. Caller holds mu.
func (s *Server) pumpLocked(now time.Time) {
	var next time.Time
	for range 64 {
		var out []netio.Datagram
		out, next = s.sw.Poll(now, s.out[:0])
		groupByAddr(out)
		if s.sec != nil {
			next = s.sealLocked(now, out, next)
		} else if len(out) > 0 {
			s.writeLocked(out)
		}
		clear(out)
		s.out = out[:0]
		if next.IsZero() || next.After(now) {
			break
		}
		now = time.Now()
	}
	s.logEventsLocked()
	if next.IsZero() {
		return
	}
	if s.timerAt.IsZero() || next.Before(s.timerAt) {
		s.timerAt = next
		s.timer.Reset(max(time.Until(next), 0))
	}
}

// groupByAddr orders ds by destination, keeping the order of the
// datagrams to each one: the socket's segmentation offload sends a run of
// datagrams to one address in one go, and the switch's output interleaves
// destinations (a multicast packet's replicas, a reduced chunk's results
// to every member). Across destinations, order carries no meaning.
func groupByAddr(ds []netio.Datagram) {
	if len(ds) < 3 {
		return
	}
	slices.SortStableFunc(ds, func(a, b netio.Datagram) int { return a.Addr.Compare(b.Addr) })
}

// writeLocked writes ds to the socket. Caller holds mu.
func (s *Server) writeLocked(ds []netio.Datagram) {
	if err := s.conn.WriteBatch(ds); err != nil && !s.closed {
		s.log.Warn("fabric: write", "err", err)
	}
}

// sealLocked hands the switch's datagrams to the security layer, runs its
// timers when due, writes what it gives to send (sealed datagrams,
// handshake messages) and returns next moved to the layer's deadline.
// Caller holds mu.
func (s *Server) sealLocked(now time.Time, out []netio.Datagram, next time.Time) time.Time {
	var dl time.Time
	s.wireOut, dl = s.sec.Flush(now, out, s.wireOut, s.writeLocked)
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
			msg := "switch: member dead (stopped heartbeating)"
			if e.Left {
				msg = "switch: member left"
			}
			s.log.Info(msg, "job", e.Job, "group", e.Group, "rank", e.Member, "addr", e.Addr)
		case EventPoolNodeJoined:
			s.log.Info("switch: memory node joined the pool", "node", e.Node, "addr", e.Addr, "bytes", e.Capacity)
		case EventPoolNodeDied:
			s.log.Info("switch: memory node dead (stopped heartbeating)", "node", e.Node, "addr", e.Addr)
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

// Close stops the server and closes the socket. It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.timer.Stop()
	s.mu.Unlock()
	err := s.conn.Close()
	<-s.readerDone
	return err
}
