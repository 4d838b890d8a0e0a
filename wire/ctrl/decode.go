package ctrl

import (
	"encoding/binary"
	"net/netip"
	"slices"

	"github.com/ndma/ndma/wire"
)

// Parse decodes the type, flags and fields in b (a message without its
// tag: secure.ParseCtrl checks and strips the tag first) into m. An
// unknown type or flag, a count or value out of range, a truncated field
// or trailing bytes are an error wrapping ErrMalformed.
//
// m's slices (and the Replicas of its Ranges) are reused up to their
// capacity and its strings are kept when the names are equal, so parsing
// into the same Msg repeatedly does not allocate; a caller that keeps any
// of them across calls must copy them first. On error m's contents are
// unspecified. Parse never panics and does not retain b.
func Parse(b []byte, m *Msg) error {
	return m.decode(b)
}

// reader consumes fields from the front of b. The first failure sets err
// and every later read returns zero values.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int, what string) ([]byte, bool) {
	if r.err != nil {
		return nil, false
	}
	if len(r.b) < n {
		r.err = malformedf("truncated in %s", what)
		return nil, false
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s, true
}

func (r *reader) u8(what string) uint8 {
	if s, ok := r.take(1, what); ok {
		return s[0]
	}
	return 0
}

func (r *reader) u16(what string) uint16 {
	if s, ok := r.take(2, what); ok {
		return binary.BigEndian.Uint16(s)
	}
	return 0
}

func (r *reader) u32(what string) uint32 {
	if s, ok := r.take(4, what); ok {
		return binary.BigEndian.Uint32(s)
	}
	return 0
}

func (r *reader) u64(what string) uint64 {
	if s, ok := r.take(8, what); ok {
		return binary.BigEndian.Uint64(s)
	}
	return 0
}

// name reads a name field; it returns old, without allocating, when the
// bytes equal it.
func (r *reader) name(what, old string) string {
	n := int(r.u8(what))
	if r.err != nil {
		return ""
	}
	if n < 1 || n > MaxName {
		r.err = malformedf("%s name of %d bytes not in 1..%d", what, n, MaxName)
		return ""
	}
	s, ok := r.take(n, what)
	if !ok {
		return ""
	}
	if string(s) == old {
		return old
	}
	return string(s)
}

// rank reads a rank field and checks it is RankAny or below limit.
func (r *reader) rank(limit int) int {
	v := r.u16("rank")
	if r.err != nil {
		return 0
	}
	if v == rankAnyWire {
		return RankAny
	}
	if int(v) >= limit {
		r.err = malformedf("rank %d not in 0..%d", v, limit-1)
	}
	return int(v)
}

// mtu reads the MTU field of a Join, Register or Lookup request and
// checks its range.
func (r *reader) mtu() int {
	v := int(r.u16("mtu"))
	if r.err == nil {
		r.err = validateMTU(v)
	}
	return v
}

// count reads a list count, checks it against limit and that the rest of
// the message can hold that many items of at least minItem bytes, so that
// no allocation exceeds what the input justifies.
func (r *reader) count(what string, limit, minItem int) int {
	n := int(r.u16(what))
	if r.err != nil {
		return 0
	}
	if n > limit {
		r.err = malformedf("%d %s > %d", n, what, limit)
		return 0
	}
	if n*minItem > len(r.b) {
		r.err = malformedf("truncated in %s", what)
		return 0
	}
	return n
}

// minMember is the encoded size of an IPv4 member entry.
const minMember = 2 + 1 + 4 + 2

func (r *reader) members(dst []MemberInfo) []MemberInfo {
	n := r.count("members", MaxMembers, minMember)
	dst = slices.Grow(dst[:0], n)
	for range n {
		id, ap := r.member()
		if r.err != nil {
			return dst
		}
		dst = append(dst, MemberInfo{ID: id, Addr: ap})
	}
	return dst
}

// member reads one member entry.
func (r *reader) member() (uint16, netip.AddrPort) {
	id := r.u16("member")
	var addr netip.Addr
	switch fam := r.u8("member"); fam {
	case 4:
		if s, ok := r.take(4, "member"); ok {
			addr = netip.AddrFrom4([4]byte(s))
		}
	case 6:
		if s, ok := r.take(16, "member"); ok {
			addr = netip.AddrFrom16([16]byte(s))
		}
	default:
		if r.err == nil {
			r.err = malformedf("member %d: address family %d", id, fam)
		}
	}
	port := r.u16("member")
	return id, netip.AddrPortFrom(addr, port)
}

// pool reads a pool shape and checks it (request: Columns may be 0).
func (r *reader) pool(p *PoolSpec, request bool) {
	p.Size = r.u64("pool")
	p.Stripe = r.u64("pool")
	p.Columns = int(r.u16("pool"))
	p.Replicas = int(r.u8("pool"))
	p.Perm = r.u8("pool")
	if r.err == nil {
		r.err = validatePool(p, request)
	}
}

// minPoolNode and minPoolRegion are the encoded sizes of a pool
// node (IPv4) and of a pool region entry.
const (
	minPoolNode   = minMember + 8 + 8 + 1 + 8 + 8 + 1
	minPoolRegion = 4 + 8 + 8 + 2 + 1 + 1 + 2 + 2 + 2 + 1
	// minHome is an IPv4 home, minReport a report entry with one.
	minHome   = minMember + 8
	minReport = 4 + 2 + 20 + 8 + 8 + 8 + PoolDigestLen + 8 + 1 + 1 + minHome + 2
)

// fences reads a region's fences (the caller validates them).
func (r *reader) fences() []wire.Fence {
	n := r.count("fences", wire.MaxFences, wire.FenceLen)
	if n == 0 {
		return nil
	}
	fs := make([]wire.Fence, 0, n)
	for range n {
		id, token := r.u32("fence"), r.u64("fence")
		if r.err != nil {
			break
		}
		fs = append(fs, wire.Fence{ID: id, Token: token})
	}
	return fs
}

// bool reads a 0 or 1 byte.
func (r *reader) bool(what string) bool {
	v := r.u8(what)
	if r.err == nil && v > 1 {
		r.err = malformedf("%s: %d is not a boolean", what, v)
	}
	return v == 1
}

// homes reads columns homes (checked by the caller's validate); the
// count must fit in what is left of the message.
func (r *reader) homes(dst []PoolHome, columns int) []PoolHome {
	if r.err != nil {
		return dst
	}
	if columns*minHome > len(r.b) {
		r.err = malformedf("truncated in homes")
		return dst
	}
	dst = slices.Grow(dst[:0], columns)
	for range columns {
		_, ap := r.member()
		base := r.u64("home")
		if r.err != nil {
			return dst
		}
		dst = append(dst, PoolHome{Addr: ap, Base: base})
	}
	return dst
}

// minRange is the encoded size of a range without replicas.
const minRange = 8 + 8 + 4 + 1

func (r *reader) ranges(dst []Range) []Range {
	n := r.count("ranges", MaxRanges, minRange)
	if cap(dst) < n {
		dst = make([]Range, 0, n)
	}
	// Reslicing within the capacity keeps the old elements' Replicas
	// arrays for reuse.
	dst = dst[:n]
	for i := range dst {
		x := &dst[i]
		x.Start = r.u64("range")
		x.End = r.u64("range")
		x.Owner = int32(r.u32("range"))
		k := int(r.u8("range"))
		if r.err == nil && k > MaxReplicas {
			r.err = malformedf("range %d: %d replicas > %d", i, k, MaxReplicas)
		}
		if r.err != nil {
			return dst[:i]
		}
		if len(r.b) < 4*k {
			r.err = malformedf("truncated in range")
			return dst[:i]
		}
		reps := slices.Grow(x.Replicas[:0], k)
		for range k {
			reps = append(reps, int32(r.u32("range")))
		}
		x.Replicas = reps
	}
	return dst
}

// decode parses the type, flags and fields in b (the message without its
// tag) into m: the header here, the fields by decodeGroup or decodePool.
func (m *Msg) decode(b []byte) error {
	if len(b) < 2 {
		return malformedf("%d bytes before the tag, need at least 2", len(b))
	}
	typ, flags := Type(b[0]), b[1]
	if typ < Join || typ > lastType || typeNames[typ] == "" {
		return malformedf("unknown type %d", uint8(typ))
	}
	if flags&^flagResp != 0 {
		return malformedf("unknown flags 0x%02x", flags)
	}
	job, service := m.Job, m.Service
	*m = Msg{
		Type:        typ,
		Resp:        flags&flagResp != 0,
		Ranges:      m.Ranges[:0],
		Members:     m.Members[:0],
		Dead:        m.Dead[:0],
		Joined:      m.Joined[:0],
		PoolNodes:   m.PoolNodes[:0],
		PoolRegions: m.PoolRegions[:0],
	}
	r := reader{b: b[2:]}
	if typ.pool() {
		m.decodePool(&r)
	} else {
		m.decodeGroup(&r, job, service)
	}
	if r.err != nil {
		return r.err
	}
	if len(r.b) != 0 {
		return malformedf("%d trailing bytes after %v fields", len(r.b), typ)
	}
	return nil
}

// decodeGroup reads the fields of a group or service message (Join,
// Leave, Destroy, Heartbeat, Register, Lookup, JoinStatus) into m, whose
// header decode has set; job and service are m's names before decode
// reset it, kept when the message names them again.
func (m *Msg) decodeGroup(r *reader, job, service string) {
	typ := m.Type
	switch {
	case (typ == Join || typ == JoinVia) && !m.Resp:
		m.Job = r.name("job", job)
		m.Size = int(r.u16("size"))
		if r.err == nil && (m.Size < 1 || m.Size > MaxSize) {
			r.err = malformedf("job size %d not in 1..%d", m.Size, MaxSize)
		}
		m.Rank = r.rank(m.Size)
		m.MTU = r.mtu()
		if typ == JoinVia {
			m.Members = r.members(m.Members)
			if r.err == nil {
				r.err = validateJoinVia(m)
			}
		}
	case typ == Join || typ == JoinVia:
		m.Group = r.u32("group")
		m.Member = r.u16("member")
		m.Epoch = r.u64("epoch")
		m.Members = r.members(m.Members)
	case typ == Leave && !m.Resp, typ == Heartbeat && !m.Resp, typ == MemberGone && !m.Resp:
		m.Group = r.u32("group")
		m.Member = r.u16("member")
	case typ == Destroy && !m.Resp:
		m.Group = r.u32("group")
	case typ == Heartbeat && m.Resp:
		m.Epoch = r.u64("epoch")
		n := r.count("dead members", MaxMembers, 2)
		dead := slices.Grow(m.Dead, n)
		for range n {
			dead = append(dead, r.u16("dead members"))
		}
		m.Dead = dead
	case typ == Register && !m.Resp:
		m.Service = r.name("service", service)
		m.Policy = r.u8("policy")
		m.Size = int(r.u16("size"))
		if r.err == nil && (m.Size < 1 || m.Size > MaxSize) {
			r.err = malformedf("size %d not in 1..%d", m.Size, MaxSize)
		}
		m.Rank = r.rank(m.Size)
		m.Ranges = r.ranges(m.Ranges)
		m.MTU = r.mtu()
	case typ == Register:
		m.Group = r.u32("group")
		m.Member = r.u16("member")
	case typ == Lookup && !m.Resp:
		m.Service = r.name("service", service)
		m.MTU = r.mtu()
	case typ == Lookup:
		m.Group = r.u32("group")
		m.Members = r.members(m.Members)
	case typ == JoinStatus && !m.Resp:
		m.Job = r.name("job", job)
	case typ == JoinStatus:
		m.Size = int(r.u16("size"))
		if r.err == nil && m.Size > MaxSize {
			r.err = malformedf("job size %d not in 0..%d", m.Size, MaxSize)
		}
		if set, ok := r.take((m.Size+7)/8, "joined ranks"); ok {
			m.Joined = append(m.Joined, set...)
			r.err = validateRanks(m.Size, m.Joined)
		}
	}
}

// decodePool reads the fields of a pool message into m, whose header
// decode has set.
func (m *Msg) decodePool(r *reader) {
	typ := m.Type
	switch {
	case typ == PoolNode && !m.Resp:
		m.Key = r.u64("key")
		m.Capacity = r.u64("capacity")
		m.Epoch = r.u64("incarnation")
		m.Kept = r.bool("kept")
		if r.err == nil && m.Key == 0 {
			r.err = malformedf("pool node: %s: want a non-zero key", keyState(m.Key))
		}
	case typ == PoolNode:
		m.Node = r.u16("node")
		m.Epoch = r.u64("incarnation")
	case typ == PoolCreate && !m.Resp:
		r.pool(&m.Pool, true)
	case typ == PoolCreate:
		m.Region = r.u32("region")
		m.Key = r.u64("key")
		r.pool(&m.Pool, false)
	case typ == PoolOpen && !m.Resp, typ == PoolFree && !m.Resp, typ == PoolRevoke && !m.Resp:
		m.Region = r.u32("region")
		m.Key = r.u64("key")
	case (typ == PoolRebuildGo || typ == PoolRebuilt || typ.column()) && !m.Resp:
		m.Region = r.u32("region")
		m.Key = r.u64("key")
		m.Node = r.u16("column")
		if typ == PoolRebuilt {
			switch f := r.u8("failed"); f {
			case 0, 1:
				m.Failed = f == 1
			default:
				if r.err == nil {
					r.err = malformedf("pool rebuilt: failed %d", f)
				}
			}
		}
	case (typ == PoolRebuild || typ == PoolGrant) && !m.Resp:
		m.Region = r.u32("region")
		m.Key = r.u64("key")
		r.pool(&m.Pool, false)
		m.Base = r.u64("base")
		m.Length = r.u64("length")
		m.Node = r.u16("column")
		m.Epoch = r.u64("epoch")
		m.Homes = r.homes(nil, m.Pool.Columns)
		m.Fences = r.fences()
		if r.err == nil {
			r.err = m.validate()
		}
	case typ == PoolEpoch && !m.Resp:
		m.Region = r.u32("region")
		m.Key = r.u64("key")
		m.Epoch = r.u64("epoch")
		if r.err == nil {
			r.err = m.validate()
		}
	case typ == PoolReport && !m.Resp:
		m.Final = r.bool("final")
		m.Reports = r.reports()
	case typ == PoolOpen:
		r.pool(&m.Pool, false)
	case typ == PoolStat && m.Resp:
		m.PoolNodes = r.poolNodes(m.PoolNodes)
		m.PoolRegions = r.poolRegions(m.PoolRegions)
		m.PoolRefused = r.u64("pool refused")
	}
}

// reports reads the entries of a PoolReport request, each checked.
func (r *reader) reports() []GrantReport {
	n := r.count("reports", MaxReports, minReport)
	reps := make([]GrantReport, 0, n)
	for range n {
		var p GrantReport
		p.Region = r.u32("report")
		p.Column = r.u16("report")
		r.pool(&p.Pool, false)
		p.Base = r.u64("report")
		p.Length = r.u64("report")
		p.Epoch = r.u64("report")
		if s, ok := r.take(PoolDigestLen, "report"); ok {
			p.Digest = [PoolDigestLen]byte(s)
		}
		p.Key = r.u64("report")
		p.Rebuilding = r.bool("report")
		p.Degraded = r.bool("report")
		p.Homes = r.homes(nil, p.Pool.Columns)
		p.Fences = r.fences()
		if r.err == nil {
			r.err = p.validate()
		}
		if r.err != nil {
			break
		}
		reps = append(reps, p)
	}
	return reps
}

// poolNodes reads the memory node list of a PoolStat response into dst.
func (r *reader) poolNodes(dst []PoolNodeInfo) []PoolNodeInfo {
	n := r.count("pool nodes", MaxPoolNodes, minPoolNode)
	nodes := slices.Grow(dst, n)
	for range n {
		id, ap := r.member()
		info := PoolNodeInfo{ID: id, Addr: ap, Capacity: r.u64("pool node"), Used: r.u64("pool node")}
		switch alive := r.u8("pool node"); alive {
		case 0, 1:
			info.Alive = alive == 1
		default:
			if r.err == nil {
				r.err = malformedf("pool node %d: alive %d", id, alive)
			}
		}
		info.Requests, info.Bytes = r.u64("pool node"), r.u64("pool node")
		if l := int(r.u8("pool node")); r.err == nil && l > MaxName {
			r.err = malformedf("pool node %d: name of %d bytes (max %d)", id, l, MaxName)
		} else if s, ok := r.take(l, "pool node name"); ok {
			info.Name = string(s)
		}
		if r.err != nil {
			break
		}
		nodes = append(nodes, info)
	}
	return nodes
}

// poolRegions reads the region list of a PoolStat response into dst.
func (r *reader) poolRegions(dst []PoolSpec) []PoolSpec {
	k := r.count("pool regions", MaxPoolRegions, minPoolRegion)
	regs := slices.Grow(dst, k)
	for range k {
		var p PoolSpec
		p.Region = r.u32("pool region")
		r.pool(&p, false)
		p.Lost, p.Rebuilding = int(r.u16("pool region")), int(r.u16("pool region"))
		p.Down, p.Health = int(r.u16("pool region")), PoolHealth(r.u8("pool region"))
		if r.err == nil && (p.Lost > p.Columns || p.Rebuilding > p.Lost || p.Down > p.Columns || p.Health > HealthLost) {
			r.err = malformedf("pool region %d: %d lost, %d rebuilding, %d down of %d columns, health %d", p.Region, p.Lost, p.Rebuilding, p.Down, p.Columns, p.Health)
		}
		if r.err != nil {
			break
		}
		regs = append(regs, p)
	}
	return regs
}
