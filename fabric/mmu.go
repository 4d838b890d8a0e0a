package fabric

// The forwarding node's MMU: memory nodes register their capacity, pool
// regions are created on them (striped by a Layout), and pool accesses are
// translated to (memory node, local address) with the region's key and
// permissions checked. MMU is sans-I/O like the rest of the switch: no
// clock, no sockets, no goroutines; the caller serializes calls.

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/ndma/ndma/internal/detector"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
	"github.com/ndma/ndma/wire/poolmap"
)

// Limits of the MMU.
const (
	MaxPoolNodes   = ctrl.MaxPoolNodes   // what a POOLSTAT response can list
	MaxPoolRegions = ctrl.MaxPoolRegions // what a POOLSTAT response can list
	// poolAlign aligns every region's extent on a node.
	poolAlign = 64
)

// Errors of the MMU, besides the wire statuses (StatusBadKey for an
// unknown, freed or wrongly keyed region; StatusPermission; StatusOutOfBounds
// for an access outside the region) that its errors wrap.
var (
	ErrPoolNode = errors.New("fabric: pool: bad memory node")
)

// PoolNode is a memory node lending its memory to the pool: one region
// of Capacity bytes on the node, named by Key, that the MMU carves up.
type PoolNode struct {
	ID       int
	Addr     netip.AddrPort
	Key      uint64 // the node's region holding the pool's memory
	Capacity uint64
	Alive    bool
	free     []span // free extents, sorted by offset, coalesced
	used     uint64
	Name     string         // its credential's name (sealed fabrics; else empty)
	lastSeen time.Time      // the switch's last registration from it
	beats    detector.Beats // its registrations' rhythm: how long a silence means death
	// Requests and Bytes count the pool requests (and their payload
	// bytes) the switch forwarded to the node.
	Requests, Bytes uint64
	// Incarnation is the node's, from its registration: another one means
	// it restarted. Zero for a node known only from other nodes' reports
	// (a restarted switch's map names it; it has not registered yet).
	Incarnation uint64
	// reported: the node has reported the grants it holds to this switch
	// (its final ctrl.PoolReport). Until then it is not used (not Alive).
	reported bool
	// rejoin: the node restarted while this switch ran, keeping its
	// memory and grants (a durable node); until its report is complete,
	// current holds the copies it reported that are still current
	// (pool_rejoin.go). At most one entry per region column homed on it.
	rejoin  bool
	current map[poolColumn]bool
}

// poolColumn names one column of a region.
type poolColumn struct {
	region uint32
	column int
}

// placeholder reports whether the node is known only from the reports of
// other nodes: it has not registered with this switch.
func (n *PoolNode) placeholder() bool { return n.Key == 0 }

// reserve takes the extent [off, off+size) (rounded up to poolAlign) out
// of the node's free memory; a placeholder's memory grows to hold it. It
// reports false, taking nothing, if any of it is not free.
func (n *PoolNode) reserve(off, size uint64) bool {
	size = roundPool(size)
	if off%poolAlign != 0 || off+size < off {
		return false
	}
	if n.placeholder() && off+size > n.Capacity&^(poolAlign-1) {
		n.grow(off + size)
	}
	i, _ := slices.BinarySearchFunc(n.free, off+1, func(s span, off uint64) int { return cmp.Compare(s.off, off) })
	if i == 0 {
		return false
	}
	s := n.free[i-1] // the span starting at or before off
	if off+size > s.off+s.len {
		return false
	}
	var parts []span
	if off > s.off {
		parts = append(parts, span{s.off, off - s.off})
	}
	if end := off + size; end < s.off+s.len {
		parts = append(parts, span{end, s.off + s.len - end})
	}
	n.free = slices.Replace(n.free, i-1, i, parts...)
	n.used += size
	return true
}

// Used is the bytes of the node given to regions.
func (n *PoolNode) Used() uint64 { return n.used }

type span struct{ off, len uint64 }

// roundPool is the node memory an extent of size bytes takes: whole
// poolAlign units, at least one.
func roundPool(size uint64) uint64 { return max(poolAlign, (size+poolAlign-1)&^(poolAlign-1)) }

// alloc takes size bytes (rounded up to poolAlign) first fit.
func (n *PoolNode) alloc(size uint64) (uint64, bool) {
	size = roundPool(size)
	for i, s := range n.free {
		if s.len >= size {
			off := s.off
			if s.len == size {
				n.free = slices.Delete(n.free, i, i+1)
			} else {
				n.free[i] = span{s.off + size, s.len - size}
			}
			n.used += size
			return off, true
		}
	}
	return 0, false
}

// grow extends the node's memory to capacity bytes (not less than now).
func (n *PoolNode) grow(capacity uint64) {
	old, end := n.Capacity&^(poolAlign-1), capacity&^(poolAlign-1)
	n.Capacity = capacity
	if end <= old {
		return
	}
	if k := len(n.free); k > 0 && n.free[k-1].off+n.free[k-1].len == old {
		n.free[k-1].len += end - old
	} else {
		n.free = append(n.free, span{old, end - old})
	}
}

// release gives [off, off+size) back, coalescing with its neighbours.
func (n *PoolNode) release(off, size uint64) {
	size = roundPool(size)
	n.used -= size
	i, _ := slices.BinarySearchFunc(n.free, off, func(s span, off uint64) int { return cmp.Compare(s.off, off) })
	n.free = slices.Insert(n.free, i, span{off, size})
	if i+1 < len(n.free) && n.free[i].off+n.free[i].len == n.free[i+1].off {
		n.free[i].len += n.free[i+1].len
		n.free = slices.Delete(n.free, i+1, i+2)
	}
	if i > 0 && n.free[i-1].off+n.free[i-1].len == n.free[i].off {
		n.free[i-1].len += n.free[i].len
		n.free = slices.Delete(n.free, i, i+1)
	}
}

// PoolRegion is one region of the pool.
type PoolRegion struct {
	ID     uint32
	Key    uint64 // capability: every access must carry it
	Perm   wire.Perm
	Layout poolmap.Layout
	// Homes[c] is the memory node of column c and the offset of the
	// region's extent within that node's pool memory.
	Homes []Home
	// Ready is set by the switch once every home has scrubbed and
	// accepted its grant; accesses before that are refused.
	Ready bool
	// Lost[c] is set when column c's node restarted, or was dead when a
	// write went to the region's other copy: its copy is gone or stale.
	// Rebuilding[c] is set while a lost copy is being rebuilt: writes go
	// to it too, reads do not.
	Lost, Rebuilding []bool
	rebuildRetry     []time.Time // per column: no new rebuild before (nil: none failed)

	// Epoch orders the region's copies: the switch raises it whenever a
	// copy misses writes or is rebuilt, and tells the intact copies'
	// nodes, so that a restarted switch rebuilding its map from the
	// nodes' reports tells a current copy from a stale one.
	Epoch uint64
	// digest is ctrl.PoolKeyDigest of the key; a region rebuilt from reports
	// has Key 0 until a request carrying a key that matches it.
	digest [ctrl.PoolDigestLen]byte
	// Of a region rebuilt from reports: unconfirmed[c] while column c's
	// node has not reported it (nil when every column is settled), and
	// the best (epoch, degraded) a column reported.
	unconfirmed  []bool
	best         reportRank
	reportedLost bool // EventRegionLost was logged
	// fences is the region's fences (pool_fence.go): id → highest token
	// raised; at most wire.MaxFences.
	fences map[uint32]uint64
}

// Home is where one column of a region lives.
type Home struct {
	Node *PoolNode
	Base uint64 // offset of the region's extent in the node's pool memory
}

// Target is one translated piece of a pool access: Len bytes at region
// offset Off are at Addr of region Key on memory node Node.
type Target struct {
	Off     uint64
	Len     uint64
	Node    *PoolNode
	Key     uint64 // the node's pool region
	Addr    uint64 // offset in that region
	Replica int
	Column  int
	Lost    bool // the node restarted since, or missed a write: this copy is gone
	// Rebuilding: a lost copy being rebuilt (a write target, not a read
	// source).
	Rebuilding bool
}

// MMU is the pool's memory manager.
type MMU struct {
	nodes    []*PoolNode // by ID
	maxNodes int         // SetNodeLimit; MaxPoolNodes by default
	byAddr   map[netip.AddrPort]*PoolNode
	regions  map[uint32]*PoolRegion
	nextID   uint32
	// firstCreated is the first region id Create gave out (0: none yet):
	// a region from a report with an id at or above it, which the MMU
	// does not have, was freed since.
	firstCreated uint32
	newKey       func() uint64
	ext          []poolmap.Extent // scratch for Translate
	// dirty is the regions changed since the switch last wrote them to
	// its store (pool_store.go); nil without a store. At most the
	// regions and the ones freed since the last Poll.
	dirty map[uint32]bool
}

// NewMMU returns an empty MMU; newKey draws region keys (random and
// non-zero: they are capabilities).
func NewMMU(newKey func() uint64) *MMU {
	return &MMU{byAddr: make(map[netip.AddrPort]*PoolNode), regions: make(map[uint32]*PoolRegion), newKey: newKey, maxNodes: MaxPoolNodes}
}

// SetNodeLimit bounds the node table to n nodes (1..MaxPoolNodes).
func (m *MMU) SetNodeLimit(n int) { m.maxNodes = max(1, min(n, MaxPoolNodes)) }

// Forget removes node n from the table if it holds no region copies (and
// so no region refers to it); it reports whether it did. Its id may be
// given to a later node.
func (m *MMU) Forget(n *PoolNode) bool {
	if n.used > 0 || m.byAddr[n.Addr] != n {
		return false
	}
	delete(m.byAddr, n.Addr)
	i, _ := slices.BinarySearchFunc(m.nodes, n.ID, func(x *PoolNode, id int) int { return cmp.Compare(x.ID, id) })
	m.nodes = slices.Delete(m.nodes, i, i+1)
	return true
}

// evictable returns the dead node holding no region copies that was seen
// last longest ago, or nil.
func (m *MMU) evictable() *PoolNode {
	var best *PoolNode
	for _, n := range m.nodes {
		if !n.Alive && n.used == 0 && (best == nil || n.lastSeen.Before(best.lastSeen)) {
			best = n
		}
	}
	return best
}

// AddNode registers a memory node offering capacity bytes of its region
// key, in its incarnation inc. A node registering again from the same
// address in the same incarnation must offer the same region and capacity
// while regions use it. If it comes back in another incarnation (it
// restarted: its memory is new) the regions' copies on it are marked
// lost, never served again; it may then lend another region (a new key)
// and more memory, but not less than its regions' extents reach.
func (m *MMU) AddNode(addr netip.AddrPort, key, capacity, inc uint64) (*PoolNode, error) {
	return m.addNode(addr, key, capacity, inc, false)
}

// addNode is AddNode; kept: a restarted node kept its memory and grants
// (a durable node), so its copies are not marked lost here (its report
// settles them: pool_rejoin.go).
func (m *MMU) addNode(addr netip.AddrPort, key, capacity, inc uint64, kept bool) (*PoolNode, error) {
	if !addr.IsValid() || capacity == 0 || key == 0 {
		return nil, fmt.Errorf("%w: address %v, %s, capacity %d", ErrPoolNode, addr, keyState(key), capacity)
	}
	if n := m.byAddr[addr]; n != nil && n.placeholder() {
		// Named by other nodes' reports: the extents reserved on it must
		// fit what it lends.
		if capacity&^(poolAlign-1) < n.Capacity&^(poolAlign-1) {
			return nil, fmt.Errorf("%w: %v lends %d bytes, less than the %d its regions' extents reach", ErrPoolNode, addr, capacity, n.Capacity)
		}
		n.Key, n.Incarnation, n.Alive = key, inc, true
		n.grow(capacity)
		return n, nil
	} else if n != nil {
		restarted := n.Incarnation != inc
		switch {
		case n.used > 0 && !restarted && (n.Key != key || n.Capacity != capacity):
			return nil, fmt.Errorf("%w: %v registered again with another region while regions use it", ErrPoolNode, addr)
		case n.used > 0 && capacity&^(poolAlign-1) < n.Capacity&^(poolAlign-1):
			return nil, fmt.Errorf("%w: %v restarted with %d bytes, less than the %d its regions' extents reach", ErrPoolNode, addr, capacity, n.Capacity)
		}
		if restarted {
			if !kept {
				m.nodeRestarted(n)
			}
			n.Incarnation = inc
			if n.used > 0 {
				n.Key = key
				n.grow(capacity)
			}
		}
		if n.used == 0 {
			n.Key, n.Capacity, n.free = key, capacity, []span{{0, capacity &^ (poolAlign - 1)}}
		}
		n.Alive = true
		return n, nil
	}
	if len(m.nodes) >= m.maxNodes {
		// Make room by forgetting a dead node that holds nothing; nodes
		// holding copies are never pushed out.
		if old := m.evictable(); old == nil || !m.Forget(old) {
			return nil, fmt.Errorf("%w: %d memory nodes, none of them dead and empty", ErrPoolNode, len(m.nodes))
		}
	}
	// The smallest free id; nodes stay sorted by id.
	id := len(m.nodes)
	for i, x := range m.nodes {
		if x.ID != i {
			id = i
			break
		}
	}
	n := &PoolNode{ID: id, Addr: addr, Key: key, Capacity: capacity, Alive: true, Incarnation: inc,
		free: []span{{0, capacity &^ (poolAlign - 1)}}}
	m.nodes = slices.Insert(m.nodes, id, n)
	m.byAddr[addr] = n
	return n, nil
}

// nodeRestarted marks every region's copy on n lost.
func (m *MMU) nodeRestarted(n *PoolNode) {
	for _, r := range m.regions {
		for c, h := range r.Homes {
			if h.Node == n {
				r.Lost[c], r.Rebuilding[c] = true, false
				m.touch(r.ID)
			}
		}
	}
}

// nodeFor returns the node at addr, adding a placeholder (dead, no
// memory yet) for an address no node registered from.
func (m *MMU) nodeFor(addr netip.AddrPort) (*PoolNode, error) {
	if n := m.byAddr[addr]; n != nil {
		return n, nil
	}
	if !addr.IsValid() {
		return nil, fmt.Errorf("%w: address %v", ErrPoolNode, addr)
	}
	if len(m.nodes) >= m.maxNodes {
		if old := m.evictable(); old == nil || !m.Forget(old) {
			return nil, fmt.Errorf("%w: %d memory nodes, none of them dead and empty", ErrPoolNode, len(m.nodes))
		}
	}
	id := len(m.nodes)
	for i, x := range m.nodes {
		if x.ID != i {
			id = i
			break
		}
	}
	n := &PoolNode{ID: id, Addr: addr}
	m.nodes = slices.Insert(m.nodes, id, n)
	m.byAddr[addr] = n
	return n, nil
}

// NodeAt returns the node registered from addr, or nil.
func (m *MMU) NodeAt(addr netip.AddrPort) *PoolNode { return m.byAddr[addr] }

// Nodes returns the registered memory nodes, by id.
func (m *MMU) Nodes() []*PoolNode { return m.nodes }

// SetAlive marks a memory node alive or dead (heartbeats).
func (m *MMU) SetAlive(n *PoolNode, alive bool) { n.Alive = alive }

// ShortError is a refused Create that the pool could not hold:
// ctrl.ErrNoNodes (Need memory nodes, Have alive) or ctrl.ErrNoSpace (Need
// bytes, Have free on the nodes it would use). errors.Is(err,
// ctrl.ErrNoNodes/ctrl.ErrNoSpace) is true.
type ShortError struct {
	Err        error
	Need, Have uint64
}

func (e *ShortError) Error() string {
	if e.Err == ctrl.ErrNoNodes {
		return fmt.Sprintf("%v: need %d, %d alive", e.Err, e.Need, e.Have)
	}
	return fmt.Sprintf("%v: need %d bytes, %d free", e.Err, e.Need, e.Have)
}

// Unwrap returns ctrl.ErrNoNodes or ctrl.ErrNoSpace.
func (e *ShortError) Unwrap() error { return e.Err }

// Operand encodes the refusal for a POOLCREATE answer's Operand1: the
// kind in the top byte (1 nodes, 2 bytes), Need and Have below it.
func (e *ShortError) Operand() uint64 {
	if e.Err == ctrl.ErrNoNodes {
		return 1<<56 | min(e.Need, 1<<16-1)<<16 | min(e.Have, 1<<16-1)
	}
	return 2<<56 | min(e.Have, 1<<56-1) // the request's size the client knows
}

// Create makes a region of size bytes striped by stripe over columns live
// memory nodes (0: all of them, the default spreading, but no more than
// the region has stripes), with replicas copies of every stripe and
// permissions perm. Columns are the live nodes with the most free memory,
// in id order among equals. Create does not clear the nodes' memory: the
// driver that sends the MMU's accesses must scrub a region's extents
// (zero them on the nodes) before they are given out again, so no region
// reads another's old data.
func (m *MMU) Create(size, stripe uint64, columns, replicas int, perm wire.Perm) (*PoolRegion, error) {
	if len(m.regions) >= MaxPoolRegions {
		return nil, fmt.Errorf("%w: %d regions", ctrl.ErrNoSpace, len(m.regions))
	}
	if perm == 0 || perm&^wire.PermAll != 0 {
		return nil, fmt.Errorf("%w: permissions %v", poolmap.ErrLayout, perm)
	}
	var live []*PoolNode
	for _, n := range m.nodes {
		if n.Alive {
			live = append(live, n)
		}
	}
	if columns == 0 {
		// Spread over every live node, but give none an empty column.
		columns = len(live)
		if stripe > 0 {
			columns = min(columns, max(int(min((size+stripe-1)/stripe, poolmap.MaxColumns)), replicas))
		}
	}
	if want := max(columns, replicas, 1); want > len(live) {
		return nil, &ShortError{Err: ctrl.ErrNoNodes, Need: uint64(want), Have: uint64(len(live))}
	}
	l, err := poolmap.NewLayout(size, stripe, columns, replicas)
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(live, func(a, b *PoolNode) int {
		return cmp.Compare(b.Capacity-b.used, a.Capacity-a.used)
	})
	live = live[:columns]
	slices.SortFunc(live, func(a, b *PoolNode) int { return cmp.Compare(a.ID, b.ID) })
	r := &PoolRegion{Perm: perm, Layout: l, Homes: make([]Home, columns), Lost: make([]bool, columns), Rebuilding: make([]bool, columns)}
	for c, n := range live {
		off, ok := n.alloc(l.ColumnBytes(c))
		if !ok {
			for k := range c {
				r.Homes[k].Node.release(r.Homes[k].Base, l.ColumnBytes(k))
			}
			var free uint64
			for _, n := range live {
				free += n.Capacity - n.used
			}
			return nil, &ShortError{Err: ctrl.ErrNoSpace, Need: l.ColumnBytes(c) * uint64(columns), Have: free}
		}
		r.Homes[c] = Home{Node: n, Base: off}
	}
	for {
		m.nextID++
		if m.nextID != 0 && m.regions[m.nextID] == nil {
			break
		}
	}
	r.ID = m.nextID
	if m.firstCreated == 0 {
		m.firstCreated = r.ID
	}
	for r.Key == 0 {
		r.Key = m.newKey()
	}
	r.Epoch, r.digest = 1, ctrl.PoolKeyDigest(r.ID, r.Key)
	m.regions[r.ID] = r
	return r, nil
}

// Region returns region id if key opens it.
func (m *MMU) Region(id uint32, key uint64) (*PoolRegion, error) {
	r := m.regions[id]
	switch {
	case r == nil:
		return nil, fmt.Errorf("%w: pool region %d", wire.StatusBadKey, id)
	case r.Key == 0:
		// Rebuilt from reports: the first key that matches the
		// digest is the key.
		if key == 0 || ctrl.PoolKeyDigest(id, key) != r.digest {
			return nil, fmt.Errorf("%w: pool region %d", wire.StatusBadKey, id)
		}
		r.Key = key
		m.touch(id)
	case r.Key != key:
		return nil, fmt.Errorf("%w: pool region %d", wire.StatusBadKey, id)
	}
	return r, nil
}

// Regions returns every region, by id.
func (m *MMU) Regions() []*PoolRegion {
	out := make([]*PoolRegion, 0, len(m.regions))
	for _, r := range m.regions {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *PoolRegion) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Free removes region id (key must open it) and returns its memory to the
// nodes. Accesses with its key fail from then on.
func (m *MMU) Free(id uint32, key uint64) error {
	r, err := m.Region(id, key)
	if err != nil {
		return err
	}
	for c, h := range r.Homes {
		h.Node.release(h.Base, r.Layout.ColumnBytes(c))
	}
	delete(m.regions, id)
	m.touch(id)
	return nil
}

// Translate checks an access of n bytes at offset off of region id with
// key and op's permission, and appends its pieces for copy replica to
// dst: where each one lives on which memory node.
func (m *MMU) Translate(id uint32, key uint64, need wire.Perm, off, n uint64, replica int, dst []Target) ([]Target, error) {
	r, err := m.Region(id, key)
	if err != nil {
		return dst, err
	}
	if r.Perm&need != need {
		return dst, fmt.Errorf("%w: pool region %d is %v", wire.StatusPermission, id, r.Perm)
	}
	if off > r.Layout.Size || n > r.Layout.Size-off {
		return dst, fmt.Errorf("%w: [%d, +%d) outside pool region %d's %d bytes", wire.StatusOutOfBounds, off, n, id, r.Layout.Size)
	}
	m.ext, err = r.Layout.Extents(off, n, replica, m.ext[:0])
	if err != nil {
		return dst, err
	}
	for _, e := range m.ext {
		h := r.Homes[e.Column]
		dst = append(dst, Target{Off: e.Off, Len: e.Len, Node: h.Node, Key: h.Node.Key, Addr: h.Base + e.Local, Replica: e.Replica, Column: e.Column, Lost: r.Lost[e.Column], Rebuilding: r.Rebuilding[e.Column]})
	}
	return dst, nil
}

// keyState describes a region key in an error without showing it (a key
// is a capability): whether it is zero.
func keyState(key uint64) string {
	if key == 0 {
		return "key zero"
	}
	return "key set"
}
