package memnode

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/ndma/ndma/wire"
)

// Little-endian encoders for expected memory and payloads.

func u64s(v ...uint64) []byte {
	b := make([]byte, 0, 8*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, x)
	}
	return b
}

func i64s(v ...int64) []byte {
	b := make([]byte, 0, 8*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	return b
}

func i32s(v ...int32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, uint32(x))
	}
	return b
}

func f32s(v ...float32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

func f64s(v ...float64) []byte {
	b := make([]byte, 0, 8*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
	}
	return b
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

const (
	tKey  = 0x7e57
	tSize = 64
	wrap8 = math.MaxUint64 - 7 // 2^64-8: 8-aligned, and +8 wraps to 0
)

var (
	nan32  = float32(math.NaN())
	nan64  = math.NaN()
	negZ32 = float32(math.Copysign(0, -1))
)

// pattern is the default initial content of the test region: byte i is i.
func pattern() []byte {
	b := make([]byte, tSize)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

// patch returns a copy of the pattern with b written at off.
func patch(off int, b []byte) []byte {
	m := pattern()
	copy(m[off:], b)
	return m
}

// memWith returns a 64-byte region that starts with b and is zero after.
func memWith(b []byte) []byte {
	m := make([]byte, tSize)
	copy(m, b)
	return m
}

type execCase struct {
	name    string
	perm    wire.Perm // region permissions; zero means wire.PermAll (use noPerm for none)
	mem     []byte    // initial region content; nil means pattern()
	h       wire.Header
	payload []byte
	want    Result // Data compared by content
	wantMem []byte // region content afterwards; nil means unchanged
}

const noPerm wire.Perm = 0x80 // test marker: the region allows nothing

func execCases() []execCase {
	W, R, C, F, V := wire.OpWrite, wire.OpRead, wire.OpCAS, wire.OpFetchAdd, wire.OpVector
	hdr := func(op wire.Opcode, addr uint64) wire.Header { return wire.Header{Op: op, Key: tKey, Addr: addr} }
	vec := func(dt wire.Dtype, alu wire.Alu, addr uint64, off uint32) wire.Header {
		return wire.Header{Op: V, Key: tKey, Addr: addr, Offset: off, Dtype: dt, Alu: alu}
	}
	with := func(h wire.Header, f func(*wire.Header)) wire.Header { f(&h); return h }
	read := func(addr, n uint64) wire.Header { return wire.Header{Op: R, Key: tKey, Addr: addr, Operand1: n} }
	cas := func(addr, cmp, swap uint64) wire.Header {
		return wire.Header{Op: C, Key: tKey, Addr: addr, Operand1: cmp, Operand2: swap}
	}
	fadd := func(addr, v uint64) wire.Header { return wire.Header{Op: F, Key: tKey, Addr: addr, Operand1: v} }
	st := func(s wire.Status) Result { return Result{Status: s} }
	ok := Result{}
	abc := []byte("abc")

	return []execCase{
		// Opcode, key and permission refusals, and their order.
		{name: "unknown op invalid", h: hdr(wire.OpInvalid, 0), want: st(wire.StatusUnknownOp)},
		{name: "unknown op send", h: hdr(wire.OpSend, 0), payload: abc, want: st(wire.StatusUnknownOp)},
		{name: "unknown op ack", h: hdr(wire.OpAck, 0), want: st(wire.StatusUnknownOp)},
		{name: "unknown op nack", h: hdr(wire.OpNack, 0), want: st(wire.StatusUnknownOp)},
		{name: "unknown op 0xff", h: hdr(0xff, 0), want: st(wire.StatusUnknownOp)},
		{name: "unknown op before bad key", h: wire.Header{Op: 0x42, Key: 1}, want: st(wire.StatusUnknownOp)},
		{name: "bad key write", h: wire.Header{Op: W, Key: tKey + 1}, payload: abc, want: st(wire.StatusBadKey)},
		{name: "bad key zero", h: wire.Header{Op: R, Key: 0, Operand1: 1}, want: st(wire.StatusBadKey)},
		{name: "bad key before perm", perm: noPerm, h: wire.Header{Op: C, Key: 9}, want: st(wire.StatusBadKey)},
		{name: "perm write", perm: wire.PermAll &^ wire.PermWrite, h: hdr(W, 0), payload: abc, want: st(wire.StatusPermission)},
		{name: "perm read", perm: wire.PermAll &^ wire.PermRead, h: read(0, 1), want: st(wire.StatusPermission)},
		{name: "perm cas", perm: wire.PermAll &^ wire.PermAtomic, h: cas(0, 0, 1), want: st(wire.StatusPermission)},
		{name: "perm fadd", perm: wire.PermRead | wire.PermWrite, h: fadd(0, 1), want: st(wire.StatusPermission)},
		{name: "perm vector", perm: wire.PermAll &^ wire.PermVector, h: vec(wire.DtypeI32, wire.AluAdd, 0, 0), payload: i32s(1), want: st(wire.StatusPermission)},
		{name: "perm none", perm: noPerm, h: read(0, 0), want: st(wire.StatusPermission)},
		{name: "perm before operands", perm: wire.PermRead, h: vec(0, 0, 3, 0), payload: abc, want: st(wire.StatusPermission)},
		{name: "vector needs only PermVector", perm: wire.PermVector, h: vec(wire.DtypeI32, wire.AluAdd, 0, 0), payload: i32s(1),
			want: ok, wantMem: patch(0, i32s(0x03020100+1))},
		{name: "atomic needs only PermAtomic", perm: wire.PermAtomic, h: fadd(0, 1), want: Result{Old: 0x0706050403020100},
			wantMem: patch(0, u64s(0x0706050403020101))},

		// WRITE.
		{name: "write", h: hdr(W, 8), payload: abc, want: ok, wantMem: patch(8, abc)},
		{name: "write segment offset", h: with(hdr(W, 8), func(h *wire.Header) { h.Offset = 16 }), payload: abc, want: ok, wantMem: patch(24, abc)},
		{name: "write to the end", h: hdr(W, 61), payload: abc, want: ok, wantMem: patch(61, abc)},
		{name: "write whole region", h: hdr(W, 0), payload: bytes.Repeat([]byte{9}, tSize), want: ok, wantMem: bytes.Repeat([]byte{9}, tSize)},
		{name: "write empty at end", h: hdr(W, tSize), want: ok},
		{name: "write empty past end", h: hdr(W, tSize+1), want: st(wire.StatusOutOfBounds)},
		{name: "write one past end", h: hdr(W, 62), payload: abc, want: st(wire.StatusOutOfBounds)},
		{name: "write offset past end", h: with(hdr(W, 0), func(h *wire.Header) { h.Offset = 62 }), payload: abc, want: st(wire.StatusOutOfBounds)},
		{name: "write too long", h: hdr(W, 0), payload: make([]byte, tSize+1), want: st(wire.StatusOutOfBounds)},
		{name: "write wrap addr", h: hdr(W, wrap8), payload: make([]byte, 16), want: st(wire.StatusOutOfBounds)},
		{name: "write wrap addr+offset", h: with(hdr(W, math.MaxUint64), func(h *wire.Header) { h.Offset = 1 }), payload: abc, want: st(wire.StatusOutOfBounds)},
		{name: "write huge offset", h: with(hdr(W, 0), func(h *wire.Header) { h.Offset = math.MaxUint32 }), payload: abc, want: st(wire.StatusOutOfBounds)},
		{name: "write ignores h.Len", h: with(hdr(W, 0), func(h *wire.Header) { h.Len = 60000 }), payload: abc, want: ok, wantMem: patch(0, abc)},

		// READ.
		{name: "read", h: read(5, 3), want: Result{Data: []byte{5, 6, 7}}},
		{name: "read empty", h: read(10, 0), want: Result{Data: []byte{}}},
		{name: "read empty at end", h: read(tSize, 0), want: Result{Data: []byte{}}},
		{name: "read whole region", h: read(0, tSize), want: Result{Data: pattern()}},
		{name: "read past end", h: read(60, 5), want: st(wire.StatusOutOfBounds)},
		{name: "read addr past end", h: read(tSize+1, 0), want: st(wire.StatusOutOfBounds)},
		{name: "read wrap", h: read(wrap8, 16), want: st(wire.StatusOutOfBounds)},
		{name: "read max addr", h: read(math.MaxUint64, 1), want: st(wire.StatusOutOfBounds)},
		{name: "read MaxReadLen is out of bounds", h: read(0, MaxReadLen), want: st(wire.StatusOutOfBounds)},
		{name: "read too large", h: read(0, MaxReadLen+1), want: st(wire.StatusTooLarge)},
		{name: "read huge length", h: read(8, math.MaxUint64), want: st(wire.StatusTooLarge)},

		// CAS.
		{name: "cas swaps", h: cas(8, 0x0f0e0d0c0b0a0908, 42), want: Result{Old: 0x0f0e0d0c0b0a0908}, wantMem: patch(8, u64s(42))},
		{name: "cas mismatch", h: cas(8, 1, 42), want: Result{Old: 0x0f0e0d0c0b0a0908}},
		{name: "cas last word", mem: memWith(nil), h: cas(56, 0, math.MaxUint64), want: ok,
			wantMem: cat(make([]byte, 56), u64s(math.MaxUint64))},
		{name: "cas misaligned", h: cas(4, 0, 1), want: st(wire.StatusMisaligned)},
		{name: "cas misaligned past end", h: cas(61, 0, 1), want: st(wire.StatusMisaligned)},
		{name: "cas past end", h: cas(tSize, 0, 1), want: st(wire.StatusOutOfBounds)},
		{name: "cas wrap", h: cas(wrap8, 0, 1), want: st(wire.StatusOutOfBounds)},
		{name: "cas ignores offset", h: with(cas(0, 0x0706050403020100, 5), func(h *wire.Header) { h.Offset = 8 }),
			want: Result{Old: 0x0706050403020100}, wantMem: patch(0, u64s(5))},

		// FETCH-ADD.
		{name: "fadd", mem: memWith(u64s(0, 100)), h: fadd(8, 23), want: Result{Old: 100}, wantMem: memWith(u64s(0, 123))},
		{name: "fadd wraps", mem: memWith(u64s(math.MaxUint64)), h: fadd(0, 2), want: Result{Old: math.MaxUint64}, wantMem: memWith(u64s(1))},
		{name: "fadd negative", mem: memWith(u64s(5)), h: fadd(0, math.MaxUint64), want: Result{Old: 5}, wantMem: memWith(u64s(4))},
		{name: "fadd misaligned", h: fadd(1, 1), want: st(wire.StatusMisaligned)},
		{name: "fadd past end", h: fadd(64, 1), want: st(wire.StatusOutOfBounds)},
		{name: "fadd wrap", h: fadd(wrap8, 1), want: st(wire.StatusOutOfBounds)},

		// VECTOR operand refusals and their order.
		{name: "vec dtype none", h: vec(wire.DtypeNone, wire.AluAdd, 0, 0), payload: i32s(1), want: st(wire.StatusBadOperand)},
		{name: "vec dtype unknown", h: vec(9, wire.AluAdd, 0, 0), payload: i32s(1), want: st(wire.StatusBadOperand)},
		{name: "vec dtype before alu", h: vec(9, 9, 0, 0), payload: i32s(1), want: st(wire.StatusBadOperand)},
		{name: "vec alu none", h: vec(wire.DtypeI32, wire.AluNone, 0, 0), payload: i32s(1), want: st(wire.StatusUnknownOp)},
		{name: "vec alu prod", h: vec(wire.DtypeF32, wire.AluProd, 0, 0), payload: f32s(2), want: st(wire.StatusUnknownOp)},
		{name: "vec alu unknown", h: vec(wire.DtypeF64, 0xff, 0, 0), payload: f64s(2), want: st(wire.StatusUnknownOp)},
		{name: "vec payload not whole elements", h: vec(wire.DtypeF32, wire.AluAdd, 0, 0), payload: make([]byte, 6), want: st(wire.StatusBadOperand)},
		{name: "vec payload before alignment", h: vec(wire.DtypeI64, wire.AluAdd, 3, 0), payload: make([]byte, 4), want: st(wire.StatusBadOperand)},
		{name: "vec misaligned f32", h: vec(wire.DtypeF32, wire.AluAdd, 2, 0), payload: f32s(1), want: st(wire.StatusMisaligned)},
		{name: "vec misaligned f64", h: vec(wire.DtypeF64, wire.AluMin, 4, 0), payload: f64s(1), want: st(wire.StatusMisaligned)},
		{name: "vec misaligned offset", h: vec(wire.DtypeI32, wire.AluMax, 0, 2), payload: i32s(1), want: st(wire.StatusMisaligned)},
		{name: "vec misaligned before bounds", h: vec(wire.DtypeI64, wire.AluAdd, 1<<40+1, 0), payload: i64s(1), want: st(wire.StatusMisaligned)},
		{name: "vec past end", h: vec(wire.DtypeI64, wire.AluAdd, 56, 0), payload: i64s(1, 2), want: st(wire.StatusOutOfBounds)},
		{name: "vec wrap", h: vec(wire.DtypeI64, wire.AluAdd, wrap8, 0), payload: i64s(1, 2), want: st(wire.StatusOutOfBounds)},
		{name: "vec wrap addr+offset to 0", h: vec(wire.DtypeI64, wire.AluAdd, wrap8, 8), payload: i64s(1), want: st(wire.StatusOutOfBounds)},
		{name: "vec empty", h: vec(wire.DtypeF64, wire.AluAdd, 64, 0), want: ok},

		// VECTOR arithmetic.
		{name: "vec add f32", mem: memWith(f32s(1, 2.5, -3)), h: vec(wire.DtypeF32, wire.AluAdd, 0, 0),
			payload: f32s(10, 0.25, 3), want: ok, wantMem: memWith(f32s(11, 2.75, 0))},
		{name: "vec min f32", mem: memWith(f32s(1, 2, -3, 4)), h: vec(wire.DtypeF32, wire.AluMin, 0, 0),
			payload: f32s(0, 5, -4, 4), want: ok, wantMem: memWith(f32s(0, 2, -4, 4))},
		{name: "vec max f32", mem: memWith(f32s(1, 2, -3, 4)), h: vec(wire.DtypeF32, wire.AluMax, 0, 0),
			payload: f32s(0, 5, -4, 4), want: ok, wantMem: memWith(f32s(1, 5, -3, 4))},
		{name: "vec add f64 segment", mem: memWith(f64s(1, 2, 3, 4)), h: vec(wire.DtypeF64, wire.AluAdd, 8, 8),
			payload: f64s(0.5, 0.5), want: ok, wantMem: memWith(f64s(1, 2, 3.5, 4.5))},
		{name: "vec min f64", mem: memWith(f64s(1, math.Inf(1))), h: vec(wire.DtypeF64, wire.AluMin, 0, 0),
			payload: f64s(-1, 7), want: ok, wantMem: memWith(f64s(-1, 7))},
		{name: "vec max f64", mem: memWith(f64s(1, math.Inf(-1))), h: vec(wire.DtypeF64, wire.AluMax, 0, 0),
			payload: f64s(-1, -7), want: ok, wantMem: memWith(f64s(1, -7))},
		{name: "vec add i32 wraps", mem: memWith(i32s(math.MaxInt32, -5)), h: vec(wire.DtypeI32, wire.AluAdd, 0, 0),
			payload: i32s(1, 3), want: ok, wantMem: memWith(i32s(math.MinInt32, -2))},
		{name: "vec min i32 signed", mem: memWith(i32s(1, -1, 7)), h: vec(wire.DtypeI32, wire.AluMin, 0, 0),
			payload: i32s(-1, 1, 7), want: ok, wantMem: memWith(i32s(-1, -1, 7))},
		{name: "vec max i32 signed", mem: memWith(i32s(1, -1, math.MinInt32)), h: vec(wire.DtypeI32, wire.AluMax, 0, 0),
			payload: i32s(-1, 1, math.MaxInt32), want: ok, wantMem: memWith(i32s(1, 1, math.MaxInt32))},
		{name: "vec add i64 wraps", mem: memWith(i64s(math.MaxInt64, 10)), h: vec(wire.DtypeI64, wire.AluAdd, 0, 0),
			payload: i64s(1, -20), want: ok, wantMem: memWith(i64s(math.MinInt64, -10))},
		{name: "vec min i64 signed", mem: memWith(i64s(0, 5)), h: vec(wire.DtypeI64, wire.AluMin, 0, 0),
			payload: i64s(math.MinInt64, 6), want: ok, wantMem: memWith(i64s(math.MinInt64, 5))},
		{name: "vec max i64 signed", mem: memWith(i64s(0, 5)), h: vec(wire.DtypeI64, wire.AluMax, 0, 0),
			payload: i64s(-1, 6), want: ok, wantMem: memWith(i64s(0, 6))},
		{name: "vec last element", mem: memWith(nil), h: vec(wire.DtypeI32, wire.AluAdd, 60, 0),
			payload: i32s(-1), want: ok, wantMem: cat(make([]byte, 60), i32s(-1))},

		// NaN and signed zero, as documented on Exec.
		{name: "vec min f32 NaN payload ignored", mem: memWith(f32s(1, 2)), h: vec(wire.DtypeF32, wire.AluMin, 0, 0),
			payload: f32s(nan32, 0), want: ok, wantMem: memWith(f32s(1, 0))},
		{name: "vec max f32 NaN payload ignored", mem: memWith(f32s(1)), h: vec(wire.DtypeF32, wire.AluMax, 0, 0),
			payload: f32s(nan32), want: ok},
		{name: "vec min f64 NaN memory sticks", mem: memWith(f64s(nan64)), h: vec(wire.DtypeF64, wire.AluMin, 0, 0),
			payload: f64s(math.Inf(-1)), want: ok},
		{name: "vec max f64 NaN memory sticks", mem: memWith(f64s(nan64)), h: vec(wire.DtypeF64, wire.AluMax, 0, 0),
			payload: f64s(math.Inf(1)), want: ok},
		{name: "vec add f32 NaN propagates", mem: memWith(f32s(1)), h: vec(wire.DtypeF32, wire.AluAdd, 0, 0),
			payload: f32s(nan32), want: ok, wantMem: memWith(f32s(nan32))},
		{name: "vec min f32 keeps memory zero sign", mem: memWith(f32s(0, negZ32)), h: vec(wire.DtypeF32, wire.AluMin, 0, 0),
			payload: f32s(negZ32, 0), want: ok},
		{name: "vec max f32 keeps memory zero sign", mem: memWith(f32s(0, negZ32)), h: vec(wire.DtypeF32, wire.AluMax, 0, 0),
			payload: f32s(negZ32, 0), want: ok},
	}
}

// newCaseStore builds a store holding the case's region and returns it with
// the region's memory.
func newCaseStore(t testing.TB, tc *execCase) (*Store, []byte) {
	t.Helper()
	s, err := NewStore(Config{})
	if err != nil {
		t.Fatal(err)
	}
	mem := pattern()
	if tc.mem != nil {
		mem = bytes.Clone(tc.mem)
	}
	perm := tc.perm
	switch perm {
	case 0:
		perm = wire.PermAll
	case noPerm:
		perm = 0
	}
	if _, err := s.Register(mem, perm, tKey); err != nil {
		t.Fatal(err)
	}
	return s, mem
}

func TestExec(t *testing.T) {
	for _, tc := range execCases() {
		t.Run(tc.name, func(t *testing.T) {
			s, mem := newCaseStore(t, &tc)
			before := bytes.Clone(mem)
			h := tc.h
			got := s.Exec(&h, tc.payload)
			if got.Status != tc.want.Status || got.Old != tc.want.Old {
				t.Errorf("Exec = {%v, Old %#x}, want {%v, Old %#x}", got.Status, got.Old, tc.want.Status, tc.want.Old)
			}
			if (got.Data == nil) != (tc.want.Data == nil) || !bytes.Equal(got.Data, tc.want.Data) {
				t.Errorf("Data = %v, want %v", got.Data, tc.want.Data)
			}
			if got.Data != nil && cap(got.Data) != len(got.Data) {
				t.Errorf("cap(Data) = %d, want len %d", cap(got.Data), len(got.Data))
			}
			want := tc.wantMem
			if want == nil {
				want = before
			}
			if !bytes.Equal(mem, want) {
				t.Errorf("memory after:\n got %x\nwant %x", mem, want)
			}
			if h != tc.h {
				t.Errorf("Exec modified the header")
			}
		})
	}
}

// TestExecReadAliases checks that READ data is region memory, not a copy.
func TestExecReadAliases(t *testing.T) {
	s, _ := NewStore(Config{})
	mem := make([]byte, 16)
	s.Register(mem, wire.PermAll, 1)
	r := s.Exec(&wire.Header{Op: wire.OpRead, Key: 1, Addr: 4, Operand1: 4}, nil)
	mem[5] = 0xaa
	if r.Data[1] != 0xaa {
		t.Fatal("READ data is not a view of region memory")
	}
}

// TestExecSegmentedWrite writes one message as segments in random order
// and checks the result equals one big write.
func TestExecSegmentedWrite(t *testing.T) {
	s, _ := NewStore(Config{})
	mem := make([]byte, 4096)
	s.Register(mem, wire.PermAll, 1)
	msg := make([]byte, 3000)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	const base, seg = 100, 512
	for _, i := range []int{5, 0, 3, 1, 4, 2} {
		off := i * seg
		end := min(off+seg, len(msg))
		h := wire.Header{Op: wire.OpWrite, Key: 1, Addr: base, Offset: uint32(off), MsgLen: uint32(len(msg))}
		if r := s.Exec(&h, msg[off:end]); r.Status != wire.StatusOK {
			t.Fatalf("segment %d: %v", i, r.Status)
		}
	}
	if !bytes.Equal(mem[base:base+len(msg)], msg) {
		t.Fatal("segmented write did not reassemble the message")
	}
}

func TestExecAllocs(t *testing.T) {
	for _, tc := range execCases() {
		s, _ := newCaseStore(t, &tc)
		h := tc.h
		if n := testing.AllocsPerRun(100, func() { s.Exec(&h, tc.payload) }); n != 0 {
			t.Errorf("%s: %v allocs per Exec, want 0", tc.name, n)
		}
	}
}

func BenchmarkExecWrite4K(b *testing.B) {
	s, _ := NewStore(Config{})
	key, err := s.Alloc(1<<20, wire.PermAll, 0)
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 4096)
	h := wire.Header{Op: wire.OpWrite, Key: key}
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		h.Addr = uint64(i%256) * 4096
		if r := s.Exec(&h, payload); r.Status != wire.StatusOK {
			b.Fatal(r.Status)
		}
	}
}

func benchVector(b *testing.B, dt wire.Dtype, alu wire.Alu, size int) {
	s, _ := NewStore(Config{})
	key, err := s.Alloc(size, wire.PermAll, 0)
	if err != nil {
		b.Fatal(err)
	}
	// Normal (not subnormal) floats: subnormal arithmetic is microcoded on
	// x86 and would measure the FPU, not the executor.
	var payload []byte
	for i := 0; len(payload) < size; i++ {
		switch dt {
		case wire.DtypeF32:
			payload = append(payload, f32s(float32(i)+0.5)...)
		case wire.DtypeF64:
			payload = append(payload, f64s(float64(i)+0.5)...)
		case wire.DtypeI32:
			payload = append(payload, i32s(int32(i))...)
		default:
			payload = append(payload, i64s(int64(i))...)
		}
	}
	h := wire.Header{Op: wire.OpVector, Key: key, Dtype: dt, Alu: alu}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		if r := s.Exec(&h, payload); r.Status != wire.StatusOK {
			b.Fatal(r.Status)
		}
	}
}

func BenchmarkExecVectorAddF32_64K(b *testing.B) { benchVector(b, wire.DtypeF32, wire.AluAdd, 64<<10) }
func BenchmarkExecVectorMaxF64_64K(b *testing.B) { benchVector(b, wire.DtypeF64, wire.AluMax, 64<<10) }
func BenchmarkExecVectorAddI64_64K(b *testing.B) { benchVector(b, wire.DtypeI64, wire.AluAdd, 64<<10) }
func BenchmarkExecVectorMinI32_64K(b *testing.B) { benchVector(b, wire.DtypeI32, wire.AluMin, 64<<10) }

func BenchmarkExecFetchAdd(b *testing.B) {
	s, _ := NewStore(Config{})
	key, _ := s.Alloc(4096, wire.PermAll, 0)
	h := wire.Header{Op: wire.OpFetchAdd, Key: key, Addr: 64, Operand1: 1}
	b.ReportAllocs()
	for b.Loop() {
		s.Exec(&h, nil)
	}
}
