package fabric

import (
	"errors"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/ndma/ndma/netio"
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

	readerDone chan struct{}
}

// NewServer starts serving sw on conn; the server owns both from now on.
// logger nil discards logs.
func NewServer(conn netio.Conn, sw *Switch, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{conn: conn, log: logger, sw: sw, readerDone: make(chan struct{})}
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
			s.sw.Step(now, ds[i].Addr, ds[i].Buf)
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
		if len(out) > 0 {
			if err := s.conn.WriteBatch(out); err != nil && !s.closed {
				s.log.Warn("fabric: write", "err", err)
			}
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
