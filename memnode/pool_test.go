package memnode

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/wire"
)

func newPoolNode(t *testing.T, size int) (*PoolNode, []byte) {
	t.Helper()
	s, err := NewStore(Config{})
	if err != nil {
		t.Fatal(err)
	}
	mem := make([]byte, size)
	key, err := s.Register(mem, wire.PermAll, 0)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPoolNode(s, key)
	if err != nil {
		t.Fatal(err)
	}
	return p, mem
}

func TestPoolNodeGrantScrubsAndChecks(t *testing.T) {
	p, mem := newPoolNode(t, 4096)
	for i := range mem {
		mem[i] = 0xAA // a previous region's bytes
	}
	if err := p.Grant(Grant{Region: 1, Key: 11, Perm: wire.PermRead | wire.PermWrite, Base: 1024, Len: 1024}); err != nil {
		t.Fatal(err)
	}
	if mem[1023] != 0xAA || mem[1024] != 0 || mem[2047] != 0 || mem[2048] != 0xAA {
		t.Fatal("grant did not zero exactly its extent")
	}
	w := wire.Header{Op: wire.OpWrite, Group: 1, Key: 11, Addr: 2040}
	if r := p.Exec(&w, []byte("12345678")); r.Status != wire.StatusOK || string(mem[2040:2048]) != "12345678" {
		t.Fatalf("write inside: %v", r.Status)
	}
	cases := []struct {
		name string
		h    wire.Header
		pay  []byte
		want wire.Status
	}{
		{"crosses the end", wire.Header{Op: wire.OpWrite, Group: 1, Key: 11, Addr: 2041}, []byte("12345678"), wire.StatusOutOfBounds},
		{"before the base", wire.Header{Op: wire.OpRead, Group: 1, Key: 11, Addr: 1023, Operand1: 1}, nil, wire.StatusOutOfBounds},
		{"huge read", wire.Header{Op: wire.OpRead, Group: 1, Key: 11, Addr: 1024, Operand1: 1 << 62}, nil, wire.StatusOutOfBounds},
		{"address wraps", wire.Header{Op: wire.OpRead, Group: 1, Key: 11, Addr: ^uint64(0), Operand1: 2}, nil, wire.StatusOutOfBounds},
		{"wrong key", wire.Header{Op: wire.OpRead, Group: 1, Key: 12, Addr: 1024, Operand1: 8}, nil, wire.StatusBadKey},
		{"unknown region", wire.Header{Op: wire.OpRead, Group: 2, Key: 11, Addr: 1024, Operand1: 8}, nil, wire.StatusBadKey},
		{"no atomic permission", wire.Header{Op: wire.OpFetchAdd, Group: 1, Key: 11, Addr: 1024, Operand1: 1}, nil, wire.StatusPermission},
		{"unknown op", wire.Header{Op: wire.OpNop, Group: 1, Key: 11}, nil, wire.StatusUnknownOp},
	}
	for _, c := range cases {
		if r := p.Exec(&c.h, c.pay); r.Status != c.want {
			t.Errorf("%s: %v, want %v", c.name, r.Status, c.want)
		}
	}
	// A later grant overlapping region 1's extent retires it.
	if err := p.Grant(Grant{Region: 2, Key: 22, Perm: wire.PermAll, Base: 1536, Len: 512}); err != nil {
		t.Fatal(err)
	}
	r := wire.Header{Op: wire.OpRead, Group: 1, Key: 11, Addr: 1024, Operand1: 8}
	if res := p.Exec(&r, nil); res.Status != wire.StatusBadKey {
		t.Fatalf("read of a retired grant: %v", res.Status)
	}
	if p.Grants() != 1 || p.Revoke(2, 21) || !p.Revoke(2, 22) || p.Grants() != 0 {
		t.Fatal("revoke with a wrong key must fail, with the right one succeed")
	}
	for _, bad := range []Grant{
		{Region: 0, Key: 1, Perm: wire.PermAll, Base: 0, Len: 8},
		{Region: 3, Key: 0, Perm: wire.PermAll, Base: 0, Len: 8},
		{Region: 3, Key: 1, Perm: wire.PermAll, Base: 4000, Len: 97},
		{Region: 3, Key: 1, Perm: wire.PermAll, Base: ^uint64(0), Len: 2},
		{Region: 3, Key: 1, Perm: 0x80, Base: 0, Len: 8},
	} {
		if err := p.Grant(bad); !errors.Is(err, ErrGrant) {
			t.Errorf("grant %+v: %v", bad, err)
		}
	}
}

func TestPoolNodeAtomicsAndVector(t *testing.T) {
	p, mem := newPoolNode(t, 256)
	if err := p.Grant(Grant{Region: 7, Key: 70, Perm: wire.PermAll, Base: 64, Len: 64}); err != nil {
		t.Fatal(err)
	}
	fa := wire.Header{Op: wire.OpFetchAdd, Group: 7, Key: 70, Addr: 64, Operand1: 5}
	p.Exec(&fa, nil)
	if r := p.Exec(&fa, nil); r.Old != 5 || binary.LittleEndian.Uint64(mem[64:]) != 10 {
		t.Fatalf("fetch-add: old %d", r.Old)
	}
	v := wire.Header{Op: wire.OpVector, Group: 7, Key: 70, Addr: 120, Dtype: wire.DtypeI64, Alu: wire.AluAdd}
	if r := p.Exec(&v, binary.LittleEndian.AppendUint64(nil, 3)); r.Status != wire.StatusOK || mem[120] != 3 {
		t.Fatalf("vector: %v", r.Status)
	}
	v.Addr = 128
	if r := p.Exec(&v, binary.LittleEndian.AppendUint64(nil, 3)); r.Status != wire.StatusOutOfBounds {
		t.Fatalf("vector past the grant: %v", r.Status)
	}
}

func TestReplies(t *testing.T) {
	t0 := time.Unix(100, 0)
	c := NewReplies(3, time.Second)
	a := netip.MustParseAddrPort("10.0.0.1:5")
	b := netip.MustParseAddrPort("10.0.0.2:5")
	c.Add(t0, a, 1, 0, Result{Old: 41})
	c.Add(t0, b, 1, 0, Result{Status: wire.StatusOutOfBounds})
	if r, ok := c.Lookup(t0, a, 1, 0); !ok || r.Old != 41 {
		t.Fatal("lost a's reply")
	}
	if r, ok := c.Lookup(t0, b, 1, 0); !ok || r.Status != wire.StatusOutOfBounds {
		t.Fatal("lost b's reply")
	}
	if _, ok := c.Lookup(t0.Add(2*time.Second), a, 1, 0); ok {
		t.Fatal("an entry outlived its TTL")
	}
	c.Add(t0, a, 2, 0, Result{})
	c.Add(t0, a, 3, 0, Result{}) // pushes out (a, 1) before its TTL
	if _, ok := c.Lookup(t0, a, 1, 0); ok || c.Len() != 3 || c.Evicted() != 1 {
		t.Fatalf("capacity bound: len %d evicted %d", c.Len(), c.Evicted())
	}
	c.Add(t0.Add(5*time.Second), a, 4, 0, Result{}) // pushes out an expired entry: not counted
	if c.Evicted() != 1 {
		t.Fatalf("expired entry counted as evicted")
	}
}

func TestPoolNodeExecHop(t *testing.T) {
	p, mem := newPoolNode(t, 1024)
	if err := p.Grant(Grant{Region: 3, Key: 33, Perm: wire.PermRead | wire.PermWrite | wire.PermVector, Base: 256, Len: 512}); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		binary.LittleEndian.PutUint64(mem[256+8*i:], uint64(10*i))
	}
	h := wire.Header{Group: 3, Key: 33, Addr: 256, Operand1: 32, Dtype: wire.DtypeI64, Alu: wire.AluAdd}
	r, data := p.ExecHop(&h, wire.ChainLoad, 0, nil, nil)
	if r.Status != wire.StatusOK || len(data) != 32 || binary.LittleEndian.Uint64(data[8:]) != 10 {
		t.Fatalf("load: %v %x", r.Status, data)
	}
	r, data2 := p.ExecHop(&h, wire.ChainApply, 0, data, nil)
	if r.Status != wire.StatusOK || binary.LittleEndian.Uint64(data2[24:]) != 60 || binary.LittleEndian.Uint64(mem[256+24:]) != 30 {
		t.Fatalf("apply: %v, memory must not change", r.Status)
	}
	h.Addr = 512
	if r, out := p.ExecHop(&h, wire.ChainStore, 0, data2, nil); r.Status != wire.StatusOK || &out[0] != &data2[0] || binary.LittleEndian.Uint64(mem[512+24:]) != 60 {
		t.Fatalf("store: %v", r.Status)
	}
	if r, _ := p.ExecHop(&h, wire.ChainAccumulate, 0, data2, nil); r.Status != wire.StatusOK || binary.LittleEndian.Uint64(mem[512+24:]) != 120 {
		t.Fatalf("accumulate: %v", r.Status)
	}
	for _, c := range []struct {
		name string
		h    wire.Header
		op   wire.ChainOp
		want wire.Status
	}{
		{"apply without dtype", wire.Header{Group: 3, Key: 33, Addr: 256, Alu: wire.AluAdd}, wire.ChainApply, wire.StatusBadOperand},
		{"apply with prod", wire.Header{Group: 3, Key: 33, Addr: 256, Dtype: wire.DtypeI64, Alu: wire.AluProd}, wire.ChainApply, wire.StatusUnknownOp},
		{"apply misaligned", wire.Header{Group: 3, Key: 33, Addr: 260, Dtype: wire.DtypeI64, Alu: wire.AluAdd}, wire.ChainApply, wire.StatusMisaligned},
		{"apply outside the grant", wire.Header{Group: 3, Key: 33, Addr: 768, Dtype: wire.DtypeI64, Alu: wire.AluAdd}, wire.ChainApply, wire.StatusOutOfBounds},
		{"load with a wrong key", wire.Header{Group: 3, Key: 34, Addr: 256, Operand1: 8}, wire.ChainLoad, wire.StatusBadKey},
		{"unknown op", wire.Header{Group: 3, Key: 33, Addr: 256}, 9, wire.StatusUnknownOp},
	} {
		if r, _ := p.ExecHop(&c.h, c.op, 0, data, nil); r.Status != c.want {
			t.Errorf("%s: %v, want %v", c.name, r.Status, c.want)
		}
	}
}

// TestPoolNodeRebuildFill: a rebuild grant zeroes the extent; Fill copies
// old data only into bytes no client wrote since.
func TestPoolNodeRebuildFill(t *testing.T) {
	p, mem := newPoolNode(t, 1024)
	for i := range mem {
		mem[i] = 0xEE
	}
	if err := p.GrantRebuild(Grant{Region: 4, Key: 44, Perm: wire.PermRead | wire.PermWrite, Base: 512, Len: 256}); err != nil {
		t.Fatal(err)
	}
	if !p.Rebuilding(4) || mem[512] != 0 || mem[767] != 0 || mem[768] != 0xEE {
		t.Fatal("rebuild grant did not zero exactly its extent")
	}
	w := wire.Header{Op: wire.OpWrite, Group: 4, Key: 44, Addr: 600}
	if r := p.Exec(&w, []byte("new!")); r.Status != wire.StatusOK {
		t.Fatal(r.Status)
	}
	old := make([]byte, 256)
	for i := range old {
		old[i] = 'o'
	}
	if err := p.Fill(4, 44, 512, old); err != nil {
		t.Fatal(err)
	}
	if string(mem[596:608]) != "oooonew!oooo" {
		t.Fatalf("after the fill: %q, want the client's write kept", mem[596:608])
	}
	if err := p.Fill(4, 45, 512, old); !errors.Is(err, ErrGrant) {
		t.Errorf("fill with a wrong key: %v", err)
	}
	if err := p.Fill(4, 44, 700, old); !errors.Is(err, ErrGrant) {
		t.Errorf("fill past the grant: %v", err)
	}
	p.EndRebuild(4)
	if p.Rebuilding(4) {
		t.Fatal("still rebuilding")
	}
	if err := p.Fill(4, 44, 512, old); !errors.Is(err, ErrGrant) {
		t.Errorf("fill after the rebuild: %v", err)
	}
}

// TestRepliesExpire: entries past their TTL leave the cache as new ones
// arrive, and a drained cache gives its memory back (the cache used to
// hold a burst's entries until the ring wrapped around).
func TestRepliesExpire(t *testing.T) {
	t0 := time.Unix(100, 0)
	c := NewReplies(1<<16, time.Second)
	a := netip.MustParseAddrPort("10.0.0.1:5")
	for i := range 10000 {
		c.Add(t0, a, uint64(i), 0, Result{})
	}
	if c.Len() != 10000 {
		t.Fatalf("len %d, want 10000", c.Len())
	}
	c.Add(t0.Add(2*time.Second), a, 1<<40, 0, Result{})
	if c.Len() != 1 {
		t.Fatalf("len %d after the TTL, want 1", c.Len())
	}
	if _, ok := c.Lookup(t0.Add(2*time.Second), a, 1<<40, 0); !ok {
		t.Fatal("lost the new entry")
	}
	if c.Evicted() != 0 {
		t.Fatalf("expired entries counted as evicted: %d", c.Evicted())
	}
}

// TestPoolNodeState: the node reports every grant with the switch's
// record as given, whether it is being rebuilt, and whether it took a
// degraded write since the switch last set its epoch; an older epoch
// does not replace a newer one; RevokeAny drops a grant whatever its key.
func TestPoolNodeState(t *testing.T) {
	p, _ := newPoolNode(t, 8192)
	homes := []GrantHome{{Addr: netip.MustParseAddrPort("10.0.0.2:4791"), Base: 0}, {Addr: netip.MustParseAddrPort("10.0.0.3:4791"), Base: 4096}}
	g := Grant{Region: 4, Key: 44, Perm: wire.PermRead | wire.PermWrite, Base: 4096, Len: 1024, Column: 1,
		Layout: GrantLayout{Size: 2048, Stripe: 1024, Columns: 2, Replicas: 2}, Homes: homes, Epoch: 3}
	if err := p.Grant(g); err != nil {
		t.Fatal(err)
	}
	homes[0].Base = 999 // the node keeps its own copy
	if err := p.GrantRebuild(Grant{Region: 2, Key: 22, Perm: wire.PermRead, Base: 0, Len: 64, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	st := p.State()
	if len(st) != 2 || st[0].Region != 2 || st[1].Region != 4 {
		t.Fatalf("state %+v, want regions 2 and 4 in order", st)
	}
	if !st[0].Rebuilding || st[1].Rebuilding || st[1].Degraded {
		t.Fatalf("state flags %+v", st)
	}
	if r := st[1]; r.Column != 1 || r.Layout != g.Layout || r.Epoch != 3 || len(r.Homes) != 2 || r.Homes[0].Base != 0 || r.Homes[1] != g.Homes[1] {
		t.Fatalf("reported grant %+v, want %+v", r.Grant, g)
	}
	p.MarkDegraded(4)
	p.MarkDegraded(9) // no such grant: nothing
	if st := p.State(); !st[1].Degraded || len(st) != 2 {
		t.Fatalf("after a degraded write: %+v", st)
	}
	if p.SetEpoch(4, 45, 5) {
		t.Fatal("SetEpoch with a wrong key accepted")
	}
	if !p.SetEpoch(4, 44, 5) || !p.SetEpoch(4, 0, 4) {
		t.Fatal("SetEpoch refused")
	}
	if r := p.State()[1]; r.Epoch != 5 || r.Degraded {
		t.Fatalf("after SetEpoch 5 then 4: epoch %d, degraded %v; want 5, false", r.Epoch, r.Degraded)
	}
	p.RevokeAny(4)
	if p.HasGrant(4) || len(p.State()) != 1 {
		t.Fatal("RevokeAny left the grant")
	}
}
