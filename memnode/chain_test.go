package memnode

import (
	"bytes"
	"testing"

	"github.com/ndma/ndma/reduce/gf256"
	"github.com/ndma/ndma/wire"
)

// TestPoolNodeExecHopGF: Delta hands on data XOR memory without changing
// memory; GFAccumulate adds coef·data into memory in GF(2^8); a chain
// Delta, GFAccumulate(c) at parity, GFAccumulate(1) at data leaves the new
// data in place and parity changed by c·(new XOR old).
func TestPoolNodeExecHopGF(t *testing.T) {
	p, mem := newPoolNode(t, 1024)
	if err := p.Grant(Grant{Region: 3, Key: 33, Perm: wire.PermRead | wire.PermVector, Base: 256, Len: 512}); err != nil {
		t.Fatal(err)
	}
	const n = 13 // bytes, at an odd address: byte ops need no alignment
	old, par := mem[301:301+n], mem[601:601+n]
	for i := range n {
		old[i], par[i] = byte(7*i+1), byte(200-i)
	}
	oldCopy, parCopy := bytes.Clone(old), bytes.Clone(par)
	data := []byte("thirteen byte")
	h := wire.Header{Group: 3, Key: 33, Addr: 301, Operand1: n}
	r, delta := p.ExecHop(&h, wire.ChainDelta, 0, data, nil)
	if r.Status != wire.StatusOK || !bytes.Equal(old, oldCopy) || &delta[0] == &data[0] {
		t.Fatalf("delta: %v; memory must not change and the delta must be its own buffer", r.Status)
	}
	for i := range n {
		if delta[i] != data[i]^old[i] {
			t.Fatalf("delta byte %d = %#x, want %#x", i, delta[i], data[i]^old[i])
		}
	}
	h.Addr = 601
	if r, out := p.ExecHop(&h, wire.ChainGFAccumulate, 0x8e, delta, nil); r.Status != wire.StatusOK || &out[0] != &delta[0] {
		t.Fatalf("gfaccumulate: %v", r.Status)
	}
	for i := range n {
		if want := parCopy[i] ^ gf256.Mul(0x8e, delta[i]); par[i] != want {
			t.Fatalf("parity byte %d = %#x, want %#x", i, par[i], want)
		}
	}
	h.Addr = 301
	if r, _ := p.ExecHop(&h, wire.ChainGFAccumulate, 1, delta, nil); r.Status != wire.StatusOK || !bytes.Equal(old, data) {
		t.Fatalf("gfaccumulate 1 at the data: %v, memory %q, want %q", r.Status, old, data)
	}
	for _, c := range []struct {
		name string
		h    wire.Header
		op   wire.ChainOp
		coef uint8
		want wire.Status
	}{
		{"gfaccumulate with coefficient zero", wire.Header{Group: 3, Key: 33, Addr: 301}, wire.ChainGFAccumulate, 0, wire.StatusBadOperand},
		{"gfaccumulate outside the grant", wire.Header{Group: 3, Key: 33, Addr: 760}, wire.ChainGFAccumulate, 3, wire.StatusOutOfBounds},
		{"gfaccumulate below the grant", wire.Header{Group: 3, Key: 33, Addr: 250}, wire.ChainGFAccumulate, 3, wire.StatusOutOfBounds},
		{"delta outside the grant", wire.Header{Group: 3, Key: 33, Addr: 767}, wire.ChainDelta, 0, wire.StatusOutOfBounds},
		{"delta with a wrong key", wire.Header{Group: 3, Key: 34, Addr: 301}, wire.ChainDelta, 0, wire.StatusBadKey},
		{"gfaccumulate in an unknown region", wire.Header{Group: 4, Key: 33, Addr: 301}, wire.ChainGFAccumulate, 3, wire.StatusBadKey},
	} {
		before := bytes.Clone(mem)
		if r, _ := p.ExecHop(&c.h, c.op, c.coef, data, nil); r.Status != c.want {
			t.Errorf("%s: %v, want %v", c.name, r.Status, c.want)
		}
		if !bytes.Equal(mem, before) {
			t.Errorf("%s: memory changed", c.name)
		}
	}
	// Without the permissions: a grant that may only write.
	if err := p.Grant(Grant{Region: 5, Key: 55, Perm: wire.PermWrite, Base: 0, Len: 256}); err != nil {
		t.Fatal(err)
	}
	for _, op := range []wire.ChainOp{wire.ChainDelta, wire.ChainGFAccumulate} {
		h := wire.Header{Group: 5, Key: 55, Addr: 16}
		if r, _ := p.ExecHop(&h, op, 9, data, nil); r.Status != wire.StatusPermission {
			t.Errorf("%v on a write-only grant: %v, want %v", op, r.Status, wire.StatusPermission)
		}
	}
}
