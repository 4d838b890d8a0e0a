package fabric

import (
	"crypto/rand"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/netio/loop"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire/ctrl"
)

// Server drives a Switch over netio.Conns with a loop.Driver: a goroutine
// per socket reads datagram batches, a timer serves deadlines, and a
// mutex makes whoever holds it the Switch's owner. The datagrams a Poll
// gives are written after that mutex is released (loop.Config.Overlap),
// under a second one held until the next Poll may reuse their buffers, so
// that with several sockets (and cores) one goroutine steps the packets
// it read while another writes.
type Server struct {
	log *slog.Logger
	drv *loop.Driver

	mu      sync.Mutex // owns sw, events, grouper, sec
	sw      *Switch
	events  []Event
	grouper grouper

	// sec, when not nil, seals every datagram written and opens every
	// datagram read (ServerOptions.Security), wrapped around the switch.
	sec *secure.Layer
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
	s := &Server{log: logger, sw: sw, sec: sec}
	// The server writes a poll's datagrams before the next Poll, Tails
	// included (the results of an aggregation, not copied per member),
	// unless the security layer or fault injection rewrite them.
	sw.eng.SetGather(sec == nil && !sw.cfg.Fault.active())
	var m loop.Machine = (*serverMachine)(s)
	if sec != nil {
		m = secure.Wrap(m, sec)
	}
	// The switch copies what it keeps of a packet: it can step packets
	// still in the socket's receive buffers (Views), and leaves a Poll's
	// datagrams alone while it steps more (Overlap).
	s.drv = loop.New(m, &s.mu, append([]netio.Conn{conn}, more...), loop.Config{Logger: logger, Name: "fabric", Views: true, Overlap: true})
	s.mu.Lock()
	s.drv.PumpLocked(time.Now())
	s.mu.Unlock()
	s.drv.Start()
	return s
}

// serverMachine is the Switch as the server's driver runs it: its Poll
// groups the datagrams by destination and logs the switch's events.
// The driver calls it under Server.mu.
type serverMachine Server

func (m *serverMachine) Receive(now time.Time, d netio.Datagram) { m.sw.Receive(now, d) }

func (m *serverMachine) Poll(now time.Time, out []netio.Datagram) ([]netio.Datagram, time.Time) {
	out, next := m.sw.Poll(now, out)
	m.grouper.group(out)
	(*Server)(m).logEventsLocked()
	return out, next
}

// Addr is the address the switch listens on.
func (s *Server) Addr() netip.AddrPort { return s.drv.Conn().LocalAddr() }

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
		case EventRegionsLoaded:
			s.log.Info("switch: pool regions loaded from the store; the memory nodes' reports settle their copies", "regions", e.Count)
		case EventRecordRefused:
			s.log.Warn("switch: pool region record from the store refused", "region", e.Region, "err", e.Err)
		}
	}
	clear(s.events)
}

// Close stops the server and closes its sockets. It is idempotent.
func (s *Server) Close() error { return s.drv.Close() }
