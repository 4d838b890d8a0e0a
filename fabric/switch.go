package fabric

import (
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	"github.com/ndma/ndma/internal/detector"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// Stats counts what the switch did.
type Stats struct {
	Transport transport.Stats
	Pool      PoolStats

	Received, Malformed, Spoofed, NoGroup uint64
	// Per mode: packets in and datagrams out.
	UnicastIn, UnicastOut           uint64
	MulticastIn, MulticastOut       uint64
	MulticastAcksIn, MergedAcksOut  uint64
	AggregateIn, AggregateOut       uint64
	AnycastIn, AnycastOut           uint64
	PoolIn, PoolOut, PoolRefused    uint64
	PoolRebuilt, PoolRebuildsFailed uint64 // lost copies rebuilt; rebuilds that failed (tried again)
	// PoolFenced counts the fenced pool requests refused (counted in
	// PoolRefused too): a token below the fence's, or a fence never raised.
	PoolFenced uint64
	// The pool map rebuilt from the memory nodes' reports: regions
	// rebuilt, copies confirmed, report entries refused (stale or
	// contradicting the map); pool requests dropped while the switch
	// waited for the reports (clients resend them).
	PoolRegionsRecovered, PoolCopiesReported, PoolReportsRefused, PoolDeferred uint64
	ControlIn, ControlRefused                                                  uint64
	RoleRefused                                                                uint64 // control requests refused for the sender's certified role (SetIdentities)
	NameRefused                                                                uint64 // joins and registrations refused for the sender's certified name (RankMay, ServiceMay)
	AuthFailures                                                               uint64
	ForwardDropped                                                             uint64
	MembersDead                                                                uint64 // members declared dead (stopped heartbeating)
	MembersLeft                                                                uint64 // members that left (LEAVE)
	TreeJoinsUp                                                                uint64 // joins sent up to the parent switch (JOINVIA)
	Stalls                                                                     uint64 // the switch's own stalls, left out of members' silence (noteActivity)
	EventsDropped                                                              uint64 // events not queued: MaxEvents were waiting for Events
	RendezvousExpired, PoolNodesForgotten                                      uint64 // control-plane entries expired (limits.go)
	ControlPartialRefused, PoolUnproven                                        uint64 // partial control requests refused; pool requests refused to unproven sources
	FaultDrops, FaultDups, FaultReorders, FaultCorrupts                        uint64
	Groups, Members                                                            int

	// Regions taken from the store (Config.Store) at the start; records
	// of it refused (they contradict each other or exceed the map's
	// bounds).
	PoolRegionsLoaded, PoolRecordsRefused uint64

	// Data-path bounds: multicast windows reset by a jump of AckBase of a
	// window or more; members' ACKs ignored as more than a window away.
	MulticastResets, MulticastAcksIgnored uint64
	// MulticastRestartsRefused counts multicast packets dropped because
	// they would restart a sender's stream: each is answered with a
	// challenge (at most one per 10 ms), and the stream restarts when the
	// sender echoes it (MulticastResets).
	MulticastRestartsRefused uint64
	// Aggregation slots freed by AggTimeout; contributions refused
	// because their aggregation had expired (or been refused);
	// aggregations refused because their members' contributions
	// disagreed.
	AggExpired, AggStale, AggRefused uint64
	// Anycast requests failed by AnycastTimeout; refused by MaxAnycast or
	// MaxAnycastPerClient; in flight now. AnycastHeld counts fragments
	// left unacknowledged (to be resent) while the switch's queue toward
	// the relay's other end was long; AnycastStale, fragments of requests
	// whose relay had already ended (failed, or refused early by the
	// member), dropped.
	AnycastExpired, AnycastRefused, AnycastHeld, AnycastStale uint64
	AnycastPending                                            int
}

// member is one member of a group.
type member struct {
	id       uint16
	addr     netip.AddrPort
	alive    bool
	lastSeen time.Time      // any datagram from it (a sign of life)
	beats    detector.Beats // its heartbeats: how long a silence means death
	// In a tree of switches (tree.go): via is the port (a neighbor
	// switch) a member lies behind, nil for one attached here; addr is
	// then the port's address, real the member's own.
	via  *member
	real netip.AddrPort
	// A port: a neighbor switch leading to members of the group, in
	// group.ports; its id is len(group.members) plus its index, its
	// index in a stream's bitmaps; behind counts its live members.
	port   bool
	behind int
	up     bool // the port to the parent switch
	// rx is the row of a member attached here, or of a port, in the
	// group's multicast streams when the group spans a tree (group.row);
	// -1 for a member behind a port.
	rx int32
}

// realAddr is the member's own address.
func (m *member) realAddr() netip.AddrPort {
	if m.via != nil {
		return m.real
	}
	return m.addr
}

// group is a job group (fixed membership from a rendezvous) or a service
// group (members register over time; anycast target).
type group struct {
	id      uint32
	name    string
	service bool
	members []*member // index = member id
	// ports are the neighbor switches of a group spread over a tree of
	// switches (tree.go): the parent, and children with members of it.
	ports  []*member
	byAddr map[netip.AddrPort]*member
	// aggIdx numbers the contributors to the group's aggregations at
	// this switch when it has ports (tree_agg.go): members attached here,
	// then child ports; -1 for the rest. Rebuilt when nil.
	aggIdx []int32
	aggN   int
	// In a tree, rxN counts the rows handed out to the members attached
	// here and to the ports (member.rx), in the order they came: a
	// stream's bitmaps have one per receiver of this switch, not one per
	// rank of the job.
	tree    bool
	rxN     int32
	epoch   uint64
	dead    deadList
	sel     *Selector // service groups
	created time.Time

	// aggFloor is the newest aggregation id of the group whose slot
	// expired or was refused: no slot opens for it or an older one
	// again. aggBad is the newest one refused because its members
	// disagreed (refuseAggregation).
	aggFloor, aggBad uint64
}

func (g *group) alive() int {
	n := 0
	for _, m := range g.members {
		if m != nil && m.alive {
			n++
		}
	}
	return n
}

func (g *group) member(id uint16) *member {
	if int(id) < len(g.members) {
		return g.members[id]
	}
	return nil
}

// Switch is the sans-I/O forwarding node (a loop.Machine): feed it
// datagrams with Receive, call Poll for what to send and when
// to call again. Not safe for concurrent use.
type Switch struct {
	cfg Config
	eng *transport.Engine
	// stepRx: the kernel receive time of the datagram being received
	// (netio.Datagram.RxTime; Unix ns, 0: unknown), for the engine.
	stepRx int64
	// aggStarved: a contribution found no free slot since the last Poll.
	aggStarved bool
	pool       *AggPool
	memPool    poolPlane // the memory pool (pool_plane.go)
	groups     map[uint32]*group
	names      map[string]uint32 // job or service name → group
	jobs       map[string]*rendezvous
	events     []Event // for Events; at most MaxEvents
	nextID     uint32
	// authLogged is when a control request refused for its token was
	// last logged (EventAuthRefused), authUnlogged how many since.
	authLogged   time.Time
	authUnlogged int

	mcast map[streamKey]*mstream
	dirty []*mstream // streams with a merged ACK to send at the next Poll
	ack   wire.Ack
	// byAddr lists the live members (of any group) at an address.
	byAddr map[netip.AddrPort][]*member

	// Liveness runs on a clock that stops while the switch itself stalls
	// (noteActivity): lastActive is the last Receive or Poll, stalled the
	// stalls left out so far, heard = now - stalled, on which members' and
	// memory nodes' lastSeen are kept.
	lastActive time.Time
	stalled    time.Duration
	heard      time.Time

	// aggregation results in flight: token → slot
	aggTok  map[uint64]aggResult
	nextTok uint64

	// anycast: forwarded request id → origin; pinned segments
	anyFwd  map[uint64]*anyReq
	anyIn   map[anyKey]uint64
	anyQ    anyQueue // lifetimes and per-client counts of anyFwd's entries
	anyGone anyGone  // requests whose relay ended before they had all come in
	// anyPick is the member admitAnycast picked for the first fragment
	// of a new request, which anycast then relays it to.
	anyPick struct {
		valid  bool
		in     anyKey
		group  uint32
		member int
	}

	fwd []netio.Datagram // datagrams queued by Receive for the next Poll
	// Two arenas of forwarding buffers: Receive and Poll fill fwdBufs[cur];
	// Poll hands it out with its datagrams and turns to the other, whose
	// buffers the Poll before handed out. So a Poll's datagrams stay valid
	// while the caller sends them and Steps the next packets meanwhile.
	fwdBufs [2][][]byte
	nfwd    [2]int
	cur     int
	held    []netio.Datagram // reordered by fault injection, sent next Poll
	rng     *rand.Rand

	ctrl ctrl.Msg
	asm  ctrlAssembler // multi-packet control requests (ctrlasm.go)
	tree treeState     // requests to the parent switch (tree.go)

	admitFn   func(*transport.Delivery) bool
	nextCheck time.Time
	// idents, when set (SetIdentities), gives each address's certified
	// identity: control requests are refused to roles that may not send
	// them.
	idents func(netip.AddrPort) (secure.Cert, bool)

	stats Stats
	now   time.Time
}

type streamKey struct {
	group  uint32
	sender uint16
}

// New returns a switch.
func New(cfg Config) (*Switch, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	eng, err := transport.New(cfg.Transport)
	if err != nil {
		return nil, err
	}
	pool, err := NewAggPool(cfg.Pool)
	if err != nil {
		return nil, err
	}
	sw := &Switch{
		cfg:    cfg,
		eng:    eng,
		pool:   pool,
		groups: make(map[uint32]*group),
		names:  make(map[string]uint32),
		jobs:   make(map[string]*rendezvous),
		nextID: 1,
		mcast:  make(map[streamKey]*mstream),
		byAddr: make(map[netip.AddrPort][]*member),
		aggTok: make(map[uint64]aggResult),
		anyFwd: make(map[uint64]*anyReq),
		anyIn:  make(map[anyKey]uint64),
		rng:    rand.New(rand.NewPCG(cfg.Fault.Seed, cfg.Fault.Seed^0x5bd1e995)),
	}
	if cfg.Parent.IsValid() {
		// The root of the tree numbers the tree's jobs from 1; this
		// switch's own groups (services) take ids the root never gives.
		sw.nextID = 1 << 31
	}
	sw.admitFn = sw.admit
	sw.memPool.init(sw, cfg.PoolKeys)
	if cfg.Store != nil {
		sw.memPool.mmu.dirty = make(map[uint32]bool)
		sw.memPool.loadStore(cfg.Store.Regions())
		sw.logEvent(Event{Kind: EventRegionsLoaded, Count: int(sw.stats.PoolRegionsLoaded)})
	}
	return sw, nil
}

// SetIdentities gives the switch the certified identity of each peer
// address (a security layer's Layer.Peer, which has authenticated every
// datagram): from then on a control request from an address without one,
// or whose role may not send it (RoleMay), and a join or a registration
// whose job, rank or service its name does not bind (RankMay,
// ServiceMay), is refused with StatusAuth.
func (s *Switch) SetIdentities(peer func(netip.AddrPort) (secure.Cert, bool)) { s.idents = peer }

// SetVerified tells the switch that a security layer below it has
// authenticated every datagram it will see (transport.Config.Verified):
// it no longer checks their CRC32C, nor computes that of the datagrams
// its transport sends (the layer checksums them once sealed).
func (s *Switch) SetVerified() {
	s.cfg.Transport.Verified = true
	s.eng.SetVerified(true)
}

// Stats returns the counters.
func (s *Switch) Stats() Stats {
	st := s.stats
	st.Transport = s.eng.Stats()
	st.Pool = s.pool.Stats()
	st.Groups = len(s.groups)
	st.AnycastPending = len(s.anyFwd)
	for _, g := range s.groups {
		st.Members += g.alive()
	}
	return st
}

// GroupInfo describes a group for tools and tests.
type GroupInfo struct {
	ID      uint32
	Name    string
	Service bool
	Members []ctrl.MemberInfo
	Alive   []bool
}

// Groups lists the groups, by id.
func (s *Switch) Groups() []GroupInfo {
	var out []GroupInfo
	for _, id := range slices.Sorted(maps.Keys(s.groups)) {
		g := s.groups[id]
		gi := GroupInfo{ID: g.id, Name: g.name, Service: g.service}
		for _, m := range g.members {
			if m != nil {
				gi.Members = append(gi.Members, ctrl.MemberInfo{ID: m.id, Addr: m.realAddr()})
				gi.Alive = append(gi.Alive, m.alive)
			}
		}
		out = append(out, gi)
	}
	return out
}

// Receive handles one received datagram (loop.Machine). d.RxTime, the
// kernel's receive time, is what the streams the switch terminates
// measure the queueing they report to it from
// (transport.Engine.Receive). The switch copies what it keeps of d.Buf.
func (s *Switch) Receive(now time.Time, d netio.Datagram) {
	from, pkt := d.Addr, d.Buf
	s.stepRx = d.RxTime
	s.now = now
	s.noteActivity(now)
	s.stats.Received++
	var h wire.Header
	var payload []byte
	var err error
	if s.cfg.Transport.Verified {
		payload, _, err = wire.ParseVerified(pkt, &h)
	} else {
		payload, _, err = wire.Parse(pkt, &h)
	}
	if err != nil {
		s.stats.Malformed++
		return
	}
	// Any packet from a live member counts as a sign of life, so a member
	// busy sending or acknowledging is never declared dead because its
	// heartbeats queue behind data on a lossy link.
	for _, m := range s.byAddr[from] {
		m.lastSeen = s.heard
	}
	if h.Mode == wire.ModePool {
		s.memPool.poolForward(from, &h, payload)
		return
	}
	if h.Group == 0 || h.Mode == wire.ModeAggregate || h.Mode == wire.ModeAnycast ||
		h.Mode == wire.ModeUnicast && h.Dst == wire.MemberAll {
		// Streams the switch terminates: control, contributions, anycast,
		// and the members' ACKs of its own unicast stream (events).
		s.stepEngine(now, from, pkt, &h)
		return
	}
	g := s.groups[h.Group]
	if g == nil {
		s.stats.NoGroup++
		return
	}
	if h.Src == wire.MemberAll && h.Mode == wire.ModeMulticast && (h.Op == wire.OpAck || h.Op == wire.OpNack) {
		// A neighbor switch's merged ACK of what its side received.
		if p := s.fromPort(g, from); p != nil {
			s.stats.MulticastAcksIn++
			s.mergeAck(now, g, p, &h, payload)
			return
		}
	}
	src := g.member(h.Src)
	if src == nil || src.addr != from {
		s.stats.Spoofed++
		return
	}
	if !src.alive {
		s.stats.NoGroup++
		return
	}
	switch h.Mode {
	case wire.ModeUnicast:
		s.stats.UnicastIn++
		dst := g.member(h.Dst)
		if dst == nil || !dst.alive {
			s.stats.NoGroup++
			return
		}
		if s.forward(pkt, dst.addr) != nil && (h.Op == wire.OpAck || h.Op == wire.OpNack) {
			s.fwd[len(s.fwd)-1].Control = true
		}
		s.stats.UnicastOut++
	case wire.ModeMulticast:
		if h.Op == wire.OpAck || h.Op == wire.OpNack {
			s.stats.MulticastAcksIn++
			s.mergeAck(now, g, src, &h, payload)
			return
		}
		s.stats.MulticastIn++
		s.replicate(now, g, src, &h, pkt)
	}
}

// forward queues a copy of pkt to addr. It returns the copy, or nil if the
// forwarding budget is spent.
func (s *Switch) forward(pkt []byte, addr netip.AddrPort) []byte {
	b := s.fwdBuf(len(pkt))
	if b == nil {
		return nil
	}
	copy(b, pkt)
	s.fwd = append(s.fwd, netio.Datagram{Addr: addr, Buf: b})
	return b
}

// fwdBuf returns a switch-owned buffer of n bytes, handed out by the next
// Poll and valid until the Poll after it, or nil (counted) if the
// forwarding budget is spent.
func (s *Switch) fwdBuf(n int) []byte {
	i := s.nfwd[s.cur]
	if i >= s.cfg.MaxForward || len(s.fwd) >= s.cfg.MaxForward {
		s.stats.ForwardDropped++
		return nil
	}
	bufs := &s.fwdBufs[s.cur]
	for len(*bufs) <= i {
		*bufs = append(*bufs, make([]byte, 0, netio.MaxDatagram))
	}
	b := (*bufs)[i][:n]
	(*bufs)[i] = b
	s.nfwd[s.cur] = i + 1
	return b
}

// forwardShared queues buf (already owned by the switch for this Poll) to
// addr without copying: replicas of one packet share one buffer.
func (s *Switch) forwardShared(buf []byte, addr netip.AddrPort) bool {
	if len(s.fwd) >= s.cfg.MaxForward {
		s.stats.ForwardDropped++
		return false
	}
	s.fwd = append(s.fwd, netio.Datagram{Addr: addr, Buf: buf})
	return true
}

// Poll returns the datagrams to send and the next time Poll must be called
// (zero: none; not after now: at once). The datagrams are valid until the
// next Poll: Steps in between leave them alone, so a caller may send them
// while it steps the packets that arrive meanwhile (but not poll again
// before they are sent).
func (s *Switch) Poll(now time.Time, out []netio.Datagram) ([]netio.Datagram, time.Time) {
	s.now = now
	s.noteActivity(now)
	s.checkLiveness(now)
	s.expireData(now)
	s.memPool.sendRebuildGos(now)
	out, comps, next := s.eng.Poll(now, out)
	defer s.memPool.flushStore() // after the completions' changes
	for i := range comps {
		s.onCompletion(&comps[i])
	}
	if len(comps) > 0 {
		// Completions may have queued more (results, replies): they go
		// out at the next Poll, right away. (The engine's buffers are
		// only valid until its next Poll, so it is not polled twice.)
		next = now
	}
	s.flushMerged()
	out = append(out, s.fwd...)
	s.fwd = s.fwd[:0]
	// Hand the arena out with out; the other one's datagrams, handed out
	// by the last Poll, have been sent.
	s.cur ^= 1
	s.nfwd[s.cur] = 0
	// Datagrams held back by fault injection go out after this Poll's
	// own, so that those overtake them.
	out = append(out, s.held...)
	s.held = s.held[:0]
	if s.cfg.Fault.active() {
		out = s.inject(out)
		if len(s.held) > 0 {
			if r := now.Add(50 * time.Microsecond); next.IsZero() || r.Before(next) {
				next = r
			}
		}
	}
	if hb := s.nextLiveness(); !hb.IsZero() && (next.IsZero() || hb.Before(next)) {
		next = hb
	}
	if rg := s.memPool.nextRebuildGo(); !rg.IsZero() && (next.IsZero() || rg.Before(next)) {
		next = rg
	}
	if dl := s.nextDataExpiry(); !dl.IsZero() && (next.IsZero() || dl.Before(next)) {
		next = dl
	}
	return out, next
}

// inject applies fault injection to out in place.
func (s *Switch) inject(out []netio.Datagram) []netio.Datagram {
	f := &s.cfg.Fault
	keep := out[:0]
	var extra []netio.Datagram
	for _, d := range out {
		r := s.rng
		if f.Drop > 0 && r.Float64() < f.Drop {
			s.stats.FaultDrops++
			continue
		}
		if f.Corrupt > 0 && len(d.Buf) > 0 && r.Float64() < f.Corrupt {
			b := s.copyHeld(d.Buf)
			b[r.IntN(len(b))] ^= 1 << r.IntN(8)
			d.Buf = b
			s.stats.FaultCorrupts++
		}
		if f.Reorder > 0 && r.Float64() < f.Reorder && len(s.held) < 1024 {
			s.held = append(s.held, netio.Datagram{Addr: d.Addr, Buf: s.copyHeld(d.Buf)})
			s.stats.FaultReorders++
			continue
		}
		keep = append(keep, d)
		if f.Dup > 0 && r.Float64() < f.Dup {
			extra = append(extra, d)
			s.stats.FaultDups++
		}
	}
	return append(keep, extra...)
}

func (s *Switch) copyHeld(b []byte) []byte {
	c := make([]byte, len(b))
	copy(c, b)
	return c
}

// addMember makes m reachable by address (for liveness).
func (s *Switch) addMember(m *member) {
	s.byAddr[m.addr] = append(s.byAddr[m.addr], m)
}

// removeMember forgets m's address entry.
func (s *Switch) removeMember(m *member) {
	l := s.byAddr[m.addr]
	for i, x := range l {
		if x == m {
			l = append(l[:i], l[i+1:]...)
			break
		}
	}
	if len(l) == 0 {
		delete(s.byAddr, m.addr)
	} else {
		s.byAddr[m.addr] = l
	}
}

// member lookup by address for engine-terminated streams.
func (s *Switch) memberByAddr(g *group, addr netip.AddrPort, id uint16) *member {
	m := g.member(id)
	if m == nil || m.addr != addr {
		return nil
	}
	return m
}
