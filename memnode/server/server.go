package server

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// Host is what the server needs from the core it runs in. Every method
// is called on the core's goroutine, inside one of its calls.
type Host interface {
	// Reply queues a response to peer on the core's transport; an error
	// means it could not be queued (the server counts it dropped).
	Reply(peer transport.PeerID, h *wire.Header, payload []byte) error
}

// PoolHost is the Host of a memory node of a pool (Config.Pool): it also
// carries the pool's datagrams and a rebuild's reads and reports.
type PoolHost interface {
	Host
	// Raw queues one datagram outside the transport's streams (a pool
	// answer, a chain hop passed on to the switch), encoded from h and
	// payload, for the core's next Poll. It reports false (and the
	// host counts the drop) when its queue is full.
	Raw(to netip.AddrPort, h *wire.Header, payload []byte) bool
	// ReadPool reads len(buf) bytes of pool region region (key key) at
	// pool address addr through the switch sw, on congestion lane lane,
	// and calls done with nil or the failure once the read completed,
	// inside a later call of the core. An error means the read was not
	// posted, and done is not called.
	ReadPool(now time.Time, sw netip.AddrPort, region uint32, key, addr uint64, lane uint16, buf []byte, done func(error)) error
	// Notify sends the encoded control request msg to the switch sw; its
	// answer is not waited for.
	Notify(now time.Time, sw netip.AddrPort, msg []byte)
}

// Config configures a Server.
type Config struct {
	// Store is the memory served; it must not be nil.
	Store *memnode.Store
	// Pool, if set, makes the server a memory node of a pool: it serves
	// the pool requests and grants of the switch it names. Its Host must
	// then be a PoolHost.
	Pool *PoolServe
	// Segment is the most payload bytes one pool request carries or
	// reads (the pool client's); larger pool reads are refused.
	Segment int
	// DeadTimeout is the transport's dead-peer timeout: a partial
	// request idle that long is forgotten when room is needed.
	DeadTimeout time.Duration
}

// Stats counts what the server did.
type Stats struct {
	// RequestsServed and RequestsRefused count the one-sided requests
	// answered with status OK and with any other status.
	RequestsServed, RequestsRefused uint64
	// ResponsesDropped counts responses the transport could not queue.
	ResponsesDropped uint64
	// LentRefused counts one-sided requests refused because they named
	// the region a memory node lends to the pool (reachable only
	// through the pool path).
	LentRefused uint64
	// FragmentsRefused counts packets of a multi-packet request that
	// contradicted its length.
	FragmentsRefused uint64
	// Pool counts the pool side.
	Pool PoolStats
}

// Server serves a Store to peers; see the package documentation. Not
// safe for concurrent use.
type Server struct {
	host     Host
	store    *memnode.Store
	dead     time.Duration
	inStatus map[inKey]*inReq
	inSweep  time.Time // earliest next sweep of inStatus
	// idents, when set (SetIdentities), gives each peer address's
	// certified identity.
	idents func(netip.AddrPort) (secure.Cert, bool)
	now    time.Time // of the current call (Observe)
	stats  Stats
	pool   poolServer
}

type inKey struct {
	peer transport.PeerID
	id   uint64
}

type inReq struct {
	status wire.Status
	total  uint32 // the request's length, fixed by its first packet
	last   time.Time
}

// MaxInRequests bounds the multi-packet requests being received; stale
// ones (their sender gave up) are swept when the bound is reached, and
// while it is, the first packet of a new one is held back (not
// acknowledged: its sender resends it).
const MaxInRequests = 1 << 16

// sweepBatch bounds the entries one sweep of a full table looks at.
const sweepBatch = 1024

// New returns a server of cfg.Store, answering through host.
func New(cfg Config, host Host) (*Server, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("memory server: no Store")
	}
	s := &Server{host: host, store: cfg.Store, dead: cfg.DeadTimeout, inStatus: make(map[inKey]*inReq)}
	if err := s.initPool(cfg.Pool, cfg.Segment, host); err != nil {
		return nil, err
	}
	return s, nil
}

// Store is the memory served.
func (s *Server) Store() *memnode.Store { return s.store }

// Observe tells the server the time of the core's current call (Receive
// or Poll). The first call starts a memory node's startup grace.
func (s *Server) Observe(now time.Time) {
	s.now = now
	if s.pool.started.IsZero() {
		s.pool.started = now
	}
}

// InRequests is the number of multi-packet requests being received.
func (s *Server) InRequests() int { return len(s.inStatus) }

// Stats returns the counters.
func (s *Server) Stats() Stats {
	st := s.stats
	if s.pool.replies != nil {
		st.Pool.RepliesEvicted = s.pool.replies.Evicted()
		st.Pool.GrantsHeld = s.pool.node.Grants()
	}
	return st
}

// SetIdentities gives the server the certified identity of each peer
// address (a security layer's Layer.Peer): from then on a memory node
// takes pool requests and grants only from a switch whose certificate
// says it is one.
func (s *Server) SetIdentities(peer func(netip.AddrPort) (secure.Cert, bool)) { s.idents = peer }

// Serve executes a request packet the transport delivered against the
// store, and answers when the request message is complete.
func (s *Server) Serve(now time.Time, d *transport.Delivery) {
	h := &d.Header
	if h.Op == wire.OpControl && s.servePoolControl(d) {
		return
	}
	var r *inReq
	k := inKey{d.Peer, h.MsgID}
	if !d.MsgDone || h.Offset != 0 || h.MsgLen != uint32(h.Len) {
		// Multi-packet request: remember the first refusal until the
		// last packet arrives. Admission (Admit) made room.
		if r = s.inStatus[k]; r == nil {
			if len(s.inStatus) >= MaxInRequests {
				s.stats.RequestsRefused++
				return
			}
			r = &inReq{total: h.MsgLen}
			s.inStatus[k] = r
		}
		r.last = now
	}
	var res memnode.Result
	switch {
	case r != nil && h.MsgLen != r.total:
		// Not a packet of the request it names: the request fails.
		s.stats.FragmentsRefused++
		res.Status = wire.StatusBadOperand
	case h.Op == wire.OpNop:
		res.Status = wire.StatusOK
	case s.pool.node != nil && h.Key == s.pool.node.Key():
		// The memory lent to the pool is reachable only through the
		// pool path (the switch checks each region's own key), never
		// with the lent region's key.
		s.stats.LentRefused++
		res.Status = wire.StatusBadKey
	default:
		res = s.store.Exec(h, d.Payload)
	}
	st, old := res.Status, res.Old
	if r != nil {
		if r.status == wire.StatusOK {
			r.status = st
		}
		if !d.MsgDone {
			return
		}
		st = r.status
		delete(s.inStatus, k)
	}
	if st == wire.StatusOK {
		s.stats.RequestsServed++
	} else {
		s.stats.RequestsRefused++
	}
	rh := wire.Header{Op: h.Op, Flags: wire.FlagResp, MsgID: h.MsgID, Status: st, Operand1: old}
	var payload []byte
	if h.Op == wire.OpRead && st == wire.StatusOK {
		// Zero-copy: the response streams straight from region memory
		// (RDMA READ semantics: not a snapshot against concurrent writes).
		payload = res.Data
	}
	s.reply(d.Peer, &rh, payload)
}

// reply queues a response on the transport, counting it dropped if it
// cannot be.
func (s *Server) reply(to transport.PeerID, h *wire.Header, payload []byte) {
	if err := s.host.Reply(to, h, payload); err != nil {
		s.stats.ResponsesDropped++
	}
}

// Admit decides, before a request packet counts as received, whether
// there is room for it: it holds back the first packet of a multi-packet
// request while MaxInRequests are being received (after forgetting those
// idle for the dead timeout), so that its sender resends it and the
// requests already under way are not disturbed.
func (s *Server) Admit(d *transport.Delivery) bool {
	h := &d.Header
	if h.MsgLen == uint32(h.Len) || len(s.inStatus) < MaxInRequests || s.inStatus[inKey{d.Peer, h.MsgID}] != nil {
		return true
	}
	if !s.now.Before(s.inSweep) {
		// At most sweepBatch entries, a 64th of the dead timeout apart
		// (from where map iteration starts, a random place): no
		// Receive pays for the whole table.
		s.inSweep = s.now.Add(s.dead / 64)
		n := 0
		for k, r := range s.inStatus {
			if n++; n > sweepBatch {
				break
			}
			if s.now.Sub(r.last) > s.dead {
				delete(s.inStatus, k)
			}
		}
	}
	return len(s.inStatus) < MaxInRequests
}
