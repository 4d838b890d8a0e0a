package wire

import "encoding/binary"

// MaxSackBlocks is the most SACK blocks one ACK frame carries.
const MaxSackBlocks = 32

// AckFixedLen is the size of the fixed part of an ACK frame, in bytes.
const AckFixedLen = 24

// SackBlock is a half-open range [Start, End) of PSNs received above the
// cumulative ACK point.
type SackBlock struct {
	Start, End uint32
}

// Ack is the payload of an OpAck or OpNack packet. In an OpNack the gaps
// between Cum and the SACK blocks are missing packets the receiver asks to
// have retransmitted now.
type Ack struct {
	Cum      uint32                   // 0: next PSN expected; every PSN before it was received
	Window   uint32                   // 4: receive window: PSNs at or beyond Cum+Window are dropped
	EchoTS   uint64                   // 8: TS of the data packet that triggered this ACK
	AckDelay uint32                   // 16: ns between that packet's arrival and this ACK
	NBlocks  uint8                    // 20: number of SACK blocks
	QDelay   uint32                   // 21 (3 bytes): the echoed packet's queueing on its way, µs + 1; 0: not measured
	Blocks   [MaxSackBlocks]SackBlock // 24: NBlocks × (Start u32, End u32)
}

// EncodedLen is the frame's length in bytes.
func (a *Ack) EncodedLen() int { return AckFixedLen + 8*int(a.NBlocks) }

// Encode writes the frame into b, which must hold EncodedLen bytes, and
// returns the bytes written.
func (a *Ack) Encode(b []byte) int {
	n := a.EncodedLen()
	_ = b[n-1]
	be := binary.BigEndian
	be.PutUint32(b[0:], a.Cum)
	be.PutUint32(b[4:], a.Window)
	be.PutUint64(b[8:], a.EchoTS)
	be.PutUint32(b[16:], a.AckDelay)
	q := min(a.QDelay, MaxQDelay)
	b[20], b[21], b[22], b[23] = a.NBlocks, byte(q>>16), byte(q>>8), byte(q)
	for i := 0; i < int(a.NBlocks); i++ {
		be.PutUint32(b[AckFixedLen+8*i:], a.Blocks[i].Start)
		be.PutUint32(b[AckFixedLen+8*i+4:], a.Blocks[i].End)
	}
	return n
}

// MaxQDelay is the largest Ack.QDelay a frame carries (24 bits); Encode
// writes a larger one as MaxQDelay.
const MaxQDelay = 1<<24 - 1

// Decode parses an ACK frame. It checks the length and
// that every block is non-empty and lies above Cum in sequence space
// (modulo 2^32, within 2^31).
func (a *Ack) Decode(b []byte) error {
	if len(b) < AckFixedLen {
		return ErrAckFrame
	}
	be := binary.BigEndian
	a.Cum = be.Uint32(b[0:])
	a.Window = be.Uint32(b[4:])
	a.EchoTS = be.Uint64(b[8:])
	a.AckDelay = be.Uint32(b[16:])
	a.NBlocks = b[20]
	a.QDelay = uint32(b[21])<<16 | uint32(b[22])<<8 | uint32(b[23])
	if a.NBlocks > MaxSackBlocks || len(b) != a.EncodedLen() {
		return ErrAckFrame
	}
	for i := 0; i < int(a.NBlocks); i++ {
		s := be.Uint32(b[AckFixedLen+8*i:])
		e := be.Uint32(b[AckFixedLen+8*i+4:])
		if !SeqLess(a.Cum, s) || !SeqLess(s, e) || e-a.Cum > 1<<31 {
			return ErrAckFrame
		}
		a.Blocks[i] = SackBlock{s, e}
	}
	return nil
}

// AppendPacketAck is AppendPacket for a data packet that carries the ACK
// frame a (which must have no SACK blocks) after its payload: it sets
// FlagAck, and Len to the payload's length plus AckFixedLen. Without crc
// the checksum is left zero, as AppendPacketUnchecked leaves it.
func AppendPacketAck(buf []byte, h *Header, payload []byte, a *Ack, crc bool) ([]byte, error) {
	if a.NBlocks != 0 {
		return buf, ErrAckFrame
	}
	return appendPacket(buf, h, payload, a, crc)
}

// SplitAck splits the payload of a FlagAck packet into the data and the
// ACK frame it carries, decoded into a. A frame that does not decode, or
// has SACK blocks, is ErrAckFrame.
func SplitAck(payload []byte, a *Ack) ([]byte, error) {
	if len(payload) < AckFixedLen {
		return nil, ErrAckFrame
	}
	n := len(payload) - AckFixedLen
	if err := a.Decode(payload[n:]); err != nil || a.NBlocks != 0 {
		return nil, ErrAckFrame
	}
	return payload[:n], nil
}

// SeqLess reports whether sequence number a precedes b (serial number
// arithmetic, RFC 1982, on 32 bits).
func SeqLess(a, b uint32) bool { return int32(a-b) < 0 }

// AckPacketLen is the datagram length of an ACK packet carrying a.
func (a *Ack) AckPacketLen() int { return HeaderLen + a.EncodedLen() }

// PutAckPacket writes an ACK packet — header h (its Len set from a) and
// frame a — into b, which must hold a.AckPacketLen() bytes, seals its
// checksum and returns it.
func PutAckPacket(b []byte, h *Header, a *Ack) []byte {
	h.Len = uint16(a.EncodedLen())
	b = b[:HeaderLen+int(h.Len)]
	h.Encode(b)
	a.Encode(b[HeaderLen:])
	Seal(b)
	return b
}
