// Package hostile crafts well-formed but hostile NDMA datagrams: every one
// passes wire.Parse (right version, lengths and CRC32C), and each names
// what a receive path must not trust — sequence numbers far ahead, SACK
// blocks over the whole sequence space, fragments that contradict their
// message, fresh streams and message ids by the thousand, control
// requests that fail authentication, reads that ask for far more than the
// request's size. Tests aim it at a memory node, a forwarding node or an
// endpoint (on simnet or real UDP) while a legitimate workload runs.
package hostile

import (
	"math/rand/v2"

	"github.com/ndma/ndma/wire"
)

// Kind is one kind of crafted datagram.
type Kind int

// Kinds of crafted datagrams.
const (
	// FreshStream is a one-packet data message on a stream never seen
	// before: a random group, source member and mode, SYN set.
	FreshStream Kind = iota
	// FarSeq is a data packet whose AckBase and PSN lie about 2^31
	// ahead of anything sent.
	FarSeq
	// WideSack is an ACK with 32 SACK blocks that together span almost
	// the whole sequence space.
	WideSack
	// Contradict is the second fragment of a message whose first
	// fragment the generator sent just before: same message id, a larger
	// MsgLen and an offset past the first fragment's length.
	Contradict
	// FreshMsg is the first fragment of a large message with a fresh id,
	// never completed.
	FreshMsg
	// BadControl is a control request whose tag does not authenticate.
	BadControl
	// BigRead asks for the largest read a packet can carry from a random
	// key: a reply larger than the request would be amplification.
	BigRead
	// Kinds is the number of kinds.
	Kinds
)

var kindNames = [...]string{"fresh-stream", "far-seq", "wide-sack", "contradict", "fresh-msg", "bad-control", "big-read"}

func (k Kind) String() string {
	if k >= 0 && k < Kinds {
		return kindNames[k]
	}
	return "kind(?)"
}

// Config aims a Gen.
type Config struct {
	// Seed seeds the generator; the same seed gives the same datagrams.
	Seed uint64
	// Groups are group ids to aim at (a job's or service's); zero, the
	// point-to-point group, is always among the targets. Half of the
	// datagrams name one of them, the rest a random group.
	Groups []uint32
	// Members are member ids to claim as the source (a forged member of
	// a real group); empty means random ids.
	Members []uint16
	// Kinds lists the kinds to cycle through; empty means every kind.
	Kinds []Kind
	// Payload is the payload size of data packets in bytes; zero means
	// 64. It is clamped to [16, 8192].
	Payload int
}

// Gen generates hostile datagrams. It is not safe for concurrent use.
type Gen struct {
	cfg   Config
	rng   *rand.Rand
	n     int
	buf   []byte
	first wire.Header // the first fragment of the pending contradiction
	count [Kinds]int
}

// New returns a generator.
func New(cfg Config) *Gen {
	if len(cfg.Kinds) == 0 {
		for k := range Kinds {
			cfg.Kinds = append(cfg.Kinds, k)
		}
	}
	if cfg.Payload == 0 {
		cfg.Payload = 64
	}
	cfg.Payload = min(max(cfg.Payload, 16), 8192)
	return &Gen{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5bd1e995)), buf: make([]byte, 0, wire.HeaderLen+cfg.Payload+512)}
}

// Count reports how many datagrams of kind k the generator has made.
func (g *Gen) Count(k Kind) int { return g.count[k] }

// Next returns the next datagram, in a buffer that is reused by the next
// call. A Contradict kind is preceded by its first fragment: it takes two
// calls.
func (g *Gen) Next() []byte {
	if g.first.MsgID != 0 {
		return g.contradiction()
	}
	k := g.cfg.Kinds[g.n%len(g.cfg.Kinds)]
	g.n++
	g.count[k]++
	h := wire.Header{
		Version: wire.Version,
		Op:      wire.OpWrite,
		Group:   g.group(),
		Src:     g.member(),
		Dst:     uint16(g.rng.UintN(8)),
		PSN:     g.rng.Uint32(),
		MsgID:   g.rng.Uint64() | 1,
		Key:     g.rng.Uint64(),
		Addr:    uint64(g.rng.UintN(1 << 20)),
		TS:      g.rng.Uint64() >> 1,
		Mode:    wire.Mode(g.rng.UintN(4)),
	}
	if h.Mode != wire.ModeUnicast {
		h.Op = wire.OpData
	}
	if h.Group == 0 {
		h.Dst = 0
	}
	h.AckBase = h.PSN
	payload := make([]byte, g.cfg.Payload)
	switch k {
	case FreshStream:
		h.Flags = wire.FlagSyn
	case FarSeq:
		h.AckBase = h.PSN + 1<<31 - 1 - g.rng.Uint32N(1024)
		h.PSN = h.AckBase + g.rng.Uint32N(16)
	case WideSack:
		return g.wideSack(&h)
	case Contradict:
		// The first fragment: a message of two payloads; the second,
		// sent next, claims a longer message and an offset past it.
		h.Flags = wire.FlagSyn
		h.MsgLen = uint32(2 * len(payload))
		g.first = h
		g.first.PSN = h.PSN + 1
	case FreshMsg:
		h.Flags = wire.FlagSyn
		h.MsgLen = 1 << 30
	case BadControl:
		h.Op, h.Mode, h.Group, h.Dst = wire.OpControl, wire.ModeUnicast, 0, 0
		for i := range payload {
			payload[i] = byte(g.rng.Uint32())
		}
		payload[0] = byte(1 + g.rng.UintN(11)) // a control type
		payload[1] = 0
	case BigRead:
		h.Op, h.Mode, h.Group, h.Dst = wire.OpRead, wire.ModeUnicast, 0, 0
		h.Operand1 = 64 << 10
		payload = nil
	}
	if h.MsgLen == 0 {
		h.MsgLen = uint32(len(payload))
	}
	g.buf, _ = wire.AppendPacket(g.buf[:0], &h, payload)
	return g.buf
}

// contradiction builds the second fragment of g.first's message.
func (g *Gen) contradiction() []byte {
	h := g.first
	g.first = wire.Header{}
	n := uint32(g.cfg.Payload)
	h.Flags = 0
	h.MsgLen = 1 << 24
	h.Offset = 3 * n // past the first fragment's message of 2n bytes
	payload := make([]byte, n)
	g.buf, _ = wire.AppendPacket(g.buf[:0], &h, payload)
	return g.buf
}

func (g *Gen) wideSack(h *wire.Header) []byte {
	h.Op = wire.OpAck
	h.Flags = 0
	a := wire.Ack{Cum: g.rng.Uint32(), Window: 1 << 16, NBlocks: wire.MaxSackBlocks}
	// 32 blocks, each 2^26 PSNs with a one-PSN gap, from Cum+1 on: the
	// blocks span 2^31 sequence numbers in all, the most Decode accepts.
	const span = 1 << 26
	s := a.Cum + 1
	for i := range a.Blocks {
		a.Blocks[i] = wire.SackBlock{Start: s, End: s + span - 1}
		s += span
	}
	body := make([]byte, a.EncodedLen())
	a.Encode(body)
	h.MsgLen = 0
	g.buf, _ = wire.AppendPacket(g.buf[:0], h, body)
	return g.buf
}

func (g *Gen) group() uint32 {
	if len(g.cfg.Groups) > 0 && g.rng.UintN(2) == 0 {
		return g.cfg.Groups[g.rng.UintN(uint(len(g.cfg.Groups)))]
	}
	if g.rng.UintN(4) == 0 {
		return 0
	}
	return g.rng.Uint32()
}

func (g *Gen) member() uint16 {
	if len(g.cfg.Members) > 0 && g.rng.UintN(4) != 0 {
		return g.cfg.Members[g.rng.UintN(uint(len(g.cfg.Members)))]
	}
	return uint16(g.rng.UintN(1 << 16))
}
