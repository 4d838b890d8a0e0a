package memnode

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/ndma/ndma/wire"
)

// TestPoolNodeFences follows one fence through a holder's takeover: a
// fenced write needs the fence raised first, the raise refuses a lower
// token, the older holder's writes are refused once a newer one raised
// it, and the fences go with the grant and come back with a new one.
func TestPoolNodeFences(t *testing.T) {
	p, mem := newPoolNode(t, 4096)
	if err := p.Grant(Grant{Region: 1, Key: 11, Perm: wire.PermAll, Base: 0, Len: 4096}); err != nil {
		t.Fatal(err)
	}
	w := func(tok uint64, b byte) Result {
		h := wire.Header{Op: wire.OpWrite, Group: 1, Key: 11, Addr: 64}
		return p.ExecFenced(&h, wire.Fence{ID: 3, Token: tok}, []byte{b})
	}
	raise := func(tok uint64) Result {
		h := wire.Header{Op: wire.OpFence, Group: 1, Key: 11, Addr: 4095}
		return p.Raise(&h, wire.Fence{ID: 3, Token: tok})
	}
	if r := w(5, 1); r.Status != wire.StatusFenced || mem[64] != 0 {
		t.Fatalf("write before any raise: %v", r.Status)
	}
	if r := raise(5); r.Status != wire.StatusOK || r.Old != 5 {
		t.Fatalf("first raise: %+v", r)
	}
	if r := w(5, 1); r.Status != wire.StatusOK || mem[64] != 1 {
		t.Fatalf("write with the fence's token: %v", r.Status)
	}
	if r := raise(5); r.Status != wire.StatusOK {
		t.Fatalf("raise again to the same token (a resent raise): %v", r.Status)
	}
	if r := raise(9); r.Status != wire.StatusOK || r.Old != 9 {
		t.Fatalf("newer holder's raise: %+v", r)
	}
	if r := w(5, 2); r.Status != wire.StatusFenced || r.Old != 9 || mem[64] != 1 {
		t.Fatalf("older holder's write after the raise: %+v, memory %d", r, mem[64])
	}
	if r := raise(7); r.Status != wire.StatusFenced || r.Old != 9 {
		t.Fatalf("older holder's raise after the newer's: %+v", r)
	}
	h := wire.Header{Op: wire.OpCAS, Group: 1, Key: 11, Addr: 128, Operand1: 0, Operand2: 7}
	if r := p.ExecFenced(&h, wire.Fence{ID: 3, Token: 9}, nil); r.Status != wire.StatusOK || binary.LittleEndian.Uint64(mem[128:]) != 7 {
		t.Fatalf("fenced CAS: %v", r.Status)
	}
	h = wire.Header{Op: wire.OpWrite, Group: 1, Key: 12, Addr: 64}
	if r := p.ExecFenced(&h, wire.Fence{ID: 3, Token: 9}, []byte{3}); r.Status != wire.StatusBadKey {
		t.Fatalf("fenced write with a wrong key: %v", r.Status)
	}
	for _, bad := range []wire.Header{
		{Op: wire.OpFence, Group: 1, Key: 12, Addr: 0},
		{Op: wire.OpFence, Group: 1, Key: 11, Addr: 4096},
		{Op: wire.OpFence, Group: 2, Key: 11, Addr: 0},
	} {
		if r := p.Raise(&bad, wire.Fence{ID: 4, Token: 1}); r.Status == wire.StatusOK {
			t.Fatalf("raise %+v accepted", bad)
		}
	}
	if st := p.State(); len(st) != 1 || len(st[0].Fences) != 1 || st[0].Fences[0] != (wire.Fence{ID: 3, Token: 9}) {
		t.Fatalf("state reports fences %+v", st)
	}
	// Granted again (a rebuilt copy): it has the fences the grant brings
	// and no others.
	if err := p.Grant(Grant{Region: 1, Key: 11, Perm: wire.PermAll, Base: 0, Len: 4096, Fences: []wire.Fence{{ID: 3, Token: 9}}}); err != nil {
		t.Fatal(err)
	}
	if r := w(5, 2); r.Status != wire.StatusFenced || r.Old != 9 {
		t.Fatalf("older holder's write to a rebuilt copy: %+v", r)
	}
	if r := w(9, 2); r.Status != wire.StatusOK {
		t.Fatalf("holder's write to a rebuilt copy: %v", r.Status)
	}
	p.Revoke(1, 11)
	if p.nfences != 0 || len(p.fences) != 0 {
		t.Fatalf("revoked grant left %d fences", p.nfences)
	}
}

// TestPoolNodeFenceBounds fills a grant's fence table: one more fence id
// is refused (BUSY), a raise of a known one is not, and a grant carrying
// more than a grant may hold is refused.
func TestPoolNodeFenceBounds(t *testing.T) {
	p, _ := newPoolNode(t, 4096)
	if err := p.Grant(Grant{Region: 1, Key: 11, Perm: wire.PermAll, Base: 0, Len: 4096}); err != nil {
		t.Fatal(err)
	}
	h := wire.Header{Op: wire.OpFence, Group: 1, Key: 11}
	for id := range uint32(wire.MaxFences) {
		if r := p.Raise(&h, wire.Fence{ID: id, Token: 1}); r.Status != wire.StatusOK {
			t.Fatalf("fence %d: %v", id, r.Status)
		}
	}
	if r := p.Raise(&h, wire.Fence{ID: wire.MaxFences, Token: 1}); r.Status != wire.StatusBusy {
		t.Fatalf("fence past the bound: %v", r.Status)
	}
	if r := p.Raise(&h, wire.Fence{ID: 0, Token: 2}); r.Status != wire.StatusOK {
		t.Fatalf("raising a known fence at the bound: %v", r.Status)
	}
	// A raise may step a fence up by at most MaxFenceStep: a crafted
	// one cannot take it to the top, where no holder could follow.
	if r := p.Raise(&h, wire.Fence{ID: 0, Token: ^uint64(0)}); r.Status != wire.StatusBadOperand || r.Old != 2 {
		t.Fatalf("raise to the top of the token space: %+v", r)
	}
	if r := p.Raise(&h, wire.Fence{ID: 0, Token: 2 + wire.MaxFenceStep}); r.Status != wire.StatusOK {
		t.Fatalf("raise by MaxFenceStep: %v", r.Status)
	}
	err := p.Grant(Grant{Region: 2, Key: 12, Perm: wire.PermAll, Base: 0, Len: 64, Fences: make([]wire.Fence, wire.MaxFences+1)})
	if !errors.Is(err, ErrGrant) {
		t.Fatalf("grant with too many fences: %v", err)
	}
}

// FuzzFence runs a sequence of raises and fenced writes on one grant
// against a model (the highest token per fence id) and checks that a
// write is applied exactly when the model allows it.
func FuzzFence(f *testing.F) {
	f.Add([]byte("\x01\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x03"))
	f.Fuzz(func(t *testing.T, ops []byte) {
		p, mem := newPoolNode(t, 64)
		if err := p.Grant(Grant{Region: 1, Key: 11, Perm: wire.PermAll, Base: 0, Len: 64}); err != nil {
			t.Fatal(err)
		}
		model := map[uint32]uint64{}
		for i := 0; len(ops) >= 10; i++ {
			op, id, tok := ops[0], uint32(ops[1]%4), binary.BigEndian.Uint64(ops[2:10])
			ops = ops[10:]
			fc := wire.Fence{ID: id, Token: tok}
			cur, known := model[id]
			if op%2 == 0 {
				h := wire.Header{Op: wire.OpFence, Group: 1, Key: 11, Addr: uint64(op) % 64}
				r := p.Raise(&h, fc)
				ok := tok != 0 && (!known || tok >= cur) && tok-cur <= wire.MaxFenceStep
				if (r.Status == wire.StatusOK) != ok {
					t.Fatalf("op %d: raise %+v over %d (known %v): %v", i, fc, cur, known, r.Status)
				}
				if ok {
					model[id] = tok
				}
				continue
			}
			ok := known && tok >= cur
			if op%4 == 1 {
				// A chain hop's check: changes nothing.
				h := wire.Header{Op: wire.OpChain, Group: 1, Key: 11}
				if r := p.Admit(&h, fc); (r.Status == wire.StatusOK) != ok || !ok && (r.Status != wire.StatusFenced || r.Old != cur) {
					t.Fatalf("op %d: chain hop %+v over %d (known %v): %v, %d", i, fc, cur, known, r.Status, r.Old)
				}
				continue
			}
			h := wire.Header{Op: wire.OpWrite, Group: 1, Key: 11, Addr: uint64(i % 64)}
			r := p.ExecFenced(&h, fc, []byte{op})
			if (r.Status == wire.StatusOK) != ok || ok && mem[i%64] != op {
				t.Fatalf("op %d: write %+v over %d (known %v): %v", i, fc, cur, known, r.Status)
			}
			if !ok && r.Old != cur {
				t.Fatalf("op %d: refusal says the fence is %d, want %d", i, r.Old, cur)
			}
		}
		if p.nfences != len(model) {
			t.Fatalf("node counts %d fences, model %d", p.nfences, len(model))
		}
	})
}
