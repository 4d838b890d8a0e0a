package memnode

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"time"

	"github.com/ndma/ndma/wire"
)

// The memory node's side of the pool. A node lends one of its regions to
// the forwarding node's MMU; the MMU grants extents of it to pool regions
// (Grant, which scrubs the extent first) and takes them back (Revoke).
// Requests forwarded by the switch name the pool region (header Group),
// carry the pool region's key and a node-local address; ExecPool checks
// them against the grant table a second time — the switch checked them
// too — before executing on the lent region. Sans-I/O like Exec.

// Grant gives pool region Region (whose accesses carry Key and may do
// Perm) the Len bytes at Base of the node's lent region.
//
// The rest is the switch's map record for the grant, which the node keeps
// and reports back to a restarted switch (so that the switch can rebuild
// its map from the nodes): the column of the region the extent holds, the
// region's shape, where every column lives, and the region's epoch as the
// switch last told it. The node does not interpret them.
type Grant struct {
	Region uint32
	Key    uint64
	Perm   wire.Perm
	Base   uint64
	Len    uint64

	Column int
	Layout GrantLayout
	Homes  []GrantHome // by column
	Epoch  uint64
	// Fences is the region's fences (wire.Fence) the grant starts with:
	// a rebuilt copy takes the switch's. The node keeps them apart
	// (raises change them); State reports the current ones.
	Fences []wire.Fence
}

// GrantLayout is a pool region's shape, as the switch's layout has it.
type GrantLayout struct {
	Size, Stripe      uint64
	Columns, Replicas int
}

// GrantHome is where one column of a pool region lives: a memory node's
// address (as the switch sees it) and the extent's offset in its lent
// region.
type GrantHome struct {
	Addr netip.AddrPort
	Base uint64
}

// GrantState is a grant as the node reports it: the grant, whether a
// rebuild of it is under way (its bytes are not a full copy yet), and
// whether it took a write that reached fewer copies than the region has
// since the switch last set its epoch (the other copies missed it).
type GrantState struct {
	Grant
	Rebuilding bool
	Degraded   bool
}

// ErrGrant is returned (wrapped) for a grant that does not fit the lent
// region or names no region or key.
var ErrGrant = errors.New("memnode: bad pool grant")

// MaxGrants bounds a node's grant table (the switch's MaxPoolRegions).
const MaxGrants = 4096

// PoolNode is the grant table of the region a node lends to the pool.
type PoolNode struct {
	store  *Store
	key    uint64 // the lent region
	size   uint64
	grants map[uint32]Grant
	// degraded marks grants that took a degraded write since their epoch
	// was last set.
	degraded map[uint32]bool
	// written marks, per byte of a grant being rebuilt, what clients
	// wrote since the rebuild began (Fill leaves those bytes alone).
	written map[uint32][]uint64
	// fences holds each grant's fences (fence.go): id → highest token;
	// nfences counts them over all grants.
	fences  map[uint32]map[uint32]uint64
	nfences int
}

// NewPoolNode returns an empty grant table over s's region key.
func NewPoolNode(s *Store, key uint64) (*PoolNode, error) {
	r, ok := s.regions[key]
	if !ok {
		return nil, fmt.Errorf("%w: no region under the key to lend", ErrGrant)
	}
	return &PoolNode{store: s, key: key, size: uint64(len(r.mem)), grants: make(map[uint32]Grant), degraded: make(map[uint32]bool), written: make(map[uint32][]uint64),
		fences: make(map[uint32]map[uint32]uint64)}, nil
}

// Key is the lent region's key.
func (p *PoolNode) Key() uint64 { return p.key }

// Grant zeroes g's extent, so the new region never reads an old one's
// bytes, forgets every grant it overlaps (stale ones: the switch gave their
// memory away), and installs g. Granting a region again replaces its
// grant.
func (p *PoolNode) Grant(g Grant) error {
	if g.Region == 0 || g.Key == 0 || g.Len == 0 || g.Perm&^wire.PermAll != 0 ||
		g.Base > p.size || g.Len > p.size-g.Base || len(g.Homes) > MaxGrantHomes {
		return fmt.Errorf("%w: region %d, [%d, +%d) of %d bytes, %d homes", ErrGrant, g.Region, g.Base, g.Len, p.size, len(g.Homes))
	}
	if _, ok := p.grants[g.Region]; !ok && len(p.grants) >= MaxGrants {
		return fmt.Errorf("%w: %d grants already", ErrGrant, MaxGrants)
	}
	if err := p.checkFences(g.Fences, len(p.fences[g.Region])); err != nil {
		return err
	}
	for id, o := range p.grants {
		if id == g.Region || (o.Base < g.Base+g.Len && g.Base < o.Base+o.Len) {
			p.forget(id)
		}
	}
	clear(p.store.regions[p.key].mem[g.Base : g.Base+g.Len])
	p.setFences(g.Region, g.Fences)
	g.Homes, g.Fences = slices.Clone(g.Homes), nil
	p.grants[g.Region] = g
	return nil
}

// Revoke forgets region's grant if key opens it; it reports whether there
// was one.
func (p *PoolNode) Revoke(region uint32, key uint64) bool {
	if g, ok := p.grants[region]; ok && g.Key == key {
		p.forget(region)
		return true
	}
	return false
}

// RevokeAny forgets region's grant whatever its key (the switch's order
// for a grant whose key it does not know).
func (p *PoolNode) RevokeAny(region uint32) { p.forget(region) }

// forget drops region's grant and what the node knows about it.
func (p *PoolNode) forget(region uint32) {
	delete(p.grants, region)
	delete(p.written, region)
	delete(p.degraded, region)
	p.nfences -= len(p.fences[region])
	delete(p.fences, region)
}

// MaxGrantHomes bounds a grant's Homes (the switch's MaxColumns).
const MaxGrantHomes = 256

// SetEpoch records the region's epoch the switch sets (key must open
// the grant; 0: the switch does not know it) and forgets earlier
// degraded writes: the switch knows of them. An epoch lower than the
// grant's is ignored. It reports whether the grant is there.
func (p *PoolNode) SetEpoch(region uint32, key, epoch uint64) bool {
	g, ok := p.grants[region]
	if !ok || key != 0 && g.Key != key {
		return false
	}
	if epoch >= g.Epoch {
		g.Epoch = epoch
		p.grants[region] = g
		delete(p.degraded, region)
	}
	return true
}

// MarkDegraded records that region's grant took a write the region's
// other copies missed; it reports whether the mark is new.
func (p *PoolNode) MarkDegraded(region uint32) bool {
	if _, ok := p.grants[region]; ok && !p.degraded[region] {
		p.degraded[region] = true
		return true
	}
	return false
}

// State returns every grant the node holds, by region id, for a switch
// that rebuilds its map.
func (p *PoolNode) State() []GrantState {
	out := make([]GrantState, 0, len(p.grants))
	for id, g := range p.grants {
		g.Fences = p.Fences(id)
		out = append(out, GrantState{Grant: g, Rebuilding: p.written[id] != nil, Degraded: p.degraded[id]})
	}
	slices.SortFunc(out, func(a, b GrantState) int { return cmp.Compare(a.Region, b.Region) })
	return out
}

// GrantRebuild installs g as Grant does, for a copy to be rebuilt: from
// now on the node remembers which of its bytes clients write, and Fill
// copies the old data only into the others.
func (p *PoolNode) GrantRebuild(g Grant) error {
	if err := p.Grant(g); err != nil {
		return err
	}
	p.written[g.Region] = make([]uint64, (g.Len+63)/64)
	return nil
}

// Rebuilding reports whether region's grant is being rebuilt.
func (p *PoolNode) Rebuilding(region uint32) bool { return p.written[region] != nil }

// Fill copies data into region's grant at node-local address addr, except
// the bytes clients wrote since GrantRebuild. key must open the grant.
func (p *PoolNode) Fill(region uint32, key, addr uint64, data []byte) error {
	g, ok := p.grants[region]
	w := p.written[region]
	if !ok || g.Key != key || w == nil {
		return fmt.Errorf("%w: region %d is not being rebuilt here", ErrGrant, region)
	}
	if addr < g.Base || uint64(len(data)) > g.Len || addr-g.Base > g.Len-uint64(len(data)) {
		return fmt.Errorf("%w: fill [%d, +%d) outside region %d's grant", ErrGrant, addr, len(data), region)
	}
	mem := p.store.regions[p.key].mem
	off := addr - g.Base
	for i, b := range data {
		j := off + uint64(i)
		if w[j/64]&(1<<(j%64)) == 0 {
			mem[addr+uint64(i)] = b
		}
	}
	return nil
}

// EndRebuild stops remembering client writes to region's grant.
func (p *PoolNode) EndRebuild(region uint32) { delete(p.written, region) }

// markWritten records that clients wrote [addr, addr+n) of grant g.
func (p *PoolNode) markWritten(g Grant, addr, n uint64) {
	w := p.written[g.Region]
	if w == nil {
		return
	}
	for j := addr - g.Base; j < addr-g.Base+n; j++ {
		w[j/64] |= 1 << (j % 64)
	}
}

// HasGrant reports whether region holds a grant here.
func (p *PoolNode) HasGrant(region uint32) bool { _, ok := p.grants[region]; return ok }

// Grants is the number of grants held.
func (p *PoolNode) Grants() int { return len(p.grants) }

// Exec executes a pool request forwarded by the switch: h.Group names the
// pool region, h.Key must be its key, and the access (h.Addr+h.Offset,
// node-local) must lie inside its grant. A region with no grant here (never
// granted, revoked, or overlapped by a later grant) or a wrong key is
// StatusBadKey; a missing permission StatusPermission; an access outside
// the grant StatusOutOfBounds. Everything else is Store.Exec's, on the lent
// region. h is not modified.
func (p *PoolNode) Exec(h *wire.Header, payload []byte) Result {
	var need wire.Perm
	var n uint64
	switch h.Op {
	case wire.OpWrite:
		need, n = wire.PermWrite, uint64(len(payload))
	case wire.OpVector:
		need, n = wire.PermVector, uint64(len(payload))
	case wire.OpRead:
		need, n = wire.PermRead, h.Operand1
	case wire.OpCAS, wire.OpFetchAdd:
		need, n = wire.PermAtomic, 8
	default:
		return Result{Status: wire.StatusUnknownOp}
	}
	g, ok := p.grants[h.Group]
	if !ok || g.Key != h.Key {
		return Result{Status: wire.StatusBadKey}
	}
	if g.Perm&need == 0 {
		return Result{Status: wire.StatusPermission}
	}
	// Inside [Base, Base+Len), overflow-safe.
	if h.Addr < g.Base {
		return Result{Status: wire.StatusOutOfBounds}
	}
	if _, ok := span(int(g.Len), h.Addr-g.Base, uint64(h.Offset), n); !ok {
		return Result{Status: wire.StatusOutOfBounds}
	}
	lh := *h
	lh.Key = p.key
	res := p.store.Exec(&lh, payload)
	if res.Status == wire.StatusOK && n > 0 && h.Op != wire.OpRead {
		p.markWritten(g, h.Addr+uint64(h.Offset), n)
	}
	return res
}

// ExecOptim applies an optimizer step (wire.OpOptim) forwarded by the
// switch: params (decoded by the caller) and the f32 gradients grads to
// the parameters at node-local h.Addr, with the first moment at
// h.Operand1 and (Adam) the second moment at h.Operand2, all of region
// h.Group with key h.Key, each len(grads) bytes inside its grant (which
// must allow vector ops), 4-byte aligned and not overlapping. Arithmetic
// is float32 in the order wire.OptimAlgo documents.
func (p *PoolNode) ExecOptim(h *wire.Header, params *wire.OptimParams, grads []byte) Result {
	g, ok := p.grants[h.Group]
	if !ok || g.Key != h.Key {
		return Result{Status: wire.StatusBadKey}
	}
	if g.Perm&wire.PermVector == 0 {
		return Result{Status: wire.StatusPermission}
	}
	n := uint64(len(grads))
	if n == 0 || n%4 != 0 || h.Dtype != wire.DtypeF32 {
		return Result{Status: wire.StatusBadOperand}
	}
	addrs := []uint64{h.Addr, h.Operand1}
	if params.Algo == wire.OptimAdam {
		addrs = append(addrs, h.Operand2)
	}
	for i, a := range addrs {
		if a%4 != 0 {
			return Result{Status: wire.StatusMisaligned}
		}
		if a < g.Base {
			return Result{Status: wire.StatusOutOfBounds}
		}
		if _, ok := span(int(g.Len), a-g.Base, 0, n); !ok {
			return Result{Status: wire.StatusOutOfBounds}
		}
		for _, b := range addrs[:i] {
			if a < b+n && b < a+n {
				return Result{Status: wire.StatusBadOperand}
			}
		}
	}
	mem := p.store.regions[p.key].mem
	par := mem[h.Addr : h.Addr+n]
	m := mem[h.Operand1 : h.Operand1+n]
	var v []byte
	if params.Algo == wire.OptimAdam {
		v = mem[h.Operand2 : h.Operand2+n]
	}
	optimStep(params, par, m, v, grads)
	return Result{}
}

// optimStep updates par (and the moments m, v) from grads, element by
// element, in float32.
func optimStep(o *wire.OptimParams, par, m, v, grads []byte) {
	f := func(b []byte, i int) float32 { return math.Float32frombits(le.Uint32(b[i:])) }
	put := func(b []byte, i int, x float32) { le.PutUint32(b[i:], math.Float32bits(x)) }
	switch o.Algo {
	case wire.OptimSGD:
		for i := 0; i < len(grads); i += 4 {
			pi := f(par, i)
			g := f(grads, i) + o.WeightDecay*pi
			mi := o.Beta1*f(m, i) + g
			put(m, i, mi)
			put(par, i, pi-o.LR*mi)
		}
	case wire.OptimAdam:
		c1 := 1 - float32(math.Pow(float64(o.Beta1), float64(o.Step)))
		c2 := 1 - float32(math.Pow(float64(o.Beta2), float64(o.Step)))
		for i := 0; i < len(grads); i += 4 {
			pi := f(par, i)
			g := f(grads, i) + o.WeightDecay*pi
			mi := o.Beta1*f(m, i) + (1-o.Beta1)*g
			vi := o.Beta2*f(v, i) + (1-o.Beta2)*g*g
			put(m, i, mi)
			put(v, i, vi)
			mh, vh := mi/c1, vi/c2
			put(par, i, pi-o.LR*mh/(float32(math.Sqrt(float64(vh)))+o.Eps))
		}
	}
}

// Replies remembers the results of mutating pool requests (WRITE, CAS,
// FETCHADD, VECTOR) by (client, request id), so that a retransmitted
// request is answered from memory instead of applied twice, and a late
// duplicate of an old write cannot overwrite newer data. It holds at most
// its capacity (about ReplyEntryBytes each), forgetting the oldest entries
// first, and drops entries older than its TTL as new ones arrive (the
// memory of a burst is given back as the cache drains). A client must give
// up on a request before the node can forget it: the client's retry
// horizon (its op timeout) must be shorter than the TTL, and Evicted
// counts entries pushed out early by the capacity bound (each one a window
// in which a duplicate could be applied again).
type Replies struct {
	ttl     time.Duration
	max     int
	ring    []replyKey // insertion (and so time) order; grows up to max
	head, n int
	m       map[replyKey]reply
	evicted uint64
}

// ReplyEntryBytes is the memory one Replies entry takes, in bytes (its key
// in the ring and in the map, its result and time, and the map's
// overhead), for sizing a cache by memory.
const ReplyEntryBytes = 160

type replyKey struct {
	client netip.AddrPort
	id     uint64
	hop    uint8
}

type reply struct {
	res Result // Status and Old only
	at  time.Time
}

// NewReplies returns a cache of at most capacity entries kept for ttl.
// Its memory grows with use, up to about capacity × ReplyEntryBytes.
func NewReplies(capacity int, ttl time.Duration) *Replies {
	return &Replies{ttl: ttl, max: max(capacity, 0), m: make(map[replyKey]reply)}
}

// Span is Len bytes of a memory node's lent memory from node-local
// offset Off.
type Span struct{ Off, Len uint64 }

// ReplyRecord is one remembered reply as a durable node keeps it on
// disk (package memnode/durable): whose request it answered (client
// address, request id, chain hop), the result's Status and Old, and
// when it was added. A node started again adds its records back
// (Replies.Restore), so that a request resent across the restart is
// answered, not applied again.
type ReplyRecord struct {
	Client netip.AddrPort
	ID     uint64
	Hop    uint8
	Status wire.Status
	Old    uint64
	At     time.Time
}

// Restore adds records (oldest first) with the times they carry: those
// older than the TTL at the next Lookup are not answered, and the
// capacity bound keeps the newest.
func (c *Replies) Restore(recs []ReplyRecord) {
	for _, r := range recs {
		c.Add(r.At, r.Client, r.ID, r.Hop, Result{Status: r.Status, Old: r.Old})
	}
}

// Mutating reports whether op changes memory (so its duplicates must not
// be applied again).
func Mutating(op wire.Opcode) bool {
	switch op {
	case wire.OpWrite, wire.OpCAS, wire.OpFetchAdd, wire.OpVector, wire.OpOptim:
		return true
	}
	return false
}

// Lookup returns the remembered result of client's request id (at chain
// hop hop; 0 for other requests).
func (c *Replies) Lookup(now time.Time, client netip.AddrPort, id uint64, hop uint8) (Result, bool) {
	r, ok := c.m[replyKey{client, id, hop}]
	if !ok || now.Sub(r.at) > c.ttl {
		return Result{}, false
	}
	return r.res, true
}

// Add remembers res (its Status and Old) for client's request id (at chain
// hop hop).
func (c *Replies) Add(now time.Time, client netip.AddrPort, id uint64, hop uint8, res Result) {
	if c.max == 0 {
		return
	}
	k := replyKey{client, id, hop}
	if _, ok := c.m[k]; ok {
		return
	}
	c.expire(now)
	if c.n == len(c.ring) && len(c.ring) < c.max {
		c.grow()
	}
	if c.n == len(c.ring) {
		old := c.ring[c.head]
		if r, ok := c.m[old]; ok && now.Sub(r.at) <= c.ttl {
			c.evicted++
		}
		c.pop()
	}
	c.ring[(c.head+c.n)%len(c.ring)] = k
	c.n++
	c.m[k] = reply{res: Result{Status: res.Status, Old: res.Old}, at: now}
}

// expire drops the oldest entries while they are older than the TTL.
func (c *Replies) expire(now time.Time) {
	for c.n > 0 {
		r, ok := c.m[c.ring[c.head]]
		if ok && now.Sub(r.at) <= c.ttl {
			return
		}
		c.pop()
	}
	if c.n == 0 && len(c.ring) > 64 {
		// Drained: give a burst's memory back.
		c.ring, c.head = nil, 0
		c.m = make(map[replyKey]reply)
	}
}

// pop forgets the oldest entry.
func (c *Replies) pop() {
	delete(c.m, c.ring[c.head])
	c.ring[c.head] = replyKey{}
	c.head = (c.head + 1) % len(c.ring)
	c.n--
}

// grow doubles the ring (up to max), keeping the entries in order.
func (c *Replies) grow() {
	nr := make([]replyKey, min(max(2*len(c.ring), 64), c.max))
	for i := range c.n {
		nr[i] = c.ring[(c.head+i)%len(c.ring)]
	}
	c.ring, c.head = nr, 0
}

// Bytes is about the memory the entries hold, in bytes.
func (c *Replies) Bytes() int { return len(c.m) * ReplyEntryBytes }

// Len is the number of entries held; Evicted the entries dropped by the
// capacity bound before their TTL ran out.
func (c *Replies) Len() int        { return len(c.m) }
func (c *Replies) Evicted() uint64 { return c.evicted }
