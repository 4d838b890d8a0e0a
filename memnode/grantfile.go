package memnode

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net/netip"
	"slices"

	"github.com/ndma/ndma/wire"
)

// The grant table as a durable memory node keeps it on disk (package
// memnode/durable writes it, a restarted node reads it back): the
// grants State returns, in one checksummed record.
//
//	magic "NDMAGRT1" (8 bytes), count u32, count × grant, CRC32C u32 of
//	every byte before it
//	grant: region u32, key u64, perm u8, base u64, len u64, column u16,
//	size u64, stripe u64, columns u16, replicas u8, epoch u64,
//	flags u8 (bit 0 rebuilding, bit 1 degraded), homes u16 ×
//	(address: u8 length + text, base u64), fences u16 × (id u32,
//	token u64)
//
// All integers are little-endian.

// grantMagic opens a grant record.
const grantMagic = "NDMAGRT1"

// ErrGrantFile is returned (wrapped) for a grant record that is
// corrupt: a wrong magic, a checksum that does not match, or fields out
// of their bounds.
var ErrGrantFile = errors.New("memnode: corrupt grant record")

var grantCRC = crc32.MakeTable(crc32.Castagnoli)

// AppendGrants appends the record of grants gs to b.
func AppendGrants(b []byte, gs []GrantState) []byte {
	le := binary.LittleEndian
	start := len(b)
	b = append(b, grantMagic...)
	b = le.AppendUint32(b, uint32(len(gs)))
	for i := range gs {
		g := &gs[i]
		b = le.AppendUint32(b, g.Region)
		b = le.AppendUint64(b, g.Key)
		b = append(b, byte(g.Perm))
		b = le.AppendUint64(b, g.Base)
		b = le.AppendUint64(b, g.Len)
		b = le.AppendUint16(b, uint16(g.Column))
		b = le.AppendUint64(b, g.Layout.Size)
		b = le.AppendUint64(b, g.Layout.Stripe)
		b = le.AppendUint16(b, uint16(g.Layout.Columns))
		b = append(b, byte(g.Layout.Replicas))
		b = le.AppendUint64(b, g.Epoch)
		var flags byte
		if g.Rebuilding {
			flags |= 1
		}
		if g.Degraded {
			flags |= 2
		}
		b = append(b, flags)
		b = le.AppendUint16(b, uint16(len(g.Homes)))
		for _, h := range g.Homes {
			a := h.Addr.String()
			b = append(b, byte(len(a)))
			b = append(b, a...)
			b = le.AppendUint64(b, h.Base)
		}
		b = le.AppendUint16(b, uint16(len(g.Fences)))
		for _, f := range g.Fences {
			b = le.AppendUint32(b, f.ID)
			b = le.AppendUint64(b, f.Token)
		}
	}
	return le.AppendUint32(b, crc32.Checksum(b[start:], grantCRC))
}

// grantReader reads a grant record's fields, remembering the first
// shortfall.
type grantReader struct {
	b   []byte
	err error
}

func (r *grantReader) take(n int) []byte {
	if r.err != nil || len(r.b) < n {
		r.err = fmt.Errorf("%w: truncated", ErrGrantFile)
		return make([]byte, n)
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *grantReader) u8() byte    { return r.take(1)[0] }
func (r *grantReader) u16() uint16 { return binary.LittleEndian.Uint16(r.take(2)) }
func (r *grantReader) u32() uint32 { return binary.LittleEndian.Uint32(r.take(4)) }
func (r *grantReader) u64() uint64 { return binary.LittleEndian.Uint64(r.take(8)) }

// ParseGrants reads a record AppendGrants wrote. A record that is
// corrupt (ErrGrantFile) is refused whole: nothing of it is returned.
func ParseGrants(b []byte) ([]GrantState, error) {
	if len(b) < len(grantMagic)+8 || string(b[:len(grantMagic)]) != grantMagic {
		return nil, fmt.Errorf("%w: not a grant record", ErrGrantFile)
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, grantCRC) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrGrantFile)
	}
	r := &grantReader{b: body[len(grantMagic):]}
	n := int(r.u32())
	if n > MaxGrants {
		return nil, fmt.Errorf("%w: %d grants (at most %d)", ErrGrantFile, n, MaxGrants)
	}
	gs := make([]GrantState, 0, n)
	for range n {
		var g GrantState
		g.Region, g.Key, g.Perm = r.u32(), r.u64(), wire.Perm(r.u8())
		g.Base, g.Len, g.Column = r.u64(), r.u64(), int(r.u16())
		g.Layout = GrantLayout{Size: r.u64(), Stripe: r.u64(), Columns: int(r.u16()), Replicas: int(r.u8())}
		g.Epoch = r.u64()
		flags := r.u8()
		if flags&^3 != 0 {
			return nil, fmt.Errorf("%w: flags %#x", ErrGrantFile, flags)
		}
		g.Rebuilding, g.Degraded = flags&1 != 0, flags&2 != 0
		nh := int(r.u16())
		if nh > MaxGrantHomes {
			return nil, fmt.Errorf("%w: %d homes", ErrGrantFile, nh)
		}
		for range nh {
			a := string(r.take(int(r.u8())))
			base := r.u64()
			if r.err != nil {
				break
			}
			ap, err := netip.ParseAddrPort(a)
			if err != nil {
				return nil, fmt.Errorf("%w: home %q: %v", ErrGrantFile, a, err)
			}
			g.Homes = append(g.Homes, GrantHome{Addr: ap, Base: base})
		}
		nf := int(r.u16())
		if nf > wire.MaxFences {
			return nil, fmt.Errorf("%w: %d fences", ErrGrantFile, nf)
		}
		for range nf {
			g.Fences = append(g.Fences, wire.Fence{ID: r.u32(), Token: r.u64()})
		}
		if r.err != nil {
			return nil, r.err
		}
		gs = append(gs, g)
	}
	if r.err != nil {
		return nil, r.err
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrGrantFile, len(r.b))
	}
	return gs, nil
}

// Restore installs grants a durable node kept from an earlier start (an
// empty table only): unlike Grant it leaves their bytes as they are,
// and keeps their degraded marks and fences. A grant that was being
// rebuilt comes back as one (Rebuilding: its bytes are not a full
// copy), so that the switch rebuilds it again. Grants that do not fit
// the lent region, or overlap each other, are refused (ErrGrant), and
// nothing is installed.
func (p *PoolNode) Restore(gs []GrantState) error {
	if len(p.grants) > 0 {
		return fmt.Errorf("%w: restoring into a table that holds grants", ErrGrant)
	}
	sorted := slices.Clone(gs)
	slices.SortFunc(sorted, func(a, b GrantState) int { return cmp.Compare(a.Base, b.Base) })
	nf := 0
	for i, g := range sorted {
		if g.Region == 0 || g.Key == 0 || g.Len == 0 || g.Base > p.size || g.Len > p.size-g.Base || len(g.Homes) > MaxGrantHomes ||
			len(g.Fences) > wire.MaxFences {
			return fmt.Errorf("%w: kept region %d, [%d, +%d) of %d bytes", ErrGrant, g.Region, g.Base, g.Len, p.size)
		}
		if i > 0 && sorted[i-1].Base+sorted[i-1].Len > g.Base {
			return fmt.Errorf("%w: kept regions %d and %d overlap", ErrGrant, sorted[i-1].Region, g.Region)
		}
		nf += len(g.Fences)
	}
	if len(gs) > MaxGrants || nf > MaxNodeFences {
		return fmt.Errorf("%w: %d kept grants, %d fences", ErrGrant, len(gs), nf)
	}
	for _, g := range gs {
		if _, dup := p.grants[g.Region]; dup {
			clear(p.grants)
			return fmt.Errorf("%w: region %d kept twice", ErrGrant, g.Region)
		}
		p.grants[g.Region] = g.Grant
	}
	for _, g := range gs {
		gr := p.grants[g.Region]
		gr.Homes, gr.Fences = slices.Clone(g.Homes), nil
		p.grants[g.Region] = gr
		p.setFences(g.Region, g.Fences)
		if g.Degraded {
			p.degraded[g.Region] = true
		}
		if g.Rebuilding {
			p.written[g.Region] = make([]uint64, (g.Len+63)/64)
		}
	}
	return nil
}

// Extent returns the node-local extent of region's grant.
func (p *PoolNode) Extent(region uint32) (base, n uint64, ok bool) {
	g, ok := p.grants[region]
	return g.Base, g.Len, ok
}
