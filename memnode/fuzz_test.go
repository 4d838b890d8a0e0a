package memnode

import (
	"bytes"
	"testing"

	"github.com/ndma/ndma/wire"
)

// FuzzExec executes one arbitrary request against a 100-byte region (not a
// multiple of 8, so the last word is partial) that sits between guard bytes
// in a larger backing array. It checks that Exec does not panic, that it
// agrees with the reference model, and that the guard bytes — memory the
// Store was never given — are untouched.
func FuzzExec(f *testing.F) {
	const (
		size  = 100
		guard = 64
		key   = 0x600d
	)
	f.Add(uint8(wire.OpWrite), uint8(0), uint8(0), uint64(96), uint32(0), uint64(0), uint64(0), false, uint8(wire.PermAll), []byte("abcdefgh"))
	f.Add(uint8(wire.OpRead), uint8(0), uint8(0), uint64(90), uint32(0), uint64(10), uint64(0), false, uint8(wire.PermAll), []byte(nil))
	f.Add(uint8(wire.OpCAS), uint8(0), uint8(0), uint64(88), uint32(0), uint64(0), uint64(1), false, uint8(wire.PermAll), []byte(nil))
	f.Add(uint8(wire.OpFetchAdd), uint8(0), uint8(0), uint64(96), uint32(0), uint64(1), uint64(0), false, uint8(wire.PermAtomic), []byte(nil))
	f.Add(uint8(wire.OpVector), uint8(wire.DtypeF32), uint8(wire.AluMax), uint64(92), uint32(4), uint64(0), uint64(0), false, uint8(wire.PermVector), []byte("\x00\x00\xc0\x7f"))
	f.Add(uint8(wire.OpVector), uint8(wire.DtypeI64), uint8(wire.AluAdd), uint64(1<<64-8), uint32(8), uint64(0), uint64(0), false, uint8(wire.PermAll), []byte("12345678"))

	f.Fuzz(func(t *testing.T, op, dtype, alu uint8, addr uint64, offset uint32, op1, op2 uint64, badKey bool, perm uint8, payload []byte) {
		backing := bytes.Repeat([]byte{0xa5}, guard+size+guard)
		mem := backing[guard : guard+size]
		for i := range mem {
			mem[i] = byte(i * 13)
		}
		p := wire.Perm(perm) & wire.PermAll
		s, err := NewStore(Config{MaxBytes: size})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Register(mem, p, key); err != nil {
			t.Fatal(err)
		}
		model := refStore{key: {mem: bytes.Clone(mem), perm: p}}

		h := wire.Header{
			Op: wire.Opcode(op), Dtype: wire.Dtype(dtype), Alu: wire.Alu(alu),
			Addr: addr, Offset: offset, Operand1: op1, Operand2: op2, Key: key,
		}
		if badKey {
			h.Key = addr ^ key
		}
		hcopy := h
		got := s.Exec(&h, payload)
		want := model.exec(&hcopy, payload)

		if got.Status != want.status || got.Old != want.old || !bytes.Equal(got.Data, want.data) {
			t.Fatalf("%+v payload %x\n got {%v old %#x data %x}\nwant {%v old %#x data %x}",
				h, payload, got.Status, got.Old, got.Data, want.status, want.old, want.data)
		}
		if want.status == wire.StatusOK && !want.reconcile(mem, model[key].mem, h.Dtype) {
			t.Fatalf("%+v payload %x: NaN+NaN did not give a NaN", h, payload)
		}
		if !bytes.Equal(mem, model[key].mem) {
			t.Fatalf("%+v payload %x: memory differs from the model\n got %x\nwant %x", h, payload, mem, model[key].mem)
		}
		for i, b := range backing {
			if (i < guard || i >= guard+size) && b != 0xa5 {
				t.Fatalf("%+v payload %x: guard byte at region offset %d changed to %#x", h, payload, i-guard, b)
			}
		}
		if got.Data != nil && (cap(got.Data) != len(got.Data) || len(got.Data) > size) {
			t.Fatalf("READ data len %d cap %d escapes the %d-byte region", len(got.Data), cap(got.Data), size)
		}
	})
}
