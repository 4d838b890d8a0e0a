package memnode

import (
	"github.com/ndma/ndma/reduce/gf256"
	"github.com/ndma/ndma/wire"
)

// ExecHop executes hop op of a chain (wire.OpChain) at node-local address
// h.Addr of pool region h.Group with key h.Key, on data (nil before a
// Load), with the grant checks of Exec; coef is the hop's GF(2^8)
// coefficient (GFAccumulate only; wire.SplitChain has checked it). It
// returns the result and the data the packet carries on: Load, Apply and
// Delta write it into dst's backing array (grown as needed), Store,
// Accumulate and GFAccumulate pass data on unchanged. Apply computes
// data[i] = Alu(data[i], memory[i]) with Accumulate's rules (Dtype F32,
// F64, I32 or I64; Alu Add, Min or Max; n a multiple of the element size,
// Addr aligned to it). Delta and GFAccumulate work on bytes and ignore
// Dtype and Alu; they need the permissions of a read and of a vector op.
func (p *PoolNode) ExecHop(h *wire.Header, op wire.ChainOp, coef uint8, data, dst []byte) (Result, []byte) {
	lh := wire.Header{Group: h.Group, Key: h.Key, Addr: h.Addr, Dtype: h.Dtype, Alu: h.Alu}
	switch op {
	case wire.ChainLoad:
		lh.Op, lh.Operand1 = wire.OpRead, h.Operand1
		r := p.Exec(&lh, nil)
		if r.Status != wire.StatusOK {
			return r, nil
		}
		return Result{}, append(dst[:0], r.Data...)
	case wire.ChainApply:
		es := h.Dtype.Size()
		switch {
		case es == 0 || len(data)%es != 0:
			return Result{Status: wire.StatusBadOperand}, nil
		case h.Alu != wire.AluAdd && h.Alu != wire.AluMin && h.Alu != wire.AluMax:
			return Result{Status: wire.StatusUnknownOp}, nil
		case h.Addr%uint64(es) != 0:
			return Result{Status: wire.StatusMisaligned}, nil
		}
		lh.Op, lh.Operand1 = wire.OpRead, uint64(len(data))
		r := p.Exec(&lh, nil)
		if r.Status != wire.StatusOK {
			return r, nil
		}
		dst = append(dst[:0], data...)
		vector(dst, r.Data, h.Dtype, h.Alu)
		return Result{}, dst
	case wire.ChainStore:
		lh.Op = wire.OpWrite
		return p.Exec(&lh, data), data
	case wire.ChainAccumulate:
		lh.Op = wire.OpVector
		return p.Exec(&lh, data), data
	case wire.ChainDelta:
		mem, _, st := p.hopMemory(h, wire.PermRead, len(data))
		if st != wire.StatusOK {
			return Result{Status: st}, nil
		}
		dst = append(dst[:0], data...)
		gf256.MulAdd(1, mem, dst)
		return Result{}, dst
	case wire.ChainGFAccumulate:
		if coef == 0 {
			return Result{Status: wire.StatusBadOperand}, nil
		}
		mem, g, st := p.hopMemory(h, wire.PermVector, len(data))
		if st != wire.StatusOK {
			return Result{Status: st}, nil
		}
		gf256.MulAdd(coef, data, mem)
		p.markWritten(g, h.Addr, uint64(len(data)))
		return Result{}, data
	}
	return Result{Status: wire.StatusUnknownOp}, nil
}

// hopMemory is the n bytes of lent memory at node-local h.Addr, after the
// checks of Exec: the grant of region h.Group opened by h.Key, permission
// need, the bytes inside the grant.
func (p *PoolNode) hopMemory(h *wire.Header, need wire.Perm, n int) ([]byte, Grant, wire.Status) {
	g, ok := p.grants[h.Group]
	switch {
	case !ok || g.Key != h.Key:
		return nil, Grant{}, wire.StatusBadKey
	case g.Perm&need == 0:
		return nil, Grant{}, wire.StatusPermission
	case n == 0:
		return nil, Grant{}, wire.StatusBadOperand
	case h.Addr < g.Base:
		return nil, Grant{}, wire.StatusOutOfBounds
	}
	if _, ok := span(int(g.Len), h.Addr-g.Base, 0, uint64(n)); !ok {
		return nil, Grant{}, wire.StatusOutOfBounds
	}
	return p.store.regions[p.key].mem[h.Addr : h.Addr+uint64(n)], g, wire.StatusOK
}
