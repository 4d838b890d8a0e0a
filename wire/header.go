package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Version is the protocol version carried in every packet.
const Version = 1

// HeaderLen is the size of the fixed header in bytes.
const HeaderLen = 96

// TagLen is the size of the per-packet authentication tag that follows the
// payload when FlagAuth is set (PSP-style AEAD ICV), in bytes.
const TagLen = 16

// MaxPayload is the largest payload a single packet can carry, in bytes
// (a 65507-byte UDP datagram less the header and a possible tag).
const MaxPayload = 65507 - HeaderLen - TagLen

// Opcode says what a packet asks for (or answers, with FlagResp).
type Opcode uint8

// Opcodes. Memory operations are requests; the response carries the same
// opcode with FlagResp set.
const (
	OpInvalid  Opcode = 0x00
	OpWrite    Opcode = 0x01 // write payload at Addr
	OpRead     Opcode = 0x02 // read Length bytes at Addr; response payload is the data
	OpCAS      Opcode = 0x03 // 64-bit compare-and-swap at Addr: if *Addr == Operand1 { *Addr = Operand2 }; response Operand1 = old value
	OpFetchAdd Opcode = 0x04 // 64-bit fetch-and-add at Addr of Operand1; response Operand1 = old value
	OpVector   Opcode = 0x05 // element-wise mem[Addr+i] = Alu(mem[Addr+i], payload[i]) with Dtype
	OpSend     Opcode = 0x06 // two-sided message delivered to the peer's receive queue (reserved: not yet executed)
	OpNop      Opcode = 0x07 // no operation: the responder answers StatusOK (liveness probe)
	OpControl  Opcode = 0x08 // control request to a forwarding node (join, leave, heartbeat...); payload in package fabric
	OpEvent    Opcode = 0x09 // notification from a forwarding node (e.g. a member died); Status and Operand1 say what
	OpData     Opcode = 0x0a // group data: multicast payload, aggregation contribution or result
	OpChain    Opcode = 0x0b // chained instruction through memory nodes (pool mode only): see ChainHop
	OpOptim    Opcode = 0x0c // optimizer step on parameters in memory (pool mode only): see OptimParams
	OpFence    Opcode = 0x0d // raise a fence on the memory nodes holding Addr (pool mode only): see Fence; response Operand1 = the fence's token there
	OpAck      Opcode = 0x10 // ACK/SACK frame in the payload
	OpNack     Opcode = 0x11 // ACK frame that also requests immediate retransmission of the gaps
	// OpHandshake carries a message of the handshake that opens security
	// associations (package secure) in its payload; group 0, unicast.
	OpHandshake Opcode = 0x12
)

// HandshakeSealRequired is the type (first byte) of the one-byte
// HANDSHAKE message a process that seals every datagram sends in answer
// to an unsealed datagram carrying a payload (at most a hundred a second,
// never larger than what it answers): the sender has no credential, or
// does not use it. Anyone can forge it, so a process without a security
// layer fails nothing on it: it keeps it on its stream to that address
// while nothing of the stream has been acknowledged, and its operations
// that then time out say why (transport.ErrSealRequired).
const HandshakeSealRequired = 6

var opNames = [...]string{
	OpInvalid: "invalid", OpWrite: "write", OpRead: "read", OpCAS: "cas",
	OpFetchAdd: "fadd", OpVector: "vector", OpSend: "send", OpNop: "nop",
	OpControl: "control", OpEvent: "event", OpData: "data", OpChain: "chain", OpOptim: "optim", OpFence: "fence",
	OpAck: "ack", OpNack: "nack", OpHandshake: "handshake",
}

func (o Opcode) String() string {
	if int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	return fmt.Sprintf("op(0x%02x)", uint8(o))
}

// IsData reports whether packets with this opcode are reliably delivered
// data (requests or responses), as opposed to transport control frames.
func (o Opcode) IsData() bool { return o >= OpWrite && o <= OpFence }

// Mode is the delivery mode of a packet. Only ModeUnicast is carried end to
// end today; the others are interpreted by a forwarding node (see
// docs/PROTOCOL.md for their semantics).
type Mode uint8

// Delivery modes.
const (
	ModeUnicast   Mode = 0 // to one member (Dst)
	ModeMulticast Mode = 1 // to every member of Group; the forwarding node replicates and merges ACKs
	ModeAggregate Mode = 2 // a contribution the forwarding node reduces with the other members'
	ModeAnycast   Mode = 3 // to one member of a service group chosen by the forwarding node
	// ModePool is a memory request at a pool address, or its response: a
	// self-contained datagram outside the transport's streams (no PSN, no
	// ACK). The forwarding node translates the address and forwards the
	// request to the memory node that holds it (adding FlagReplyTo); the
	// memory node answers the client directly. The client retries
	// unanswered requests; memory nodes answer duplicates of mutating
	// requests from a cache instead of applying them twice.
	ModePool  Mode = 4
	modeCount Mode = 5
)

func (m Mode) String() string {
	switch m {
	case ModeUnicast:
		return "unicast"
	case ModeMulticast:
		return "multicast"
	case ModeAggregate:
		return "aggregate"
	case ModeAnycast:
		return "anycast"
	case ModePool:
		return "pool"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Member ids with a meaning of their own.
const (
	// MemberAll addresses every member of a group (multicast) and names
	// the forwarding node as the source or destination of a group stream.
	MemberAll uint16 = 0xFFFF
)

// Flags is a bit set in the header.
type Flags uint8

// Header flags.
const (
	FlagResp Flags = 1 << 0 // packet is a response to a request with the same MsgID
	FlagAuth Flags = 1 << 1 // a TagLen-byte authentication tag follows the payload (SA in SAID)
	FlagRetx Flags = 1 << 2 // packet is a retransmission (informational)
	FlagSyn  Flags = 1 << 3 // sender has had no ACK (a challenge does not count) from this peer yet: AckBase may start a new incarnation
	// FlagReplyTo: the payload ends with a ReplyToLen-byte address the
	// response goes to (a pool request forwarded by the switch carries its
	// client's). Only with ModePool.
	FlagReplyTo Flags = 1 << 4
	// FlagAck: the payload ends with an AckFixedLen-byte ACK frame
	// without SACK blocks, acknowledging the receiver's own stream to
	// the sender: an ACK riding on data (AppendPacketAck, SplitAck).
	// Only on data packets of streams whose both ends are transport
	// engines (EngineToEngine).
	FlagAck Flags = 1 << 5
	// FlagFence: the payload ends (before any reply-to trailer) with a
	// FenceLen-byte fence trailer (AppendFence, SplitFence): the memory
	// node applies the request only if the token is at least the highest
	// it holds for the fence id. Only on pool requests (ModePool, not
	// FlagResp) of OpWrite, OpCAS, OpFetchAdd, OpVector, OpChain (every
	// hop is checked; the trailer follows the chain's data) and OpFence.
	FlagFence  Flags = 1 << 6
	flagsKnown       = FlagResp | FlagAuth | FlagRetx | FlagSyn | FlagReplyTo | FlagAck | FlagFence
)

// EngineToEngine reports whether a stream of mode m in group g has a
// transport engine at each end and nothing between them that merges or
// forwards its ACKs: the point-to-point group (group 0, ModeUnicast),
// anycast (a client's stream to the forwarding node and the node's to a
// member, each ended by the forwarding node's own engine) and aggregation
// (a member's contributions, ended by the forwarding node's engine, and
// the results it sends back on the same stream). Only there may an ACK
// ride on data (FlagAck) or be delayed.
func EngineToEngine(m Mode, g uint32) bool {
	return m == ModeAnycast || m == ModeAggregate || m == ModeUnicast && g == 0
}

// Dtype is the element type of a vector operation.
type Dtype uint8

// Element types.
const (
	DtypeNone Dtype = 0
	DtypeF32  Dtype = 1
	DtypeF64  Dtype = 2
	DtypeI32  Dtype = 3
	DtypeI64  Dtype = 4
)

// Size is the element size in bytes, or 0 for an unknown type.
func (d Dtype) Size() int {
	switch d {
	case DtypeF32, DtypeI32:
		return 4
	case DtypeF64, DtypeI64:
		return 8
	}
	return 0
}

func (d Dtype) String() string {
	switch d {
	case DtypeNone:
		return "none"
	case DtypeF32:
		return "f32"
	case DtypeF64:
		return "f64"
	case DtypeI32:
		return "i32"
	case DtypeI64:
		return "i64"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Alu is the element-wise operation of a vector op (and, later, of an
// aggregation).
type Alu uint8

// ALU operations.
const (
	AluNone Alu = 0
	AluAdd  Alu = 1
	AluMin  Alu = 2
	AluMax  Alu = 3
	AluProd Alu = 4 // used by aggregation; memory nodes refuse it for OpVector
)

func (a Alu) String() string {
	switch a {
	case AluNone:
		return "none"
	case AluAdd:
		return "add"
	case AluMin:
		return "min"
	case AluMax:
		return "max"
	case AluProd:
		return "prod"
	}
	return fmt.Sprintf("alu(%d)", uint8(a))
}

// CopiesDegraded marks Header.Copies of a pool write that reached fewer
// replicas than its region keeps (one was dead).
const CopiesDegraded uint16 = 1 << 15

// Header is the fixed 96-byte packet header. Field comments give the byte
// offset; all integers are big-endian on the wire.
type Header struct {
	Version uint8  // 0: protocol version, Version
	Op      Opcode // 1
	Mode    Mode   // 2
	Flags   Flags  // 3
	Group   uint32 // 4: group id; 0 is the implicit point-to-point group
	Src     uint16 // 8: source member id within Group
	Dst     uint16 // 10: destination member id within Group
	SAID    uint32 // 12: security association id; 0 = none
	PSN     uint32 // 16: packet sequence number (per sender, per peer, per group)
	AckBase uint32 // 20: sender's oldest unacknowledged PSN (lets a fresh receiver start its window)
	MsgID   uint64 // 24: message id, unique per sender and peer
	Offset  uint32 // 32: byte offset of this payload within the message
	MsgLen  uint32 // 36: total message length in bytes
	Len     uint16 // 40: payload length in bytes
	Status  Status // 42: status code in responses
	Dtype   Dtype  // 43: element type of a vector op
	Alu     Alu    // 44: ALU op of a vector op
	Hop     uint8  // 45: reserved for chained instructions; must be 0
	// Copies (46), in ModePool only: set by the forwarding node in a
	// request it forwards, and echoed by the memory node in the response,
	// the number of memory nodes the request went to (a write to a
	// replicated region goes to every live replica), with CopiesDegraded
	// set if a replica was dead and left out. Must be 0 otherwise.
	Copies   uint16
	Addr     uint64 // 48: remote address (byte offset in the region)
	Key      uint64 // 56: region key
	Operand1 uint64 // 64: compare value (CAS), addend (FetchAdd), length (Read); old value in responses
	Operand2 uint64 // 72: swap value (CAS)
	TS       uint64 // 80: sender timestamp in ns (echoed in ACKs for RTT)
	// SASeq (88): with FlagAuth, the low 32 bits of the sender's 64-bit
	// sequence number in the security association SAID (package secure);
	// 0 otherwise.
	SASeq uint32
	// 92: CRC32C of the header (with this field zero) and payload; with
	// FlagAuth of the header only (the AEAD tag covers the payload).
}

// Decoding errors. All are comparable with errors.Is.
var (
	ErrShort    = errors.New("wire: packet shorter than its header or payload")
	ErrVersion  = errors.New("wire: unsupported version")
	ErrChecksum = errors.New("wire: checksum mismatch")
	ErrOpcode   = errors.New("wire: unknown opcode")
	ErrMode     = errors.New("wire: unknown delivery mode")
	ErrFlags    = errors.New("wire: unknown flags")
	ErrReserved = errors.New("wire: reserved field not zero")
	ErrLength   = errors.New("wire: inconsistent lengths")
	ErrTooLarge = errors.New("wire: payload too large")
	ErrAckFrame = errors.New("wire: malformed ack frame")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

const crcOff = 92

// Encode writes h into b[:HeaderLen] with a zero checksum field. It panics
// if b is shorter than HeaderLen (a programming error, not input).
func (h *Header) Encode(b []byte) {
	_ = b[HeaderLen-1]
	b[0] = h.Version
	b[1] = byte(h.Op)
	b[2] = byte(h.Mode)
	b[3] = byte(h.Flags)
	be := binary.BigEndian
	be.PutUint32(b[4:], h.Group)
	be.PutUint16(b[8:], h.Src)
	be.PutUint16(b[10:], h.Dst)
	be.PutUint32(b[12:], h.SAID)
	be.PutUint32(b[16:], h.PSN)
	be.PutUint32(b[20:], h.AckBase)
	be.PutUint64(b[24:], h.MsgID)
	be.PutUint32(b[32:], h.Offset)
	be.PutUint32(b[36:], h.MsgLen)
	be.PutUint16(b[40:], h.Len)
	b[42] = byte(h.Status)
	b[43] = byte(h.Dtype)
	b[44] = byte(h.Alu)
	b[45] = h.Hop
	be.PutUint16(b[46:], h.Copies)
	be.PutUint64(b[48:], h.Addr)
	be.PutUint64(b[56:], h.Key)
	be.PutUint64(b[64:], h.Operand1)
	be.PutUint64(b[72:], h.Operand2)
	be.PutUint64(b[80:], h.TS)
	be.PutUint32(b[88:], h.SASeq)
	be.PutUint32(b[crcOff:], 0)
}

// decode fills h from b without validating; b must hold HeaderLen bytes.
func (h *Header) decode(b []byte) {
	be := binary.BigEndian
	h.Version = b[0]
	h.Op = Opcode(b[1])
	h.Mode = Mode(b[2])
	h.Flags = Flags(b[3])
	h.Group = be.Uint32(b[4:])
	h.Src = be.Uint16(b[8:])
	h.Dst = be.Uint16(b[10:])
	h.SAID = be.Uint32(b[12:])
	h.PSN = be.Uint32(b[16:])
	h.AckBase = be.Uint32(b[20:])
	h.MsgID = be.Uint64(b[24:])
	h.Offset = be.Uint32(b[32:])
	h.MsgLen = be.Uint32(b[36:])
	h.Len = be.Uint16(b[40:])
	h.Status = Status(b[42])
	h.Dtype = Dtype(b[43])
	h.Alu = Alu(b[44])
	h.Hop = b[45]
	h.Copies = be.Uint16(b[46:])
	h.Addr = be.Uint64(b[48:])
	h.Key = be.Uint64(b[56:])
	h.Operand1 = be.Uint64(b[64:])
	h.Operand2 = be.Uint64(b[72:])
	h.TS = be.Uint64(b[80:])
	h.SASeq = be.Uint32(b[88:])
}

// PacketLen is the datagram length of a packet with h's payload length.
func (h *Header) PacketLen() int {
	n := HeaderLen + int(h.Len)
	if h.Flags&FlagAuth != 0 {
		n += TagLen
	}
	return n
}

// Seal computes the CRC32C of pkt (header followed by payload, without any
// authentication tag; of the header alone if FlagAuth is set, since the
// tag authenticates the payload) and stores it in the header's checksum
// field. pkt must start with an encoded header.
func Seal(pkt []byte) {
	binary.BigEndian.PutUint32(pkt[crcOff:], checksum(pkt))
}

// zeroCRC stands in for the checksum field while computing it. It is a
// package variable because crc32.Update's argument escapes.
var zeroCRC [4]byte

func checksum(pkt []byte) uint32 {
	c := crc32.Update(0, castagnoli, pkt[:crcOff])
	c = crc32.Update(c, castagnoli, zeroCRC[:])
	if Flags(pkt[3])&FlagAuth != 0 {
		return c
	}
	return crcUpdate(c, pkt[HeaderLen:])
}

// AppendHeader encodes h for payload into buf[:0]'s backing array
// (growing it if needed), sets h.Len and seals the checksum over the
// header and payload, without copying the payload: the packet is the
// returned header followed by payload (netio.Datagram's Buf and Tail).
// It allocates only if cap(buf) < HeaderLen.
func AppendHeader(buf []byte, h *Header, payload []byte) ([]byte, error) {
	buf, c, err := headerCRC(buf, h, len(payload))
	if err != nil {
		return buf, err
	}
	if h.Flags&FlagAuth == 0 {
		c = crcUpdate(c, payload)
	}
	binary.BigEndian.PutUint32(buf[crcOff:], c)
	return buf, nil
}

// headerCRC encodes h for a payload of n bytes into buf[:0]'s backing
// array (growing it if cap(buf) < HeaderLen), sets h.Len, and returns the
// header and the CRC32C over it with the checksum field zero.
func headerCRC(buf []byte, h *Header, n int) ([]byte, uint32, error) {
	if n > MaxPayload {
		return buf, 0, ErrTooLarge
	}
	h.Len = uint16(n)
	if cap(buf) < HeaderLen {
		buf = make([]byte, HeaderLen)
	}
	buf = buf[:HeaderLen]
	h.Encode(buf)
	c := crc32.Update(0, castagnoli, buf[:crcOff])
	return buf, crc32.Update(c, castagnoli, zeroCRC[:]), nil
}

// AppendPacket encodes h with payload into buf[:0]'s backing array (growing
// it if needed), sets h.Len, seals the checksum and returns the packet. It
// allocates only if cap(buf) is too small.
func AppendPacket(buf []byte, h *Header, payload []byte) ([]byte, error) {
	return appendPacket(buf, h, payload, nil, true)
}

// appendPacket encodes h, payload and, if a is not nil, the ACK frame a
// riding after the payload (FlagAck set), and seals the checksum if crc.
func appendPacket(buf []byte, h *Header, payload []byte, a *Ack, crc bool) ([]byte, error) {
	n := len(payload)
	if a != nil {
		h.Flags |= FlagAck
		n += AckFixedLen
	}
	if n > MaxPayload {
		return buf, ErrTooLarge
	}
	h.Len = uint16(n)
	n += HeaderLen
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	h.Encode(buf)
	copy(buf[HeaderLen:], payload)
	if a != nil {
		a.Encode(buf[HeaderLen+len(payload):])
	}
	if crc {
		Seal(buf)
	}
	return buf, nil
}

// AppendPacketUnchecked is AppendPacket without the checksum (the field is
// left zero), for a packet a security layer will seal: it checksums the
// sealed packet itself.
func AppendPacketUnchecked(buf []byte, h *Header, payload []byte) ([]byte, error) {
	return appendPacket(buf, h, payload, nil, false)
}

// Parse validates the datagram pkt and decodes its header into h. It returns
// the payload, a sub-slice of pkt, and (if FlagAuth is set) the tag. It
// checks, in order: length, version, checksum, then field values, so that a
// corrupted packet reports ErrChecksum. Parse never panics and never
// allocates.
func Parse(pkt []byte, h *Header) (payload, tag []byte, err error) {
	return parse(pkt, h, true)
}

// ParseVerified is Parse without the checksum, for a packet whose every
// byte a layer below has already authenticated (package secure's Layer
// opened it: the AEAD tag covered header and payload), so checking the
// CRC32C again would only cost time. Never call it on a datagram as it
// came from the network.
func ParseVerified(pkt []byte, h *Header) (payload, tag []byte, err error) {
	return parse(pkt, h, false)
}

// ParseAfter is ParseVerified when verified says a layer below
// authenticated every datagram (a transport.Config.Verified core), and
// Parse otherwise.
func ParseAfter(pkt []byte, h *Header, verified bool) (payload, tag []byte, err error) {
	return parse(pkt, h, !verified)
}

func parse(pkt []byte, h *Header, crc bool) (payload, tag []byte, err error) {
	if len(pkt) < HeaderLen {
		return nil, nil, ErrShort
	}
	if pkt[0] != Version {
		return nil, nil, ErrVersion
	}
	h.decode(pkt)
	end := HeaderLen + int(h.Len)
	total := end
	if h.Flags&FlagAuth != 0 {
		total += TagLen
	}
	if len(pkt) < total {
		return nil, nil, ErrShort
	}
	if len(pkt) > total {
		return nil, nil, ErrLength
	}
	if crc && binary.BigEndian.Uint32(pkt[crcOff:]) != checksum(pkt[:end]) {
		return nil, nil, ErrChecksum
	}
	if err := h.validate(); err != nil {
		return nil, nil, err
	}
	if h.Flags&FlagAuth != 0 {
		tag = pkt[end:total]
	}
	return pkt[HeaderLen:end], tag, nil
}

func (h *Header) validate() error {
	switch {
	case h.Op.IsData(), h.Op == OpAck, h.Op == OpNack:
	case h.Op == OpHandshake:
		if h.Group != 0 || h.Mode != ModeUnicast || h.Flags != 0 {
			return ErrMode
		}
	default:
		return ErrOpcode
	}
	if h.Mode >= modeCount {
		return ErrMode
	}
	if h.Flags&^flagsKnown != 0 {
		return ErrFlags
	}
	if h.Flags&FlagReplyTo != 0 && (h.Mode != ModePool || h.Len < ReplyToLen) {
		return ErrFlags
	}
	if err := h.validateFence(); err != nil {
		return err
	}
	if h.Flags&FlagAck != 0 && (!EngineToEngine(h.Mode, h.Group) || !h.Op.IsData() || h.Len < AckFixedLen) {
		return ErrFlags
	}
	if (h.SASeq != 0 || h.SAID != 0) && h.Flags&FlagAuth == 0 || (h.Copies != 0 && h.Mode != ModePool) || (h.Hop != 0 && h.Op != OpChain) {
		return ErrReserved
	}
	if (h.Op == OpChain || h.Op == OpOptim || h.Op == OpFence) && h.Mode != ModePool {
		return ErrMode
	}
	if h.Op.IsData() {
		n := uint64(h.Len)
		if h.Flags&FlagAck != 0 {
			n -= AckFixedLen
		}
		if uint64(h.Offset)+n > uint64(h.MsgLen) {
			return ErrLength
		}
	}
	return nil
}
