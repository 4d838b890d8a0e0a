package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Chained instructions (NetDAM's segment routing). An OpChain packet in
// ModePool carries a list of hops; each memory node on the list applies
// its hop's op and passes the packet on (through the switch, which
// translates the next hop's pool address), and the last hop answers the
// client. Header fields: Group and Key name the pool region every hop
// addresses, Operand1 is the vector length n in bytes (every hop works on
// n bytes), Operand2 the number of hops, Hop the index of the hop being
// executed, Dtype and Alu the element type and operation of Apply and
// Accumulate hops. The payload is the hop list (ChainHopLen bytes per hop)
// followed by the data: n bytes, or none before a Load has put them there.
//
// A hop is 16 bytes: the pool address (u64), the op (u8), the coefficient
// of a GFAccumulate hop (u8; zero for every other op) and 6 zero bytes.

// ChainOp is what one hop does.
type ChainOp uint8

// Chain ops.
const (
	// ChainLoad: data = memory[Addr, +n). The packet must carry no data
	// yet.
	ChainLoad ChainOp = 1
	// ChainApply: data[i] = Alu(data[i], memory[Addr+i]); memory is not
	// changed.
	ChainApply ChainOp = 2
	// ChainStore: memory[Addr, +n) = data.
	ChainStore ChainOp = 3
	// ChainAccumulate: memory[Addr+i] = Alu(memory[Addr+i], data[i]), as
	// OpVector.
	ChainAccumulate ChainOp = 4
	// ChainDelta: data[i] ^= memory[Addr+i]; memory is not changed. The
	// packet carries on the change from what memory holds to the data
	// (zero where they agree). Works on bytes: Dtype and Alu are not
	// used.
	ChainDelta ChainOp = 5
	// ChainGFAccumulate: memory[Addr+i] ^= Coef·data[i], the product in
	// GF(2^8) with the polynomial x^8+x^4+x^3+x^2+1 (0x11d, package
	// gf256). Coef (1 to 255) is carried in the hop. Works on bytes:
	// Dtype and Alu are not used. Coef 1 XORs the data into memory.
	ChainGFAccumulate ChainOp = 6
	chainOpCount      ChainOp = 7
)

var chainOpNames = [...]string{ChainLoad: "load", ChainApply: "apply", ChainStore: "store", ChainAccumulate: "accumulate",
	ChainDelta: "delta", ChainGFAccumulate: "gfaccumulate"}

func (o ChainOp) String() string {
	if o > 0 && o < chainOpCount {
		return chainOpNames[o]
	}
	return fmt.Sprintf("chainop(%d)", uint8(o))
}

// Mutates reports whether the op changes memory.
func (o ChainOp) Mutates() bool {
	return o == ChainStore || o == ChainAccumulate || o == ChainGFAccumulate
}

// Computes reports whether the op answers with data of its own (Load,
// Apply, Delta) rather than passing the data on unchanged.
func (o ChainOp) Computes() bool { return o == ChainLoad || o == ChainApply || o == ChainDelta }

// Perm is the permission the op needs on its region.
func (o ChainOp) Perm() Perm {
	switch o {
	case ChainStore:
		return PermWrite
	case ChainAccumulate, ChainGFAccumulate:
		return PermVector
	}
	return PermRead
}

// Limits of a chain.
const (
	ChainHopLen  = 16 // bytes per hop: address u64, op u8, coefficient u8, 6 zero bytes
	MaxChainHops = 16
)

// ChainHop is one hop: Op at pool address Addr of the chain's region, with
// Coef the GF(2^8) coefficient of a GFAccumulate (zero for other ops).
type ChainHop struct {
	Addr uint64
	Op   ChainOp
	Coef uint8
}

// Check reports whether the hop is well formed: a known op, and a
// coefficient that is 1 to 255 for a GFAccumulate and zero otherwise.
func (h ChainHop) Check() error {
	switch {
	case h.Op == 0 || h.Op >= chainOpCount:
		return fmt.Errorf("%w: op %v", ErrChain, h.Op)
	case (h.Op == ChainGFAccumulate) != (h.Coef != 0):
		return fmt.Errorf("%w: %v with coefficient %d", ErrChain, h.Op, h.Coef)
	}
	return nil
}

// ErrChain reports a malformed hop list.
var ErrChain = errors.New("wire: malformed chain")

// AppendChain appends the encoded hop list to b.
func AppendChain(b []byte, hops []ChainHop) []byte {
	for _, h := range hops {
		b = binary.BigEndian.AppendUint64(b, h.Addr)
		b = append(b, byte(h.Op), h.Coef, 0, 0, 0, 0, 0, 0)
	}
	return b
}

// ChainHopAt decodes hop i of the list at the start of payload.
func ChainHopAt(payload []byte, i int) ChainHop {
	e := payload[i*ChainHopLen:]
	return ChainHop{Addr: binary.BigEndian.Uint64(e), Op: ChainOp(e[8]), Coef: e[9]}
}

// SplitChain checks an OpChain packet's payload (without a reply-to
// trailer) against h and splits it into the hop list and the data (nil
// before a Load). It checks the hop count (1..MaxChainHops), that Hop is
// in range, every hop's op, coefficient (ChainHop.Check) and zero
// padding, that the data is either
// absent or exactly Operand1 bytes, that a Load finds no data and every
// other op finds it, and that no op but the last hop's answers with data
// the client did not ask for (any op may be last).
func SplitChain(h *Header, payload []byte) (hops, data []byte, err error) {
	n := int(h.Operand2)
	if h.Operand2 == 0 || h.Operand2 > MaxChainHops || int(h.Hop) >= n || len(payload) < n*ChainHopLen || h.Operand1 == 0 || h.Operand1 > MaxPayload {
		return nil, nil, fmt.Errorf("%w: %d hops, at hop %d, %d bytes", ErrChain, h.Operand2, h.Hop, len(payload))
	}
	hops, data = payload[:n*ChainHopLen], payload[n*ChainHopLen:]
	for i := range n {
		e := hops[i*ChainHopLen:]
		if ChainHopAt(hops, i).Check() != nil || binary.BigEndian.Uint64(e[8:])&0x0000ffffffffffff != 0 {
			return nil, nil, fmt.Errorf("%w: hop %d", ErrChain, i)
		}
	}
	switch {
	case len(data) == 0:
		data = nil
	case uint64(len(data)) != h.Operand1:
		return nil, nil, fmt.Errorf("%w: %d data bytes, want %d", ErrChain, len(data), h.Operand1)
	}
	op := ChainOp(hops[int(h.Hop)*ChainHopLen+8])
	if (op == ChainLoad) != (data == nil) {
		return nil, nil, fmt.Errorf("%w: %v with %d data bytes", ErrChain, op, len(data))
	}
	return hops, data, nil
}
