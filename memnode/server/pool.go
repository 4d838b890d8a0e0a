package server

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// The server's part of a pool: a memory node (Config.Pool) executes the
// pool requests and chain hops the switch forwards to it, answering the
// client each names, and takes the switch's grants, revokes and rebuild
// orders (rebuild.go).

// PoolServe makes a server a memory node of a pool.
type PoolServe struct {
	// Switch is the forwarding node whose pool the node lends to. Pool
	// requests and grants are accepted from this address only (a node
	// answering anyone's FlagReplyTo would be a reflector).
	Switch netip.AddrPort
	// Key is the Store region lent to the pool.
	Key uint64
	// Token authenticates the switch's grants (the fabric token). It must
	// not be empty unless Insecure is set.
	Token []byte
	// Insecure serves the pool without a fabric token: grants are
	// accepted from anyone who can forge the switch's address. New
	// refuses an empty Token without it (an error wrapping
	// secure.ErrNoToken).
	Insecure bool
	// Replies bounds the reply cache (entries); zero means 65536.
	Replies int
	// ReplyTTL is how long a mutating request's reply is remembered; zero
	// means 30s. It must exceed the clients' op timeout.
	ReplyTTL time.Duration
	// Durable, when set, keeps the node's grants (and, through the
	// memory it backs, the lent region) across restarts: the server
	// saves its grant table there whenever it changes, and has the
	// bytes each write touched made durable as Durable's policy says
	// before it answers. Nil: the node lends memory that dies with it.
	Durable Durable
	// Kept is the grant table a durable node kept from its earlier
	// start (what Durable saved last), over the same memory: the node
	// takes it back, says so when it registers with the switch, and
	// serves those grants only once the switch has its report of them
	// (the switch decides which copies are still current).
	Kept []memnode.GrantState
	// KeptReplies is the reply records a durable node kept from its
	// earlier start (what Durable.AddReply wrote): they go into the
	// reply cache before the node serves, so that a request applied
	// before the restart and resent after it is answered, not applied
	// again.
	KeptReplies []memnode.ReplyRecord
}

// Durable is where a durable memory node keeps what must survive it
// (package memnode/durable keeps it in a directory).
type Durable interface {
	// SaveGrants stores the grant record rec (memnode.AppendGrants)
	// and returns once a crash can no longer lose it.
	SaveGrants(rec []byte) error
	// Begin is called before a mutating request is applied, with the
	// spans of the lent region it may change (parts past the region
	// are ignored). Under a policy that flushes before the answer, it
	// returns once what those bytes hold now is on disk: a node
	// restarted before the request's reply record was durable puts
	// them back, so that a request is kept with its reply or not at
	// all, whatever a crash or a power loss cuts.
	Begin(spans []memnode.Span) error
	// Commit records r, the reply of the request begun (status OK),
	// after it was applied: it makes spans, then r, durable before it
	// returns, or leaves both to a background flush, as the policy
	// says.
	Commit(spans []memnode.Span, r memnode.ReplyRecord) error
	// Abort ends a request begun that changed nothing (refused).
	Abort() error
	// Flush makes bytes [off, off+n) durable now, whatever the policy:
	// a grant's scrubbed extent and a rebuilt copy, before the record
	// that names them is saved (a record must never name a region over
	// another's bytes, or a partial copy as whole).
	Flush(off, n uint64) error
}

// poolStartupGrace is how long a memory node that just started
// leaves requests for regions it holds no grant of unanswered,
// rather than refusing them (see servePool).
const poolStartupGrace = 2 * time.Second

// PoolStats counts a memory node's pool work.
type PoolStats struct {
	// Requests (and chain hops) executed with status OK or refused,
	// duplicates answered from the reply cache, pool datagrams dropped
	// (not from the switch, or a malformed reply-to), grants and
	// revokes received, replies pushed out of the cache before their
	// TTL, and the grants held now.
	Served, Refused, Duplicates, Dropped uint64
	Grants, Revokes                      uint64
	RepliesEvicted                       uint64
	GrantsHeld                           int
	// Rebuilds of lost copies completed and failed, and bytes copied.
	Rebuilt, RebuildsFailed, RebuildBytes uint64
	// Of a durable node: grant records it failed to save, and flushes
	// that failed (a write's bytes: the write answered StatusBusy; a
	// grant's extent or a rebuilt copy: the grant or rebuild failed).
	SaveFailed, SyncFailed uint64
}

// poolServer is the server's state as a memory node of a pool; node is
// nil on a server that lends no memory to a pool.
type poolServer struct {
	host    PoolHost
	serve   *PoolServe
	node    *memnode.PoolNode
	replies *memnode.Replies
	seg     int // payload bytes per pool request (the pool client's)

	started       time.Time      // the core's first Receive or Poll (a memory node's startup grace)
	chainBuf, fwd []byte         // scratch of chain hops
	spans         []memnode.Span // scratch: the spans a mutating request changes
	rebuilds      map[uint32]*rebuildTask
	reportedTo    uint64 // the switch incarnation the node last reported its grants to
	// kept: the node took back the grants of its earlier start;
	// unreported: it has not reported them to a switch yet (their
	// requests are dropped until it has).
	kept, unreported bool
	rec              []byte // scratch of the grant record
}

// initPool makes the server a memory node of the pool ps names (nil:
// none), answering through host. seg is the pool client's payload bytes
// per request.
func (s *Server) initPool(ps *PoolServe, seg int, host Host) error {
	p := &s.pool
	p.rebuilds = make(map[uint32]*rebuildTask)
	p.seg = seg
	if ps != nil {
		ph, ok := host.(PoolHost)
		if !ok {
			return fmt.Errorf("memory server: a pool's memory node needs a PoolHost")
		}
		p.host = ph
		node, err := memnode.NewPoolNode(s.store, ps.Key)
		if err != nil {
			return err
		}
		if !ps.Switch.IsValid() {
			return fmt.Errorf("memory server: Pool.Switch is not set")
		}
		if err := secure.CheckToken(ps.Token, ps.Insecure); err != nil {
			return fmt.Errorf("memory server: Pool.Token: %w", err)
		}
		n, ttl := ps.Replies, ps.ReplyTTL
		if n == 0 {
			n = 1 << 16
		}
		if ttl == 0 {
			ttl = 30 * time.Second
		}
		if n < 0 || ttl < 0 {
			return fmt.Errorf("memory server: Pool.Replies and Pool.ReplyTTL must not be negative")
		}
		p.serve, p.node, p.replies = ps, node, memnode.NewReplies(n, ttl)
		if len(ps.Kept) > 0 {
			if ps.Durable == nil {
				return fmt.Errorf("memory server: Pool.Kept without Pool.Durable")
			}
			if err := node.Restore(ps.Kept); err != nil {
				return fmt.Errorf("memory server: the kept grants: %w", err)
			}
			p.kept, p.unreported = true, true
		}
		if len(ps.KeptReplies) > 0 {
			if ps.Durable == nil {
				return fmt.Errorf("memory server: Pool.KeptReplies without Pool.Durable")
			}
			p.replies.Restore(ps.KeptReplies)
		}
	}
	return nil
}

// PoolKept reports whether the node took back the grants of its
// earlier start (a durable node): it tells the switch so when it
// registers, and reports them.
func (s *Server) PoolKept() bool { return s.pool.kept }

// saveGrants saves the grant table of a durable node (a no-op
// without Pool.Durable); a failure is counted and returned.
func (s *Server) saveGrants() error {
	p := &s.pool
	if p.serve.Durable == nil {
		return nil
	}
	p.rec = memnode.AppendGrants(p.rec[:0], p.node.State())
	if err := p.serve.Durable.SaveGrants(p.rec); err != nil {
		s.stats.Pool.SaveFailed++
		return err
	}
	return nil
}

// flushGrant makes region's extent durable now and saves the grant
// record (a no-op without Pool.Durable); a failure is counted and
// returned.
func (s *Server) flushGrant(region uint32) error {
	p := &s.pool
	if p.serve.Durable == nil {
		return nil
	}
	if base, n, ok := p.node.Extent(region); ok {
		if err := p.serve.Durable.Flush(base, n); err != nil {
			s.stats.Pool.SyncFailed++
			return err
		}
	}
	return s.saveGrants()
}

// begin is called before a mutating request changing spans is applied
// on a durable node (a no-op without Pool.Durable): it reports false,
// counted, if the request must be refused (StatusBusy) because its
// undo record could not be saved.
func (s *Server) begin(spans []memnode.Span) bool {
	p := &s.pool
	if p.serve.Durable == nil {
		return true
	}
	if err := p.serve.Durable.Begin(spans); err != nil {
		s.stats.Pool.SyncFailed++
		return false
	}
	return true
}

// commit ends a mutating request begun, whose result is res: for a
// request applied (status OK) it makes the bytes of spans and the
// reply of client's request id (at chain hop hop) durable as the
// policy says before the answer, and returns res, or StatusBusy if
// they could not be (a no-op without Pool.Durable).
func (s *Server) commit(now time.Time, client netip.AddrPort, id uint64, hop uint8, spans []memnode.Span, res memnode.Result) memnode.Result {
	p := &s.pool
	if p.serve.Durable == nil {
		return res
	}
	if res.Status != wire.StatusOK {
		_ = p.serve.Durable.Abort()
		return res
	}
	r := memnode.ReplyRecord{Client: client, ID: id, Hop: hop, Status: res.Status, Old: res.Old, At: now}
	if err := p.serve.Durable.Commit(spans, r); err != nil {
		s.stats.Pool.SyncFailed++
		return memnode.Result{Status: wire.StatusBusy}
	}
	return res
}

// ServePool executes a pool request (a datagram of mode wire.ModePool
// that is not an answer) and answers the client it names: the switch
// forwards them, and only the switch's are served.
func (s *Server) ServePool(now time.Time, from netip.AddrPort, h *wire.Header, payload []byte) {
	p := &s.pool
	if p.node == nil || from != p.serve.Switch || h.Flags&wire.FlagReplyTo == 0 || h.Flags&wire.FlagAuth != 0 || !s.fromSwitchRole(from) {
		s.stats.Pool.Dropped++
		return
	}
	payload, client, err := wire.SplitReplyTo(payload)
	if err != nil {
		s.stats.Pool.Dropped++
		return
	}
	if p.unreported || !p.node.HasGrant(h.Group) && now.Sub(p.started) < poolStartupGrace {
		// Just started: the switch may not know yet that this node
		// restarted and still send it the regions of its previous life.
		// Unanswered, the client resends, and by then the switch sends
		// the request to another copy (or answers LOST).
		s.stats.Pool.Dropped++
		return
	}
	if h.Op == wire.OpChain {
		s.serveChain(now, client, h, payload)
		return
	}
	var fence wire.Fence
	var ferr error
	if h.Flags&wire.FlagFence != 0 {
		payload, fence, ferr = wire.SplitFence(payload)
	}
	var res memnode.Result
	mut := memnode.Mutating(h.Op)
	cached := false
	if mut {
		res, cached = p.replies.Lookup(now, client, h.MsgID, 0)
	}
	switch {
	case cached:
		s.stats.Pool.Duplicates++
	case ferr != nil:
		res.Status = wire.StatusBadOperand
	case h.Op == wire.OpFence:
		// Idempotent (the fence only goes up): not cached.
		res = p.node.Raise(h, fence)
		if res.Status == wire.StatusOK && s.saveGrants() != nil {
			res = memnode.Result{Status: wire.StatusBusy}
		}
	case h.Op == wire.OpRead && h.Operand1 > uint64(p.seg+wire.ReplyToLen):
		res.Status = wire.StatusTooLarge
	case h.Op == wire.OpOptim:
		if o, err := wire.ParseOptim(payload); err != nil {
			res.Status = wire.StatusBadOperand
		} else {
			grads := payload[wire.OptimParamsLen:]
			n := uint64(len(grads))
			spans := append(p.spans[:0], memnode.Span{Off: h.Addr, Len: n}, memnode.Span{Off: h.Operand1, Len: n})
			if o.Algo == wire.OptimAdam {
				spans = append(spans, memnode.Span{Off: h.Operand2, Len: n})
			}
			if !s.begin(spans) {
				res.Status = wire.StatusBusy
			} else {
				res = s.commit(now, client, h.MsgID, 0, spans, p.node.ExecOptim(h, &o, grads))
			}
		}
		p.replies.Add(now, client, h.MsgID, 0, res)
	default:
		h.Offset = 0 // a pool request is one datagram
		spans := append(p.spans[:0], memnode.Span{Off: h.Addr, Len: writeLen(h, payload)})
		switch {
		case mut && !s.begin(spans):
			res.Status = wire.StatusBusy
		case h.Flags&wire.FlagFence != 0:
			res = p.node.ExecFenced(h, fence, payload)
		default:
			res = p.node.Exec(h, payload)
		}
		if mut && res.Status == wire.StatusOK && h.Copies&wire.CopiesDegraded != 0 && p.node.MarkDegraded(h.Group) {
			// The region's other copy missed this write: a restarted
			// switch must take this copy for the current one.
			if s.saveGrants() != nil {
				res = memnode.Result{Status: wire.StatusBusy}
			}
		}
		if mut {
			res = s.commit(now, client, h.MsgID, 0, spans, res)
			p.replies.Add(now, client, h.MsgID, 0, res)
		}
	}
	if res.Status == wire.StatusOK {
		s.stats.Pool.Served++
	} else {
		s.stats.Pool.Refused++
	}
	rh := wire.Header{Version: wire.Version, Op: h.Op, Mode: wire.ModePool, Flags: wire.FlagResp,
		Group: h.Group, MsgID: h.MsgID, Status: res.Status, Operand1: res.Old, Copies: h.Copies}
	var data []byte
	if h.Op == wire.OpRead && res.Status == wire.StatusOK {
		data = res.Data
		rh.MsgLen = uint32(len(data))
	}
	p.host.Raw(client, &rh, data)
}

// servePoolControl handles a grant or revoke from the switch. It reports
// whether the request was one (and so is answered).
func (s *Server) servePoolControl(d *transport.Delivery) bool {
	p := &s.pool
	if p.node == nil || d.Peer.Addr != p.serve.Switch || !d.MsgDone || d.Header.Offset != 0 || !s.fromSwitchRole(d.Peer.Addr) {
		return false
	}
	var m ctrl.Msg
	if err := secure.ParseCtrl(d.Payload, &m, p.serve.Token); err != nil {
		return false
	}
	resp := &ctrl.Msg{Type: m.Type, Resp: true}
	st := wire.StatusOK
	switch m.Type {
	case ctrl.PoolGrant:
		err := p.node.Grant(grantOf(&m))
		switch {
		case err != nil:
			st = wire.StatusOutOfBounds
		case s.flushGrant(m.Region) != nil:
			p.node.Revoke(m.Region, m.Key)
			st = wire.StatusBusy
		default:
			s.stats.Pool.Grants++
		}
	case ctrl.PoolRevoke:
		// Key 0: the switch drops a grant it does not know the key of
		// (one of a region freed while this node was away).
		if m.Key == 0 {
			p.node.RevokeAny(m.Region)
		} else {
			p.node.Revoke(m.Region, m.Key)
		}
		delete(p.rebuilds, m.Region)
		s.stats.Pool.Revokes++
		// A revoke the record misses is harmless: a switch given the
		// grant again revokes it again.
		_ = s.saveGrants()
	case ctrl.PoolEpoch:
		if !p.node.SetEpoch(m.Region, m.Key, m.Epoch) {
			st = wire.StatusBadKey
		} else if s.saveGrants() != nil {
			st = wire.StatusBusy
		}
	case ctrl.PoolRebuild:
		err := p.node.GrantRebuild(grantOf(&m))
		switch {
		case err != nil:
			st = wire.StatusOutOfBounds
		case s.flushGrant(m.Region) != nil:
			p.node.Revoke(m.Region, m.Key)
			st = wire.StatusBusy
		default:
			s.stats.Pool.Grants++
			p.rebuilds[m.Region] = &rebuildTask{spec: m.Pool, key: m.Key, column: int(m.Node), base: m.Base}
		}
	case ctrl.PoolRebuildGo:
		t := p.rebuilds[m.Region]
		if t == nil || t.key != m.Key || t.started {
			st = wire.StatusBadKey
		} else {
			s.startRebuild(m.Region, t)
		}
	default:
		return false
	}
	rh := wire.Header{Op: wire.OpControl, Flags: wire.FlagResp, MsgID: d.Header.MsgID, Status: st}
	var buf []byte
	if st == wire.StatusOK {
		var err error
		if buf, err = secure.AppendCtrl(nil, resp, p.serve.Token); err != nil {
			return false
		}
	}
	s.reply(d.Peer, &rh, buf)
	return true
}

// fromSwitchRole reports whether addr may act as the switch: always
// without identities, else only with a switch's certificate.
func (s *Server) fromSwitchRole(addr netip.AddrPort) bool {
	if s.idents == nil {
		return true
	}
	cert, ok := s.idents(addr)
	return ok && cert.Role == secure.RoleSwitch
}

// grantOf is the grant a ctrl.PoolGrant or ctrl.PoolRebuild gives.
func grantOf(m *ctrl.Msg) memnode.Grant {
	g := memnode.Grant{Region: m.Region, Key: m.Key, Perm: wire.Perm(m.Pool.Perm), Base: m.Base, Len: m.Length,
		Column: int(m.Node), Epoch: m.Epoch,
		Layout: memnode.GrantLayout{Size: m.Pool.Size, Stripe: m.Pool.Stripe, Columns: m.Pool.Columns, Replicas: m.Pool.Replicas},
		Homes:  make([]memnode.GrantHome, len(m.Homes)), Fences: m.Fences}
	for i, h := range m.Homes {
		g.Homes[i] = memnode.GrantHome{Addr: h.Addr, Base: h.Base}
	}
	return g
}

// poolReportBytes bounds one ctrl.PoolReport message (it is sent in
// several packets; the switch takes control messages of up to 256 KiB).
const poolReportBytes = 32 << 10

// PoolReports returns the ctrl.PoolReport messages (encoded, with the
// fabric token) that tell the switch incarnation switchInc (from its
// ctrl.PoolNode answer) which grants this memory node holds, the last
// one Final; nil if the node reported to that incarnation already (or
// serves no pool). The caller sends them in order, each after the last
// was answered, and calls PoolReported once all were.
func (s *Server) PoolReports(switchInc uint64) ([][]byte, error) {
	p := &s.pool
	if p.node == nil || switchInc == p.reportedTo {
		return nil, nil
	}
	var msgs [][]byte
	m := &ctrl.Msg{Type: ctrl.PoolReport}
	size := 0
	flush := func(final bool) error {
		m.Final = final
		b, err := secure.AppendCtrl(nil, m, p.serve.Token)
		if err != nil {
			return err
		}
		msgs = append(msgs, b)
		m.Reports, size = m.Reports[:0], 0
		return nil
	}
	// The keys themselves go only to a switch whose credential this node
	// verified, over the sealed session they travel in: a restarted switch
	// then rebuilds lost copies without waiting for a client to bring
	// the key. On a fabric that does not seal, anyone could pose as the
	// switch and collect them: only their digests.
	keys := s.idents != nil && s.fromSwitchRole(p.serve.Switch)
	for _, g := range p.node.State() {
		e := ctrl.GrantReport{Region: g.Region, Column: uint16(g.Column),
			Pool: ctrl.PoolSpec{Size: g.Layout.Size, Stripe: g.Layout.Stripe, Columns: g.Layout.Columns, Replicas: g.Layout.Replicas, Perm: uint8(g.Perm)},
			Base: g.Base, Length: g.Len, Epoch: g.Epoch, Digest: ctrl.PoolKeyDigest(g.Region, g.Key),
			Rebuilding: g.Rebuilding, Degraded: g.Degraded, Homes: make([]ctrl.PoolHome, len(g.Homes)), Fences: g.Fences}
		if keys {
			e.Key = g.Key
		}
		for i, h := range g.Homes {
			e.Homes[i] = ctrl.PoolHome{Addr: h.Addr, Base: h.Base}
		}
		n := 80 + 30*len(e.Homes) + wire.FenceLen*len(e.Fences)
		if size > 0 && size+n > poolReportBytes {
			if err := flush(false); err != nil {
				return nil, err
			}
		}
		m.Reports = append(m.Reports, e)
		size += n
	}
	if err := flush(true); err != nil {
		return nil, err
	}
	return msgs, nil
}

// PoolReported records that switch incarnation switchInc has the node's
// report (every message PoolReports returned was answered): a durable
// node serves the grants it kept from now on.
func (s *Server) PoolReported(switchInc uint64) {
	s.pool.reportedTo = switchInc
	s.pool.unreported = false
}

// writeLen is how many bytes from h.Addr a mutating pool request
// changes.
func writeLen(h *wire.Header, payload []byte) uint64 {
	switch h.Op {
	case wire.OpWrite, wire.OpVector:
		return uint64(len(payload))
	case wire.OpCAS, wire.OpFetchAdd:
		return 8
	}
	return 0
}

// serveChain executes the current hop of a chain and passes the packet to
// the switch for the next hop, or answers the client after the last.
func (s *Server) serveChain(now time.Time, client netip.AddrPort, h *wire.Header, payload []byte) {
	p := &s.pool
	var fenceOld uint64
	answer := func(st wire.Status, data []byte) {
		if st == wire.StatusOK {
			s.stats.Pool.Served++
		} else {
			s.stats.Pool.Refused++
		}
		rh := wire.Header{Version: wire.Version, Op: wire.OpChain, Mode: wire.ModePool, Flags: wire.FlagResp,
			Group: h.Group, MsgID: h.MsgID, Status: st, Copies: h.Copies, MsgLen: uint32(len(data))}
		if st == wire.StatusFenced {
			rh.Operand1 = fenceOld // the fence's token here
		}
		p.host.Raw(client, &rh, data)
	}
	var fence wire.Fence
	if h.Flags&wire.FlagFence != 0 {
		var err error
		if payload, fence, err = wire.SplitFence(payload); err != nil {
			answer(wire.StatusBadOperand, nil)
			return
		}
	}
	hops, data, err := wire.SplitChain(h, payload)
	if err != nil {
		answer(wire.StatusBadOperand, nil)
		return
	}
	hop := wire.ChainHopAt(hops, int(h.Hop))
	var res memnode.Result
	out := data
	cached := false
	if hop.Op.Mutates() {
		res, cached = p.replies.Lookup(now, client, h.MsgID, h.Hop)
	}
	switch {
	case cached:
		// Applied before: pass the same data on, do not apply it again.
		s.stats.Pool.Duplicates++
	case fence.Token != 0 && p.node.Admit(h, fence).Status != wire.StatusOK:
		// Every hop is held to the fence, the ones that change nothing
		// too: a chain of an earlier holder stops at its first hop here.
		res = p.node.Admit(h, fence)
		fenceOld = res.Old
	case hop.Op.Mutates() && !s.begin(append(p.spans[:0], memnode.Span{Off: h.Addr, Len: uint64(len(data))})):
		res.Status = wire.StatusBusy
	default:
		res, out = p.node.ExecHop(h, hop.Op, hop.Coef, data, p.chainBuf)
		if hop.Op.Computes() {
			p.chainBuf = out
		}
		if hop.Op.Mutates() {
			res = s.commit(now, client, h.MsgID, h.Hop, p.spans, res)
			p.replies.Add(now, client, h.MsgID, h.Hop, res)
		}
	}
	if res.Status != wire.StatusOK {
		answer(res.Status, nil)
		return
	}
	if int(h.Hop)+1 == len(hops)/wire.ChainHopLen {
		if hop.Op.Mutates() {
			out = nil
		}
		answer(wire.StatusOK, out)
		return
	}
	fh := wire.Header{Version: wire.Version, Op: wire.OpChain, Mode: wire.ModePool, Flags: wire.FlagReplyTo,
		Group: h.Group, Key: h.Key, MsgID: h.MsgID, Hop: h.Hop + 1, Operand1: h.Operand1, Operand2: h.Operand2,
		Dtype: h.Dtype, Alu: h.Alu}
	b := append(append(p.fwd[:0], hops...), out...)
	if fence.Token != 0 {
		fh.Flags |= wire.FlagFence
		b = wire.AppendFence(b, fence)
	}
	b = wire.AppendReplyTo(b, client)
	p.fwd = b
	fh.MsgLen = uint32(len(b))
	p.host.Raw(p.serve.Switch, &fh, b)
	s.stats.Pool.Served++
}
