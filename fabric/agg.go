package fabric

import (
	"errors"
	"fmt"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/reduce"
	"github.com/ndma/ndma/wire"
)

// AggMaxMembers is the largest member count an aggregation slot handles
// (the size of a slot's contributor bitmap).
const AggMaxMembers = 1024

// aggMaxSlots bounds PoolConfig.Slots (slot indices are int32).
const aggMaxSlots = 1 << 20

// ErrPoolConfig is wrapped by the error NewAggPool returns for an invalid
// PoolConfig.
var ErrPoolConfig = errors.New("fabric: invalid aggregation pool config")

// AggKey names one chunk of one aggregation operation.
type AggKey struct {
	Group  uint32 // group id
	Op     uint64 // operation id (the message id all members use)
	Offset uint32 // byte offset of the chunk in the operation's buffer
}

// PoolConfig configures an AggPool. The zero value is valid and gives the
// defaults named below.
type PoolConfig struct {
	// Slots is the number of slots, 1..2^20; zero means 1024.
	Slots int
	// SlotBytes is the largest chunk a slot holds, in bytes, at most
	// wire.MaxPayload; zero means 9000 (a Switch makes it the payload of
	// its largest datagram, the most a member sends in one).
	SlotBytes int
	// MaxBytes bounds the memory, in bytes, of the buffers deterministic
	// slots use to hold contributions that arrive ahead of their turn
	// (each deterministic slot of N members may buffer up to N-1 chunks).
	// It must be at least (AggMaxMembers-1)*SlotBytes so that any single
	// deterministic slot fits; zero means 256 MiB.
	MaxBytes int64
}

// withDefaults returns c with zero fields replaced by their defaults.
func (c PoolConfig) withDefaults() PoolConfig {
	if c.Slots == 0 {
		c.Slots = 1024
	}
	if c.SlotBytes == 0 {
		c.SlotBytes = 9000
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = 256 << 20
	}
	return c
}

// validate checks a config that has had its defaults applied.
func (c PoolConfig) validate() error {
	switch {
	case c.Slots < 1 || c.Slots > aggMaxSlots:
		return fmt.Errorf("%w: Slots %d not in 1..%d", ErrPoolConfig, c.Slots, aggMaxSlots)
	case c.SlotBytes < 1 || c.SlotBytes > wire.MaxPayload:
		return fmt.Errorf("%w: SlotBytes %d not in 1..%d", ErrPoolConfig, c.SlotBytes, wire.MaxPayload)
	case c.MaxBytes < int64(AggMaxMembers-1)*int64(c.SlotBytes):
		return fmt.Errorf("%w: MaxBytes %d below (AggMaxMembers-1)*SlotBytes = %d",
			ErrPoolConfig, c.MaxBytes, int64(AggMaxMembers-1)*int64(c.SlotBytes))
	}
	return nil
}

// ContribStatus is the outcome of AggPool.Contribute.
type ContribStatus uint8

// Contribute outcomes.
const (
	ContribAccepted  ContribStatus = iota // added (or buffered); slot not complete yet
	ContribComplete                       // this contribution completed the slot: the result is valid
	ContribDuplicate                      // this member already contributed to this slot: nothing added
	ContribNoSlot                         // no free slot, group at its fair share, or MaxBytes full: nothing recorded; hold the sender back
	ContribMismatch                       // invalid contribution, or its parameters differ from the slot's: nothing recorded
	ContribDone                           // slot already complete (late duplicate): nothing recorded; the result may be re-sent
	ContribTooLarge                       // chunk longer than SlotBytes: nothing recorded
)

var contribStatusNames = [...]string{
	ContribAccepted:  "accepted",
	ContribComplete:  "complete",
	ContribDuplicate: "duplicate",
	ContribNoSlot:    "no-slot",
	ContribMismatch:  "mismatch",
	ContribDone:      "done",
	ContribTooLarge:  "too-large",
}

func (s ContribStatus) String() string {
	if int(s) < len(contribStatusNames) {
		return contribStatusNames[s]
	}
	return fmt.Sprintf("contrib(%d)", uint8(s))
}

// Contribution is one member's contribution to one chunk.
type Contribution struct {
	Key           AggKey
	Member        int        // contributing member, 0 <= Member < Members
	Members       int        // number of contributors N, 1..AggMaxMembers
	Dtype         wire.Dtype // element type: F32, F64, I32 or I64
	Alu           wire.Alu   // Add (sum), Min, Max or Prod; see Reduce
	Deterministic bool       // reduce in member order 0..N-1: bitwise identical results whatever the arrival order
	Data          []byte     // little-endian elements, a multiple of Dtype.Size() bytes, at most SlotBytes; copied if kept
	// Time is when the contribution arrived. A slot remembers the Time of
	// the contribution that opened it (see Oldest); the pool reads no
	// clock.
	Time time.Time
}

// PoolStats are an AggPool's gauges and counters.
type PoolStats struct {
	Slots         int    // configured slots
	InUse         int    // slots holding a chunk (open or complete, not yet released)
	Contributions uint64 // contributions recorded (ContribAccepted + ContribComplete)
	Completions   uint64 // slots completed (ContribComplete)
	Duplicates    uint64 // ContribDuplicate and ContribDone outcomes
	NoSlot        uint64 // ContribNoSlot outcomes
	Mismatches    uint64 // ContribMismatch and ContribTooLarge outcomes
}

// Slot states.
const (
	aggFree uint8 = iota
	aggOpen
	aggDone
)

// aggSlot is one slot. Fields other than acc and bufs' backing array are
// meaningful only while state != aggFree.
type aggSlot struct {
	key     AggKey
	state   uint8
	det     bool
	dtype   wire.Dtype
	alu     wire.Alu
	members int
	length  int   // chunk length in bytes
	count   int   // contributions recorded
	next    int   // deterministic: members 0..next-1 are folded into acc
	reserve int64 // deterministic: bytes of MaxBytes reserved for buffering
	seen    [AggMaxMembers / 64]uint64
	acc     []byte   // accumulator and result; len SlotBytes once allocated
	bufs    [][]byte // deterministic: bufs[m] holds member m's chunk while it waits its turn; nil otherwise
	// Open slots form a list in the order they were opened (older,
	// newer: slot indices, -1 at the ends), for Oldest.
	opened       time.Time
	older, newer int32
}

func (s *aggSlot) has(m int) bool { return s.seen[m>>6]&(1<<(uint(m)&63)) != 0 }
func (s *aggSlot) mark(m int)     { s.seen[m>>6] |= 1 << (uint(m) & 63) }

// AggPool is the forwarding node's bounded pool of aggregation slots.
// Create it with NewAggPool.
//
// In aggregation mode each of the N members of a group sends its
// contribution to chunk k of an operation once; the forwarding node reduces
// the contributions in a slot and forwards only the result. AggPool is that
// slot pool, sans I/O: no goroutines, no clock, no I/O. It is not safe for
// concurrent use; the goroutine that owns the switch's aggregation state
// calls it. The caller handles transport, ACKs and retransmission: it calls
// Contribute for each new contribution packet, sends the result when a slot
// completes, and calls Release when every recipient has acknowledged the
// result (or ReleaseGroup / Release when the operation is aborted).
//
// Memory is bounded and recycled: a slot's result buffer (SlotBytes) is
// allocated on the slot's first use and kept; deterministic slots buffer
// out-of-order contributions in size-classed buffers from a free list whose
// total is bounded by PoolConfig.MaxBytes. In steady state Contribute,
// Release and ReleaseGroup allocate nothing beyond what the Go runtime's
// maps may do on insert (the key index is a map; it reuses its table as
// keys come and go, so churn at a stable working set does not allocate).
type AggPool struct {
	cfg    PoolConfig
	slots  []aggSlot
	free   []int32          // free slot indices, used as a stack (hot slots reused first)
	index  map[AggKey]int32 // open and complete slots by key
	groups map[uint32]int   // slots held per group; no entry when zero
	stats  PoolStats        // counters; gauges filled in by Stats
	// The open (incomplete) slots, oldest first: a doubly linked list
	// through aggSlot.older/newer; -1 when empty.
	oldest, newest int32

	// Deterministic buffering. reserved is the sum of the open
	// deterministic slots' reservations (admission control: a slot is
	// created only if its worst case fits, so every admitted slot can
	// complete). bufs holds the buffered chunks in netio.Pool's
	// power-of-two size classes from 64 bytes, the top class capped at
	// SlotBytes; its Allocated (bytes in use plus free) never exceeds
	// cfg.MaxBytes.
	bufs     netio.Pool
	reserved int64
}

// NewAggPool returns an empty pool configured by cfg (zero fields take
// their defaults). Slot memory is allocated on first use of each slot. The
// error wraps ErrPoolConfig.
func NewAggPool(cfg PoolConfig) (*AggPool, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &AggPool{
		cfg:    cfg,
		slots:  make([]aggSlot, cfg.Slots),
		free:   make([]int32, cfg.Slots),
		index:  make(map[AggKey]int32, cfg.Slots),
		groups: make(map[uint32]int),
		oldest: -1,
		newest: -1,
		bufs:   netio.Pool{Top: cfg.SlotBytes, Budget: cfg.MaxBytes},
	}
	for i := range p.free {
		p.free[i] = int32(cfg.Slots - 1 - i) // slot 0 on top
	}
	return p, nil
}

// Contribute adds c to its slot, creating the slot on the key's first
// contribution. In non-deterministic mode contributions are reduced into
// the slot's accumulator on arrival; in deterministic mode they are folded
// in member order 0,1,...,N-1 starting from member 0's data, buffering those
// that arrive ahead of their turn, so the result is bitwise identical to a
// sequential reduction in member order.
//
// On ContribComplete, result is the reduced chunk (len(c.Data) bytes). It
// is owned by the pool and stays valid until Release(c.Key) or a
// ReleaseGroup that frees the slot; the caller must not modify it. On
// every other status result is nil. c.Data is not retained.
//
// The checks, in order: an invalid c (unknown dtype or alu, Members outside
// 1..AggMaxMembers, Member outside 0..Members-1, length not a multiple of
// the element size) is ContribMismatch, one over SlotBytes
// ContribTooLarge; a contribution
// to a complete slot is ContribDone; one whose Members, Dtype, Alu,
// Deterministic or length differ from the slot's first contribution is
// ContribMismatch; a member's second contribution is ContribDuplicate. A
// contribution that would create a slot is ContribNoSlot when no slot is
// free, when its group already holds Share(group) slots or more, or, for a
// deterministic slot, when its worst-case buffering ((N-1) chunk buffers)
// does not fit in what is left of MaxBytes. A contribution to an existing
// slot is never refused for lack of memory.
func (p *AggPool) Contribute(c *Contribution) (st ContribStatus, result []byte) {
	if c != nil && len(c.Data) > p.cfg.SlotBytes {
		p.stats.Mismatches++
		return ContribTooLarge, nil
	}
	if c == nil || !p.valid(c) {
		p.stats.Mismatches++
		return ContribMismatch, nil
	}
	var s *aggSlot
	if i, ok := p.index[c.Key]; ok {
		s = &p.slots[i]
		switch {
		case s.state == aggDone:
			p.stats.Duplicates++
			return ContribDone, nil
		case s.members != c.Members || s.dtype != c.Dtype || s.alu != c.Alu ||
			s.det != c.Deterministic || s.length != len(c.Data):
			p.stats.Mismatches++
			return ContribMismatch, nil
		case s.has(c.Member):
			p.stats.Duplicates++
			return ContribDuplicate, nil
		}
	} else if s = p.open(c); s == nil {
		p.stats.NoSlot++
		return ContribNoSlot, nil
	}

	s.mark(c.Member)
	s.count++
	p.stats.Contributions++
	acc := s.acc[:s.length:s.length]
	if !s.det {
		if s.count == 1 {
			copy(acc, c.Data)
		} else {
			reduce.Apply(acc, c.Data, s.dtype, s.alu)
		}
	} else {
		if c.Member == s.next {
			p.fold(s, c.Data)
			// Fold the buffered contributions now in turn.
			for s.next < s.members && s.has(s.next) {
				b := s.bufs[s.next]
				s.bufs[s.next] = nil
				p.fold(s, b)
				p.putBuf(b)
			}
		} else if s.length > 0 {
			b := p.getBuf(s.length)
			copy(b, c.Data)
			s.bufs[c.Member] = b
		}
	}
	if s.count < s.members {
		return ContribAccepted, nil
	}
	s.state = aggDone
	p.unlinkOpen(s)
	p.reserved -= s.reserve
	s.reserve = 0
	p.stats.Completions++
	return ContribComplete, acc
}

// valid reports whether c is well formed for this pool.
func (p *AggPool) valid(c *Contribution) bool {
	sz := c.Dtype.Size()
	return sz != 0 && reduce.Supports(c.Alu) &&
		c.Members >= 1 && c.Members <= AggMaxMembers &&
		c.Member >= 0 && c.Member < c.Members &&
		len(c.Data) <= p.cfg.SlotBytes && len(c.Data)%sz == 0
}

// open creates the slot for c's key, or returns nil when admission
// control refuses it.
func (p *AggPool) open(c *Contribution) *aggSlot {
	g := c.Key.Group
	if len(p.free) == 0 || p.groups[g] >= p.Share(g) {
		return nil
	}
	var need int64
	if c.Deterministic && c.Members > 1 {
		need = int64(c.Members-1) * int64(p.classSize(len(c.Data)))
		if p.reserved+need > p.cfg.MaxBytes {
			return nil
		}
	}
	i := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	s := &p.slots[i]
	if s.acc == nil {
		s.acc = make([]byte, p.cfg.SlotBytes)
	}
	s.key = c.Key
	s.state = aggOpen
	s.det = c.Deterministic
	s.dtype = c.Dtype
	s.alu = c.Alu
	s.members = c.Members
	s.length = len(c.Data)
	s.count = 0
	s.next = 0
	s.reserve = need
	if s.det {
		if cap(s.bufs) < s.members {
			s.bufs = make([][]byte, s.members)
		}
		s.bufs = s.bufs[:s.members] // all nil: freeSlot clears them
	}
	p.reserved += need
	p.index[c.Key] = i
	p.groups[g]++
	s.opened = c.Time
	s.older, s.newer = p.newest, -1
	if p.newest >= 0 {
		p.slots[p.newest].newer = i
	} else {
		p.oldest = i
	}
	p.newest = i
	return s
}

// unlinkOpen takes open slot s off the list of open slots.
func (p *AggPool) unlinkOpen(s *aggSlot) {
	if s.older >= 0 {
		p.slots[s.older].newer = s.newer
	} else {
		p.oldest = s.newer
	}
	if s.newer >= 0 {
		p.slots[s.newer].older = s.older
	} else {
		p.newest = s.older
	}
	s.older, s.newer = -1, -1
}

// Oldest returns the key of the open (incomplete) slot opened first, and
// the Time of the contribution that opened it; ok is false when no slot
// is open. With contribution times that never go backwards it is the open
// slot opened longest ago: the caller expires slots by releasing them
// while Oldest is too old. O(1).
func (p *AggPool) Oldest() (k AggKey, opened time.Time, ok bool) {
	if p.oldest < 0 {
		return AggKey{}, time.Time{}, false
	}
	s := &p.slots[p.oldest]
	return s.key, s.opened, true
}

// fold reduces member s.next's chunk d into the accumulator (member 0's is
// copied) and advances s.next.
func (p *AggPool) fold(s *aggSlot, d []byte) {
	acc := s.acc[:s.length:s.length]
	if s.next == 0 {
		copy(acc, d)
	} else {
		reduce.Apply(acc, d, s.dtype, s.alu)
	}
	s.next++
}

// classSize is the capacity of the buffers that hold n bytes, in bytes
// (0 for n == 0, which is never buffered).
func (p *AggPool) classSize(n int) int {
	if n == 0 {
		return 0
	}
	return p.bufs.ClassSize(n)
}

// getBuf returns a buffer of n bytes (1 <= n <= SlotBytes), recycled when
// one of its class is free. Making room for a new one drops free buffers of
// other classes, so allocated never exceeds MaxBytes: the caller's slot
// reservation guarantees in-use buffers fit.
func (p *AggPool) getBuf(n int) []byte { return p.bufs.Get(n) }

// putBuf returns a buffer from getBuf to its free list.
func (p *AggPool) putBuf(b []byte) { p.bufs.Put(b) }

// Result returns the result of a complete slot (for re-sending), owned by
// the pool and valid until the slot is released, or nil if k names no
// complete slot.
func (p *AggPool) Result(k AggKey) []byte {
	i, ok := p.index[k]
	if !ok || p.slots[i].state != aggDone {
		return nil
	}
	s := &p.slots[i]
	return s.acc[:s.length:s.length]
}

// Release frees k's slot, complete or not (for example when the operation
// is aborted because a member died); a result it returned is no longer
// valid. Unknown keys are ignored.
func (p *AggPool) Release(k AggKey) {
	if i, ok := p.index[k]; ok {
		p.freeSlot(i)
	}
}

// ReleaseGroup frees every slot of group (the group was destroyed or a
// member died) and returns how many it freed. It scans all slots: O(Slots).
func (p *AggPool) ReleaseGroup(group uint32) int {
	if p.groups[group] == 0 {
		return 0
	}
	n := 0
	for i := range p.slots {
		if s := &p.slots[i]; s.state != aggFree && s.key.Group == group {
			p.freeSlot(int32(i))
			n++
		}
	}
	return n
}

// freeSlot returns slot i, which is in use, to the free list.
func (p *AggPool) freeSlot(i int32) {
	s := &p.slots[i]
	if s.state == aggOpen {
		p.unlinkOpen(s)
	}
	if s.det {
		for m, b := range s.bufs {
			if b != nil {
				p.putBuf(b)
				s.bufs[m] = nil
			}
		}
		s.bufs = s.bufs[:0]
	}
	p.reserved -= s.reserve
	s.reserve = 0
	clear(s.seen[:(s.members+63)/64])
	delete(p.index, s.key)
	g := s.key.Group
	if n := p.groups[g] - 1; n > 0 {
		p.groups[g] = n
	} else {
		delete(p.groups, g)
	}
	s.state = aggFree
	p.free = append(p.free, i)
}

// Exists reports whether k names a slot, open or complete.
func (p *AggPool) Exists(k AggKey) bool {
	_, ok := p.index[k]
	return ok
}

// Has reports whether member has contributed to k's slot (open or
// complete); false when k names no slot.
func (p *AggPool) Has(k AggKey, member int) bool {
	i, ok := p.index[k]
	return ok && member >= 0 && member < AggMaxMembers && p.slots[i].has(member)
}

// Missing appends to dst, in increasing order, the members that have not
// contributed to k's slot, and returns the extended slice (for error
// reports naming members). It returns dst unchanged if k names no slot or
// a complete one.
func (p *AggPool) Missing(k AggKey, dst []int) []int {
	i, ok := p.index[k]
	if !ok || p.slots[i].state != aggOpen {
		return dst
	}
	s := &p.slots[i]
	for m := 0; m < s.members; m++ {
		if !s.has(m) {
			dst = append(dst, m)
		}
	}
	return dst
}

// Share returns group's current fair share of slots: max(1, Slots/G),
// where G counts the groups holding slots plus group itself if it holds
// none. A group at or above its share cannot open another slot; a lone
// group may take every slot. When another group opens a slot, the first
// keeps what it holds but opens no more until it is back under its share,
// so slots it releases go to the others. A group that holds no slot is not
// counted in the others' shares until it opens one, so when the pool is
// full it competes for the next free slot with everyone (the caller may
// favour senders it held back when a slot is released).
func (p *AggPool) Share(group uint32) int {
	active := len(p.groups)
	if p.groups[group] == 0 {
		active++
	}
	return max(1, p.cfg.Slots/active)
}

// InUse returns the number of slots group holds (open or complete).
func (p *AggPool) InUse(group uint32) int { return p.groups[group] }

// Stats returns the pool's gauges and counters.
func (p *AggPool) Stats() PoolStats {
	st := p.stats
	st.Slots = p.cfg.Slots
	st.InUse = p.cfg.Slots - len(p.free)
	return st
}
