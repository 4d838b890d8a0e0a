package transport

import (
	"crypto/rand"
	"encoding/binary"
	mrand "math/rand/v2"
	"net/netip"
	"time"

	"github.com/ndma/ndma/transport/cc"
	"github.com/ndma/ndma/wire"
)

// Engine is the sans-I/O reliable transport of one endpoint. It is not
// safe for concurrent use: one goroutine owns it, feeds received datagrams
// to Receive, calls Poll for datagrams to send, completions and the next
// deadline, and never lets the engine see a socket or a clock.
type Engine struct {
	cfg   Config
	swift cc.SwiftLimits // the congestion window's, from cfg
	// expectAt is the deadline the last Poll returned (zero: none): a
	// Poll that comes much later than it finds this engine's own process
	// stopped or starved meanwhile (SIGSTOP, a debugger, a suspended
	// host), whose time is not its peers' silence (selfStall).
	expectAt time.Time
	// arrival is when the datagram being received arrived: its kernel
	// receive time (Receive's d.RxTime), or the Receive's now.
	arrival time.Time
	seg     int
	rng     *mrand.Rand
	msgSeq  uint64
	groups  map[uint32]*groupCtx
	npeers  int
	active  []*peer // peers with something to send
	nmsgs   int
	// strangerMsgs counts the messages queued to strangers when sent (at
	// most MaxMessages/4).
	strangerMsgs int

	comps      []Completion // accumulated since the last Poll
	compsSpare []Completion // returned by the last Poll; reused by the next
	arena      [][]byte     // Poll's output buffers, reused
	ack        wire.Ack
	admitD     Delivery // passed to Receive's Admission.Admit
	stats      Stats
	rings      [][]pktRec        // free send rings
	smallRings [][]pktRec        // free strangers' send rings
	freeMsgs   []*outMsg         // finished messages for reuse (newMsg, releaseRec)
	gather     bool              // SetGather
	locals     map[uint32]uint16 // member id per group (SetLocal)

	// Peer lifetimes. Every peer is on one of two lists, least recently
	// active first: strangers (bounded by MaxStrangers, the head is
	// evicted for a new one) and established peers (bounded by
	// MaxPeers). Poll sweeps idle peers from the heads.
	strangers, established peerList
	nstrangers             int
	// addrRefs counts the established peers per address: an address
	// with one is validated (Validated). At most MaxPeers entries; an
	// entry goes with its address's last established peer.
	addrRefs map[netip.AddrPort]int32
	// strangerRefs counts the strangers per address (at most
	// MaxStrangers entries): a Send to a new stream at an address known
	// only through strangers makes a stranger too, so that answering a
	// forged source on another stream neither escapes the amplification
	// limit nor validates the address.
	strangerRefs map[netip.AddrPort]int32
	now          time.Time // latest time seen by Receive or Poll
}

// New returns an engine. It returns an error wrapping ErrConfig if cfg is
// invalid.
func New(cfg Config) (*Engine, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	seed := cfg.Seed
	if seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		seed = binary.LittleEndian.Uint64(b[:])
	}
	rng := mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return &Engine{
		cfg:          cfg,
		swift:        cc.SwiftLimits{Min: cfg.MinCwnd, Max: cfg.MaxCwnd, Target: cfg.TargetDelay},
		seg:          cfg.segSize(),
		rng:          rng,
		msgSeq:       rng.Uint64() >> 1,
		groups:       make(map[uint32]*groupCtx),
		addrRefs:     make(map[netip.AddrPort]int32),
		strangerRefs: make(map[netip.AddrPort]int32),
	}, nil
}

// SetLocal sets this endpoint's member id in a group (written as Src in
// the group's packets, and accepted as Dst); groups without one use
// Config.Local.
func (e *Engine) SetLocal(group uint32, member uint16) {
	if e.locals == nil {
		e.locals = make(map[uint32]uint16)
	}
	e.locals[group] = member
}

// ClearLocal forgets the member id set for a group.
func (e *Engine) ClearLocal(group uint32) { delete(e.locals, group) }

func (e *Engine) local(group uint32) uint16 {
	if m, ok := e.locals[group]; ok {
		return m
	}
	return e.cfg.Local
}

// SetGroupModes turns acceptance of non-unicast streams on or off (see
// Config.GroupModes).
func (e *Engine) SetGroupModes(on bool) { e.cfg.GroupModes = on }

// SegmentSize is the payload bytes carried per packet.
func (e *Engine) SegmentSize() int { return e.seg }

// SetVerified sets Config.Verified, for a driver that puts a security
// layer below an engine it did not configure; call it before Receive sees a
// datagram.
func (e *Engine) SetVerified(v bool) { e.cfg.Verified = v }

// Stats returns the counters.
func (e *Engine) Stats() Stats {
	s := e.stats
	s.Peers, s.Strangers = e.npeers, e.nstrangers
	return s
}

// nanos is t in Unix nanoseconds, 0 for the zero time.
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func (e *Engine) setNow(now time.Time) {
	if now.After(e.now) {
		e.now = now
	}
}

// maxHostDelay bounds the wait between the kernel's receive time and the
// Receive that accepts it: an older one is taken for a clock step.
const maxHostDelay = time.Second

func (e *Engine) activate(p *peer) {
	if !p.isActive {
		p.isActive = true
		e.active = append(e.active, p)
	}
}

// SetWindow sets the receive window advertised to one peer, in packets
// (zero restores Config.RecvWindow; larger values are capped to it). A
// forwarding node shrinks it to the aggregation slots a sender may use.
func (e *Engine) SetWindow(id PeerID, packets uint32) {
	p := e.lookup(id)
	if p == nil {
		return
	}
	p.advWindow = min(packets, uint32(e.cfg.RecvWindow))
}

// buf returns the i-th output buffer of this Poll, sized for one datagram.
func (e *Engine) buf(i int) []byte {
	for len(e.arena) <= i {
		e.arena = append(e.arena, make([]byte, e.cfg.MTU))
	}
	return e.arena[i]
}
