package fabric

import (
	"errors"
	"net/netip"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// The pool's data path and the grants behind it.
//
// A pool request (wire.ModePool) is a self-contained datagram: the switch
// checks it against the MMU (region, key, permission, bounds), translates
// the pool address to the memory node and node-local address of the stripe
// it lies in, and forwards it there with the client's address appended
// (FlagReplyTo). It keeps no state per request. The memory node answers
// the client directly. A request must lie inside one stripe; the client
// splits larger accesses (it knows the layout from PoolOpen). A write or
// vector op to a replicated region goes to every live replica, with
// Header.Copies telling the client how many answers to wait for; a read
// goes to the first live replica. Requests the switch refuses are answered
// by the switch itself.
//
// A region becomes usable once every memory node that holds a column of
// it has accepted a ctrl.PoolGrant for its extent; the node zeroes the
// extent before it answers, so no region reads another's old bytes. Free
// sends ctrl.PoolRevoke to the nodes (and a later grant of the same memory
// retires any grant it overlaps), so a freed region is refused at the
// switch and at the node.

// poolCreate is a region waiting for its memory nodes' grants.
type poolCreate struct {
	region  *PoolRegion
	client  transport.PeerID
	msgID   uint64
	waiting int
	failed  bool
}

type grantKey struct {
	node  netip.AddrPort
	msgID uint64
}

// createPool makes the region m asks for and grants its extents; the
// client's answer waits for the grants.
func (p *poolPlane) createPool(d *transport.Delivery, m *ctrl.Msg) {
	spec := m.Pool
	if spec.Replicas > 1 && wire.Perm(spec.Perm)&(wire.PermAtomic|wire.PermVector) != 0 {
		// Replicas applying read-modify-write ops in different orders
		// would diverge: atomics and vector ops need a single copy.
		p.sw.stats.ControlRefused++
		p.sw.reply(d.Peer, &d.Header, wire.StatusBadOperand, 0)
		return
	}
	r, err := p.mmu.Create(spec.Size, spec.Stripe, spec.Columns, spec.Replicas, wire.Perm(spec.Perm))
	switch {
	case errors.Is(err, ctrl.ErrNoSpace), errors.Is(err, ctrl.ErrNoNodes):
		// Operand1 says what is short (ShortError.Operand), so that the
		// client can tell its user.
		var short *ShortError
		operand := uint64(0)
		if errors.As(err, &short) {
			operand = short.Operand()
		}
		p.sw.stats.ControlRefused++
		p.sw.reply(d.Peer, &d.Header, wire.StatusBusy, operand)
		return
	case err != nil:
		p.sw.stats.ControlRefused++
		p.sw.reply(d.Peer, &d.Header, wire.StatusBadOperand, 0)
		return
	}
	pc := &poolCreate{region: r, client: d.Peer, msgID: d.Header.MsgID}
	homes := r.homes()
	for c, h := range r.Homes {
		g := &ctrl.Msg{Type: ctrl.PoolGrant, Region: r.ID, Key: r.Key, Pool: r.spec(), Node: uint16(c),
			Base: h.Base, Length: r.Layout.ColumnBytes(c), Epoch: r.Epoch, Homes: homes}
		id, ok := p.sendPoolCtrl(h.Node.Addr, g)
		if !ok {
			pc.failed = true
			break
		}
		p.grants[grantKey{h.Node.Addr, id}] = pc
		pc.waiting++
	}
	if pc.waiting == 0 {
		p.endCreate(pc)
	}
}

// sendPoolCtrl sends a control request to a memory node and returns its
// message id.
func (p *poolPlane) sendPoolCtrl(node netip.AddrPort, m *ctrl.Msg) (uint64, bool) {
	buf, err := secure.AppendCtrl(nil, m, p.sw.cfg.Token)
	if err != nil {
		return 0, false
	}
	h := wire.Header{Op: wire.OpControl}
	id, err := p.sw.eng.Send(transport.PeerID{Addr: node}, &h, buf, 0)
	return id, err == nil
}

// grantDone records a memory node's answer to a grant (ok false: refused,
// or the node is unreachable).
func (p *poolPlane) grantDone(k grantKey, ok bool) bool {
	pc := p.grants[k]
	if pc == nil {
		return false
	}
	delete(p.grants, k)
	if !ok {
		pc.failed = true
	}
	pc.waiting--
	if pc.waiting == 0 {
		p.endCreate(pc)
	}
	return true
}

// endCreate answers the client once every grant is settled.
func (p *poolPlane) endCreate(pc *poolCreate) {
	r := pc.region
	if pc.failed {
		p.revokeAll(r)
		_ = p.mmu.Free(r.ID, r.Key)
		p.sw.stats.ControlRefused++
		h := wire.Header{Op: wire.OpControl, MsgID: pc.msgID}
		p.sw.reply(pc.client, &h, wire.StatusBusy, 0)
		return
	}
	r.Ready = true
	p.mmu.touch(r.ID)
	p.sw.respondTo(pc.client, pc.msgID, &ctrl.Msg{Type: ctrl.PoolCreate, Resp: true, Region: r.ID, Key: r.Key, Pool: r.spec()})
}

// revokeAll tells r's memory nodes to drop its grants (best effort: a node
// that misses it drops the grant when its memory is granted again).
func (p *poolPlane) revokeAll(r *PoolRegion) {
	for _, h := range r.Homes {
		p.sendPoolCtrl(h.Node.Addr, &ctrl.Msg{Type: ctrl.PoolRevoke, Region: r.ID, Key: r.Key})
	}
}

// freePool frees a region and revokes its grants.
func (p *poolPlane) freePool(id uint32, key uint64) error {
	r, err := p.mmu.Region(id, key)
	if err != nil || !r.Ready {
		return wire.StatusBadKey
	}
	p.revokeAll(r)
	for c := range r.Homes {
		if r.isUnconfirmed(c) {
			p.settleColumn(r, c)
		}
	}
	return p.mmu.Free(id, key)
}

// poolAccess is what a pool request needs: the permission and its length.
func poolAccess(h *wire.Header, payload []byte) (wire.Perm, uint64, bool) {
	switch h.Op {
	case wire.OpRead:
		return wire.PermRead, h.Operand1, true
	case wire.OpWrite:
		return wire.PermWrite, uint64(len(payload)), true
	case wire.OpVector:
		return wire.PermVector, uint64(len(payload)), true
	case wire.OpCAS, wire.OpFetchAdd:
		return wire.PermAtomic, 8, true
	case wire.OpFence:
		// Raised on the node(s) holding the byte at Addr.
		return wire.PermWrite, 1, true
	}
	return 0, 0, false
}

// poolForward translates a pool request and forwards it to its memory
// node(s), or answers it with the reason it is refused.
func (p *poolPlane) poolForward(from netip.AddrPort, h *wire.Header, payload []byte) {
	p.sw.stats.PoolIn++
	if p.recovering(p.sw.now) {
		// The map is not complete: the client resends.
		p.sw.stats.PoolDeferred++
		return
	}
	if h.Flags&(wire.FlagResp|wire.FlagReplyTo) == 0 && p.poolAmplifies(from, h, payload) {
		return
	}
	if h.Op == wire.OpChain && h.Flags&wire.FlagResp == 0 && h.Copies == 0 {
		p.chainForward(from, h, payload)
		return
	}
	if h.Flags&(wire.FlagResp|wire.FlagReplyTo) != 0 || h.Copies != 0 {
		// Responses and forwarded requests go from memory nodes to
		// clients, never to the switch.
		p.sw.stats.Malformed++
		return
	}
	if h.Op == wire.OpOptim {
		p.optimForward(from, h, payload)
		return
	}
	body, fence := payload, wire.Fence{}
	if h.Flags&wire.FlagFence != 0 {
		var err error
		if body, fence, err = wire.SplitFence(payload); err != nil {
			p.poolRefuse(from, h, wire.StatusBadOperand)
			return
		}
	}
	need, n, ok := poolAccess(h, body)
	switch {
	case !ok:
		p.poolRefuse(from, h, wire.StatusUnknownOp)
		return
	case h.Flags&wire.FlagAuth != 0:
		// The switch rewrites the request, which would break its tag.
		p.poolRefuse(from, h, wire.StatusUnknownOp)
		return
	case n == 0 || n > uint64(wire.MaxPayload):
		p.poolRefuse(from, h, wire.StatusBadOperand)
		return
	case len(payload)+wire.HeaderLen+wire.ReplyToLen > netio.MaxDatagram:
		p.poolRefuse(from, h, wire.StatusTooLarge)
		return
	}
	r, err := p.mmu.Region(h.Group, h.Key)
	if err != nil || !r.Ready {
		p.poolRefuse(from, h, wire.StatusBadKey)
		return
	}
	if h.Flags&wire.FlagFence != 0 {
		if st, cur := p.fenceCheck(r, h, fence); st != wire.StatusOK {
			p.poolRefuseWith(from, h, st, cur)
			return
		}
	}
	copies := 1
	if h.Op != wire.OpRead {
		copies = r.Layout.Replicas
	}
	var sent, dead, lost int
	var deadCols [2]int // columns of the dead copies (two copies at most)
	for rep := range r.Layout.Replicas {
		t, ok := p.translateOne(from, h, need, h.Addr, n, rep)
		if !ok {
			return
		}
		if t.Lost && !(t.Rebuilding && h.Op != wire.OpRead) {
			lost++
			continue
		}
		if !t.Node.Alive {
			deadCols[dead%len(deadCols)] = t.Column
			dead++
			continue
		}
		if h.Op == wire.OpRead && sent == 1 {
			break
		}
		p.tgts = append(p.tgts[:sent], t)
		sent++
	}
	if sent == 0 {
		if h.Op == wire.OpFence {
			// Kept here even so: every request passing the switch is
			// held to it, and a column granted again takes it.
			r.raiseFence(fence)
		}
		st := wire.StatusMemberDead
		if lost == r.Layout.Replicas {
			st = wire.StatusLost
		}
		p.poolRefuse(from, h, st)
		return
	}
	cp := uint16(min(sent, copies))
	rebuilding := false
	for _, t := range p.tgts[:sent] {
		rebuilding = rebuilding || t.Rebuilding
	}
	if (dead+lost > 0 || rebuilding) && h.Op != wire.OpRead {
		cp |= wire.CopiesDegraded
		// A copy on a dead node misses this write: it is stale from now
		// on, to be rebuilt if its node comes back, never read as is;
		// the region's epoch says so to the copies that take it.
		stale := false
		for _, c := range deadCols[:min(dead, len(deadCols))] {
			stale = stale || !r.Lost[c]
			r.Lost[c], r.Rebuilding[c] = true, false
		}
		if stale {
			p.raiseEpoch(r)
		}
	}
	if h.Op == wire.OpFence {
		r.raiseFence(fence)
		p.mmu.touch(r.ID)
	}
	for _, t := range p.tgts[:sent] {
		fh := *h
		fh.Addr, fh.Copies = t.Addr, cp
		if !p.poolSend(t.Node, &fh, payload, from) {
			return
		}
	}
}

// poolSend forwards a translated pool request (fh, with the node-local
// addresses set) and its payload to node, with client's address as the
// reply-to trailer. It reports false if the forwarding budget is spent.
func (p *poolPlane) poolSend(node *PoolNode, fh *wire.Header, payload []byte, client netip.AddrPort) bool {
	fh.Flags |= wire.FlagReplyTo
	if fh.Copies == 0 {
		fh.Copies = 1
	}
	fh.Offset = 0
	fh.Len = uint16(len(payload) + wire.ReplyToLen)
	fh.MsgLen = uint32(fh.Len)
	b := p.sw.fwdBuf(wire.HeaderLen + int(fh.Len))
	if b == nil {
		return false
	}
	fh.Encode(b)
	copy(b[wire.HeaderLen:], payload)
	wire.AppendReplyTo(b[:wire.HeaderLen+len(payload)], client)
	wire.Seal(b)
	if p.sw.forwardShared(b, node.Addr) {
		p.sw.stats.PoolOut++
		node.Requests++
		node.Bytes += uint64(len(payload))
	}
	return true
}

// translateOne translates an access of n bytes at off of h's region for
// copy replica, which must lie in one stripe, or refuses the request to
// client and reports false.
func (p *poolPlane) translateOne(client netip.AddrPort, h *wire.Header, need wire.Perm, off, n uint64, replica int) (Target, bool) {
	var err error
	p.tgt, err = p.mmu.Translate(h.Group, h.Key, need, off, n, replica, p.tgt[:0])
	if err != nil {
		var st wire.Status
		if !errors.As(err, &st) {
			st = wire.StatusBadOperand
		}
		p.poolRefuse(client, h, st)
		return Target{}, false
	}
	if len(p.tgt) != 1 {
		p.poolRefuse(client, h, wire.StatusBadOperand) // crosses a stripe
		return Target{}, false
	}
	return p.tgt[0], true
}

// chainForward sends a chain packet to the memory node of its current
// hop: from the client (hop 0) or from the memory node that did the hop
// before (carrying the client's address).
func (p *poolPlane) chainForward(from netip.AddrPort, h *wire.Header, payload []byte) {
	client, body := from, payload
	if h.Flags&wire.FlagReplyTo != 0 {
		var err error
		if p.mmu.byAddr[from] == nil {
			p.sw.stats.Spoofed++ // only memory nodes pass chains on
			return
		}
		if body, client, err = wire.SplitReplyTo(payload); err != nil {
			p.sw.stats.Malformed++
			return
		}
	} else if h.Hop != 0 {
		p.poolRefuse(from, h, wire.StatusBadOperand)
		return
	}
	if h.Flags&wire.FlagAuth != 0 {
		p.poolRefuse(client, h, wire.StatusUnknownOp)
		return
	}
	// A fenced chain's trailer follows its data; it travels with the
	// chain to every hop, and is checked here at every hop too.
	chain, fence, trailer := body, wire.Fence{}, 0
	if h.Flags&wire.FlagFence != 0 {
		var err error
		if chain, fence, err = wire.SplitFence(body); err != nil {
			p.poolRefuse(client, h, wire.StatusBadOperand)
			return
		}
		trailer = wire.FenceLen
	}
	hops, _, err := wire.SplitChain(h, chain)
	if err != nil || len(hops)+int(h.Operand1)+trailer+wire.ReplyToLen > wire.MaxPayload {
		p.poolRefuse(client, h, wire.StatusBadOperand)
		return
	}
	hop := wire.ChainHopAt(hops, int(h.Hop))
	need := hop.Op.Perm()
	r, err := p.mmu.Region(h.Group, h.Key)
	switch {
	case err != nil || !r.Ready:
		p.poolRefuse(client, h, wire.StatusBadKey)
		return
	case r.Layout.Replicas > 1:
		// A chain has one path; replicated regions would need it twice.
		p.poolRefuse(client, h, wire.StatusBadOperand)
		return
	}
	if trailer != 0 {
		if st, cur := p.fenceCheck(r, h, fence); st != wire.StatusOK {
			p.poolRefuseWith(client, h, st, cur)
			return
		}
	}
	t, ok := p.translateOne(client, h, need, hop.Addr, h.Operand1, 0)
	if !ok {
		return
	}
	if st := liveness(&t); st != wire.StatusOK {
		p.poolRefuse(client, h, st)
		return
	}
	fh := *h
	fh.Addr = t.Addr
	p.poolSend(t.Node, &fh, body, client)
}

// optimForward translates an optimizer step's parameters and moments
// (which must lie on one memory node) and forwards it there.
func (p *poolPlane) optimForward(from netip.AddrPort, h *wire.Header, payload []byte) {
	o, err := wire.ParseOptim(payload)
	n := uint64(len(payload) - wire.OptimParamsLen)
	switch {
	case err != nil || n == 0 || h.Dtype != wire.DtypeF32 || n%4 != 0:
		p.poolRefuse(from, h, wire.StatusBadOperand)
		return
	case h.Flags&wire.FlagAuth != 0:
		p.poolRefuse(from, h, wire.StatusUnknownOp)
		return
	case len(payload)+wire.HeaderLen+wire.ReplyToLen > netio.MaxDatagram:
		p.poolRefuse(from, h, wire.StatusTooLarge)
		return
	}
	r, err := p.mmu.Region(h.Group, h.Key)
	switch {
	case err != nil || !r.Ready:
		p.poolRefuse(from, h, wire.StatusBadKey)
		return
	case r.Layout.Replicas > 1:
		p.poolRefuse(from, h, wire.StatusBadOperand)
		return
	}
	stride := h.Operand1
	period := r.Layout.Stripe * uint64(r.Layout.Columns)
	if stride == 0 || stride%period != 0 {
		p.poolRefuse(from, h, wire.StatusBadOperand) // moments would be on other nodes
		return
	}
	k := 2
	if o.Algo == wire.OptimAdam {
		k = 3
	}
	var local [3]uint64
	var node *PoolNode
	for i := range k {
		if stride > (^uint64(0)-h.Addr)/uint64(i+1) {
			p.poolRefuse(from, h, wire.StatusOutOfBounds)
			return
		}
		t, ok := p.translateOne(from, h, wire.PermVector, h.Addr+uint64(i)*stride, n, 0)
		if !ok {
			return
		}
		if node != nil && t.Node != node {
			p.poolRefuse(from, h, wire.StatusBadOperand)
			return
		}
		if st := liveness(&t); st != wire.StatusOK {
			p.poolRefuse(from, h, st)
			return
		}
		node, local[i] = t.Node, t.Addr
	}
	fh := *h
	fh.Addr, fh.Operand1, fh.Operand2 = local[0], local[1], local[2]
	p.poolSend(node, &fh, payload, from)
}

// liveness is why a single-copy target cannot be served: its copy is lost
// (the node restarted), its node is dead, or OK.
func liveness(t *Target) wire.Status {
	switch {
	case t.Lost:
		return wire.StatusLost
	case !t.Node.Alive:
		return wire.StatusMemberDead
	}
	return wire.StatusOK
}

// poolRefuse answers a pool request with a status.
func (p *poolPlane) poolRefuse(to netip.AddrPort, h *wire.Header, st wire.Status) {
	p.poolRefuseWith(to, h, st, 0)
}

// poolRefuseWith is poolRefuse with Operand1 set (a fence's token).
func (p *poolPlane) poolRefuseWith(to netip.AddrPort, h *wire.Header, st wire.Status, operand uint64) {
	p.sw.stats.PoolRefused++
	rh := wire.Header{Version: wire.Version, Op: h.Op, Mode: wire.ModePool, Flags: wire.FlagResp,
		Group: h.Group, MsgID: h.MsgID, Status: st, Operand1: operand}
	b := p.sw.fwdBuf(wire.HeaderLen)
	if b == nil {
		return
	}
	b, _ = wire.AppendPacket(b[:0], &rh, nil)
	p.sw.forwardShared(b, to)
}

// poolCtrlReply handles a memory node's answer to a grant or revoke.
func (p *poolPlane) poolCtrlReply(d *transport.Delivery) {
	if !d.MsgDone {
		return
	}
	k := grantKey{d.Peer.Addr, d.Header.MsgID}
	if !p.rebuildGranted(p.sw.now, k, d.Header.Status == wire.StatusOK) {
		p.grantDone(k, d.Header.Status == wire.StatusOK)
	}
}

// poolCtrlFailed handles a grant the transport could not deliver.
func (p *poolPlane) poolCtrlFailed(c *transport.Completion) bool {
	if c.Err == nil {
		return false
	}
	k := grantKey{c.Peer.Addr, c.MsgID}
	return p.rebuildGranted(p.sw.now, k, false) || p.grantDone(k, false)
}

// PoolHomes returns the memory node of each column of pool region id (nil
// for no such region), for tools and tests.
func (s *Switch) PoolHomes(id uint32) []netip.AddrPort { return s.memPool.homesOf(id) }

// PoolNodes describes the pool's memory nodes, by id.
func (s *Switch) PoolNodes() []ctrl.PoolNodeInfo { return s.memPool.nodeInfos() }

// PoolRegions describes the pool's regions (never their keys), by id.
func (s *Switch) PoolRegions() []ctrl.PoolSpec { return s.memPool.regionInfos() }

// homesOf is PoolHomes.
func (p *poolPlane) homesOf(id uint32) []netip.AddrPort {
	r := p.mmu.regions[id]
	if r == nil {
		return nil
	}
	out := make([]netip.AddrPort, len(r.Homes))
	for c, h := range r.Homes {
		out[c] = h.Node.Addr
	}
	return out
}

// nodeInfos is PoolNodes.
func (p *poolPlane) nodeInfos() []ctrl.PoolNodeInfo {
	var out []ctrl.PoolNodeInfo
	for _, n := range p.mmu.Nodes() {
		out = append(out, ctrl.PoolNodeInfo{ID: uint16(n.ID), Addr: n.Addr, Name: n.Name, Capacity: n.Capacity, Used: n.Used(), Alive: n.Alive, Requests: n.Requests, Bytes: n.Bytes})
	}
	return out
}

// regionInfos is PoolRegions.
func (p *poolPlane) regionInfos() []ctrl.PoolSpec {
	var out []ctrl.PoolSpec
	for _, r := range p.mmu.Regions() {
		sp := r.spec()
		for c, h := range r.Homes {
			switch {
			case r.Lost[c]:
				sp.Lost++
			case !h.Node.Alive:
				sp.Down++
			}
			if r.Rebuilding[c] {
				sp.Rebuilding++
			}
		}
		sp.Health = r.health()
		out = append(out, sp)
	}
	return out
}
