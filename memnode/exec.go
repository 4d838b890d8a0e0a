package memnode

import (
	"encoding/binary"
	"math"

	"github.com/ndma/ndma/wire"
)

// MaxReadLen is the longest READ Exec serves, in bytes (1 GiB). A longer
// request fails with wire.StatusTooLarge. The caller splits the Data of a
// READ into as many response packets as it needs.
const MaxReadLen = 1 << 30

// Result is the outcome of executing one request packet.
type Result struct {
	// Status is wire.StatusOK on success, otherwise the reason the
	// request was refused; a refused request leaves memory untouched.
	Status wire.Status

	// Old is the value of the memory word before an OpCAS or OpFetchAdd
	// (whether or not the CAS swapped). Zero for other ops and on error.
	Old uint64

	// Data is the result of an OpRead: the requested bytes as a sub-slice
	// of region memory, not a copy, with cap == len. Its contents are
	// valid until the next Exec, which may overwrite them; the caller
	// sends or copies it at once and must not modify it. Nil for other
	// ops and on error.
	Data []byte
}

// Exec executes the request described by h, with payload for OpWrite and
// OpVector, against the region h.Key names. It never panics and never
// allocates, whatever the header says; h must not be nil. Only the fields
// listed below are consulted: the payload length is len(payload) (h.Len is
// ignored — wire.Parse has already checked that they agree), and the
// delivery fields (Mode, Flags, PSN, MsgID, ...) are the caller's business.
//
// Checks are made in this order, and the first failure is the Result's
// Status: the opcode (StatusUnknownOp for anything but the five below), the
// key (StatusBadKey), the permission bit the opcode needs (StatusPermission),
// the operands (StatusTooLarge, StatusBadOperand, StatusUnknownOp), the
// alignment (StatusMisaligned), and last the bounds (StatusOutOfBounds). All
// bounds checks are overflow-safe: Addr near 2^64 cannot wrap back into the
// region.
//
//   - OpWrite (PermWrite): copies payload to region bytes
//     [Addr+Offset, Addr+Offset+len(payload)). A long message is split into
//     segments that each carry the message's base Addr and their own Offset
//     within the message; every segment is executed independently.
//   - OpRead (PermRead): returns region bytes [Addr, Addr+Operand1) in
//     Result.Data; Operand1 is the length in bytes, zero is allowed, more
//     than MaxReadLen is StatusTooLarge.
//   - OpCAS (PermAtomic): on the little-endian 64-bit word at Addr, which
//     must be 8-byte aligned: old := word; if old == Operand1 { word =
//     Operand2 }; Result.Old = old.
//   - OpFetchAdd (PermAtomic): on the little-endian 64-bit word at Addr,
//     8-byte aligned: old := word; word = old + Operand1 (wrapping);
//     Result.Old = old.
//   - OpVector (PermVector): for each little-endian element i of payload,
//     mem[i] = Alu(mem[i], payload[i]) over region bytes starting at
//     dst = Addr+Offset (segmented like OpWrite). Dtype must be F32, F64,
//     I32 or I64 (else StatusBadOperand) and Alu must be Add, Min or Max
//     (else StatusUnknownOp: AluNone and AluProd are refused). len(payload)
//     must be a multiple of the element size (else StatusBadOperand) and
//     dst a multiple of it (else StatusMisaligned).
//
// Vector arithmetic: integer elements are signed; Add wraps and Min/Max
// compare signed values. Float Add is IEEE 754 addition in the element's
// precision, as the hardware does it: a NaN operand gives a NaN, and when
// both operands are NaN, which one's payload the result carries is
// unspecified. Float Min and Max keep the memory element unless the payload
// element compares strictly less (Min) or greater (Max) with Go's < and >,
// and then store the payload element's bits unchanged. So a NaN is never
// chosen over a number: a NaN in the payload leaves memory as it was, and a
// NaN in memory stays there (every comparison with it is false) until an
// Add replaces it. Of -0 and +0, which compare equal, memory's is kept.
// This differs from math.Min and math.Max, which return NaN if either
// argument is NaN.
func (s *Store) Exec(h *wire.Header, payload []byte) Result {
	var need wire.Perm
	switch h.Op {
	case wire.OpWrite:
		need = wire.PermWrite
	case wire.OpRead:
		need = wire.PermRead
	case wire.OpCAS, wire.OpFetchAdd:
		need = wire.PermAtomic
	case wire.OpVector:
		need = wire.PermVector
	default:
		return Result{Status: wire.StatusUnknownOp}
	}
	r, ok := s.regions[h.Key]
	if !ok {
		return Result{Status: wire.StatusBadKey}
	}
	if r.perm&need == 0 {
		return Result{Status: wire.StatusPermission}
	}
	mem := r.mem

	switch h.Op {
	case wire.OpWrite:
		start, ok := span(len(mem), h.Addr, uint64(h.Offset), uint64(len(payload)))
		if !ok {
			return Result{Status: wire.StatusOutOfBounds}
		}
		copy(mem[start:], payload)
		return Result{}

	case wire.OpRead:
		n := h.Operand1
		if n > MaxReadLen {
			return Result{Status: wire.StatusTooLarge}
		}
		start, ok := span(len(mem), h.Addr, 0, n)
		if !ok {
			return Result{Status: wire.StatusOutOfBounds}
		}
		end := start + int(n)
		return Result{Data: mem[start:end:end]}

	case wire.OpCAS, wire.OpFetchAdd:
		if h.Addr%8 != 0 {
			return Result{Status: wire.StatusMisaligned}
		}
		start, ok := span(len(mem), h.Addr, 0, 8)
		if !ok {
			return Result{Status: wire.StatusOutOfBounds}
		}
		w := mem[start : start+8]
		old := binary.LittleEndian.Uint64(w)
		if h.Op == wire.OpCAS {
			if old == h.Operand1 {
				binary.LittleEndian.PutUint64(w, h.Operand2)
			}
		} else {
			binary.LittleEndian.PutUint64(w, old+h.Operand1)
		}
		return Result{Old: old}

	default: // wire.OpVector
		es := h.Dtype.Size()
		if es == 0 {
			return Result{Status: wire.StatusBadOperand}
		}
		switch h.Alu {
		case wire.AluAdd, wire.AluMin, wire.AluMax:
		default:
			return Result{Status: wire.StatusUnknownOp}
		}
		if len(payload)%es != 0 {
			return Result{Status: wire.StatusBadOperand}
		}
		// The wrapping sum is exact modulo 2^64, and es divides 2^64, so
		// its alignment is that of the true address; an overflowing sum
		// is refused by span below.
		if (h.Addr+uint64(h.Offset))%uint64(es) != 0 {
			return Result{Status: wire.StatusMisaligned}
		}
		start, ok := span(len(mem), h.Addr, uint64(h.Offset), uint64(len(payload)))
		if !ok {
			return Result{Status: wire.StatusOutOfBounds}
		}
		vector(mem[start:start+len(payload)], payload, h.Dtype, h.Alu)
		return Result{}
	}
}

// span reports whether the n bytes at addr+off lie inside a region of size
// bytes, and if so returns their start. It cannot overflow: every
// subtraction is guarded by the comparison before it.
func span(size int, addr, off, n uint64) (int, bool) {
	rem := uint64(size)
	if addr > rem {
		return 0, false
	}
	rem -= addr
	if off > rem {
		return 0, false
	}
	rem -= off
	if n > rem {
		return 0, false
	}
	return int(addr + off), true
}

// vector applies alu element-wise: m[i] = alu(m[i], p[i]). len(m) ==
// len(p), a multiple of dt's size; dt and alu are valid.
func vector(m, p []byte, dt wire.Dtype, alu wire.Alu) {
	switch dt {
	case wire.DtypeF32:
		switch alu {
		case wire.AluAdd:
			addF32(m, p)
		case wire.AluMin:
			minF32(m, p)
		case wire.AluMax:
			maxF32(m, p)
		}
	case wire.DtypeF64:
		switch alu {
		case wire.AluAdd:
			addF64(m, p)
		case wire.AluMin:
			minF64(m, p)
		case wire.AluMax:
			maxF64(m, p)
		}
	case wire.DtypeI32:
		switch alu {
		case wire.AluAdd:
			addI32(m, p)
		case wire.AluMin:
			minI32(m, p)
		case wire.AluMax:
			maxI32(m, p)
		}
	case wire.DtypeI64:
		switch alu {
		case wire.AluAdd:
			addI64(m, p)
		case wire.AluMin:
			minI64(m, p)
		case wire.AluMax:
			maxI64(m, p)
		}
	}
}

// The vector loops. Each op has an element kernel (m and p hold at least
// one element) and a driver that walks m and p in blocks of blk bytes: a
// block is resliced to constant length, so the compiler proves every
// element access in bounds and drops the checks, and the inner loop
// compiles to plain loads, one arithmetic instruction and a store. A short
// tail loop handles the last partial block. Min and Max store the
// payload's bits only when the payload element wins, so memory bits (NaN
// payloads, signed zeros) are otherwise left exactly as they were.

var le = binary.LittleEndian

// blk is the block size of the vector loops in bytes, a multiple of every
// element size.
const blk = 64

func addF32(m, p []byte) {
	for len(m) >= blk && len(p) >= blk {
		mb, pb := m[:blk:blk], p[:blk:blk]
		for j := 0; j < blk; j += 4 {
			addF32e(mb[j:], pb[j:])
		}
		m, p = m[blk:], p[blk:]
	}
	for j := 0; j+4 <= len(m) && j+4 <= len(p); j += 4 {
		addF32e(m[j:], p[j:])
	}
}

func addF32e(m, p []byte) {
	le.PutUint32(m, math.Float32bits(math.Float32frombits(le.Uint32(m))+math.Float32frombits(le.Uint32(p))))
}

func minF32(m, p []byte) {
	for len(m) >= blk && len(p) >= blk {
		mb, pb := m[:blk:blk], p[:blk:blk]
		for j := 0; j < blk; j += 4 {
			minF32e(mb[j:], pb[j:])
		}
		m, p = m[blk:], p[blk:]
	}
	for j := 0; j+4 <= len(m) && j+4 <= len(p); j += 4 {
		minF32e(m[j:], p[j:])
	}
}

func minF32e(m, p []byte) {
	if b := le.Uint32(p); math.Float32frombits(b) < math.Float32frombits(le.Uint32(m)) {
		le.PutUint32(m, b)
	}
}

func maxF32(m, p []byte) {
	for len(m) >= blk && len(p) >= blk {
		mb, pb := m[:blk:blk], p[:blk:blk]
		for j := 0; j < blk; j += 4 {
			maxF32e(mb[j:], pb[j:])
		}
		m, p = m[blk:], p[blk:]
	}
	for j := 0; j+4 <= len(m) && j+4 <= len(p); j += 4 {
		maxF32e(m[j:], p[j:])
	}
}

func maxF32e(m, p []byte) {
	if b := le.Uint32(p); math.Float32frombits(b) > math.Float32frombits(le.Uint32(m)) {
		le.PutUint32(m, b)
	}
}

func addF64(m, p []byte) {
	for len(m) >= blk && len(p) >= blk {
		mb, pb := m[:blk:blk], p[:blk:blk]
		for j := 0; j < blk; j += 8 {
			addF64e(mb[j:], pb[j:])
		}
		m, p = m[blk:], p[blk:]
	}
	for j := 0; j+8 <= len(m) && j+8 <= len(p); j += 8 {
		addF64e(m[j:], p[j:])
	}
}

func addF64e(m, p []byte) {
	le.PutUint64(m, math.Float64bits(math.Float64frombits(le.Uint64(m))+math.Float64frombits(le.Uint64(p))))
}

func minF64(m, p []byte) {
	for len(m) >= blk && len(p) >= blk {
		mb, pb := m[:blk:blk], p[:blk:blk]
		for j := 0; j < blk; j += 8 {
			minF64e(mb[j:], pb[j:])
		}
		m, p = m[blk:], p[blk:]
	}
	for j := 0; j+8 <= len(m) && j+8 <= len(p); j += 8 {
		minF64e(m[j:], p[j:])
	}
}

func minF64e(m, p []byte) {
	if b := le.Uint64(p); math.Float64frombits(b) < math.Float64frombits(le.Uint64(m)) {
		le.PutUint64(m, b)
	}
}

func maxF64(m, p []byte) {
	for len(m) >= blk && len(p) >= blk {
		mb, pb := m[:blk:blk], p[:blk:blk]
		for j := 0; j < blk; j += 8 {
			maxF64e(mb[j:], pb[j:])
		}
		m, p = m[blk:], p[blk:]
	}
	for j := 0; j+8 <= len(m) && j+8 <= len(p); j += 8 {
		maxF64e(m[j:], p[j:])
	}
}

func maxF64e(m, p []byte) {
	if b := le.Uint64(p); math.Float64frombits(b) > math.Float64frombits(le.Uint64(m)) {
		le.PutUint64(m, b)
	}
}

func addI32(m, p []byte) {
	for len(m) >= blk && len(p) >= blk {
		mb, pb := m[:blk:blk], p[:blk:blk]
		for j := 0; j < blk; j += 4 {
			addI32e(mb[j:], pb[j:])
		}
		m, p = m[blk:], p[blk:]
	}
	for j := 0; j+4 <= len(m) && j+4 <= len(p); j += 4 {
		addI32e(m[j:], p[j:])
	}
}

func addI32e(m, p []byte) {
	le.PutUint32(m, le.Uint32(m)+le.Uint32(p))
}

func minI32(m, p []byte) {
	for len(m) >= blk && len(p) >= blk {
		mb, pb := m[:blk:blk], p[:blk:blk]
		for j := 0; j < blk; j += 4 {
			minI32e(mb[j:], pb[j:])
		}
		m, p = m[blk:], p[blk:]
	}
	for j := 0; j+4 <= len(m) && j+4 <= len(p); j += 4 {
		minI32e(m[j:], p[j:])
	}
}

func minI32e(m, p []byte) {
	if b := le.Uint32(p); int32(b) < int32(le.Uint32(m)) {
		le.PutUint32(m, b)
	}
}

func maxI32(m, p []byte) {
	for len(m) >= blk && len(p) >= blk {
		mb, pb := m[:blk:blk], p[:blk:blk]
		for j := 0; j < blk; j += 4 {
			maxI32e(mb[j:], pb[j:])
		}
		m, p = m[blk:], p[blk:]
	}
	for j := 0; j+4 <= len(m) && j+4 <= len(p); j += 4 {
		maxI32e(m[j:], p[j:])
	}
}

func maxI32e(m, p []byte) {
	if b := le.Uint32(p); int32(b) > int32(le.Uint32(m)) {
		le.PutUint32(m, b)
	}
}

func addI64(m, p []byte) {
	for len(m) >= blk && len(p) >= blk {
		mb, pb := m[:blk:blk], p[:blk:blk]
		for j := 0; j < blk; j += 8 {
			addI64e(mb[j:], pb[j:])
		}
		m, p = m[blk:], p[blk:]
	}
	for j := 0; j+8 <= len(m) && j+8 <= len(p); j += 8 {
		addI64e(m[j:], p[j:])
	}
}

func addI64e(m, p []byte) {
	le.PutUint64(m, le.Uint64(m)+le.Uint64(p))
}

func minI64(m, p []byte) {
	for len(m) >= blk && len(p) >= blk {
		mb, pb := m[:blk:blk], p[:blk:blk]
		for j := 0; j < blk; j += 8 {
			minI64e(mb[j:], pb[j:])
		}
		m, p = m[blk:], p[blk:]
	}
	for j := 0; j+8 <= len(m) && j+8 <= len(p); j += 8 {
		minI64e(m[j:], p[j:])
	}
}

func minI64e(m, p []byte) {
	if b := le.Uint64(p); int64(b) < int64(le.Uint64(m)) {
		le.PutUint64(m, b)
	}
}

func maxI64(m, p []byte) {
	for len(m) >= blk && len(p) >= blk {
		mb, pb := m[:blk:blk], p[:blk:blk]
		for j := 0; j < blk; j += 8 {
			maxI64e(mb[j:], pb[j:])
		}
		m, p = m[blk:], p[blk:]
	}
	for j := 0; j+8 <= len(m) && j+8 <= len(p); j += 8 {
		maxI64e(m[j:], p[j:])
	}
}

func maxI64e(m, p []byte) {
	if b := le.Uint64(p); int64(b) > int64(le.Uint64(m)) {
		le.PutUint64(m, b)
	}
}
