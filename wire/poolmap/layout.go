package poolmap

// Pool address layout (the MMU's translation).
//
// A pool region of Size bytes is cut into stripes of Stripe bytes, dealt
// round robin over the region's Columns memory nodes: stripe i lives on
// column i mod Columns. With two replicas, stripe i's second copy lives on
// column (i+1) mod Columns, so the two copies are always on different
// nodes. On each column the region owns one extent of node memory: first
// its primary stripes in order, then its replica stripes in order. Layout
// is pure arithmetic: it reads no clock and holds no node state.

import (
	"errors"
	"fmt"
)

// Limits of a pool layout.
const (
	MinStripe     = 64      // bytes; a multiple of 8 keeps atomics inside one stripe
	MaxStripe     = 1 << 30 // bytes
	MaxColumns    = 256     // memory nodes one region spans
	MaxReplicas   = 2
	MaxRegionSize = 1 << 48 // bytes
)

// ErrLayout is wrapped by the errors of NewLayout and Layout methods for
// arguments outside the layout.
var ErrLayout = errors.New("fabric: bad pool layout")

// Layout is how one pool region maps onto memory nodes.
type Layout struct {
	Size     uint64 // region bytes
	Stripe   uint64 // interleave unit in bytes: a multiple of 8, MinStripe to MaxStripe
	Columns  int    // memory nodes the stripes are dealt over
	Replicas int    // copies of every stripe: 1 or 2 (2 needs Columns >= 2)
}

// NewLayout checks a layout's parameters.
func NewLayout(size, stripe uint64, columns, replicas int) (Layout, error) {
	l := Layout{Size: size, Stripe: stripe, Columns: columns, Replicas: replicas}
	switch {
	case size == 0 || size > MaxRegionSize:
		return Layout{}, fmt.Errorf("%w: size %d bytes: want 1 to %d", ErrLayout, size, uint64(MaxRegionSize))
	case stripe < MinStripe || stripe > MaxStripe || stripe%8 != 0:
		return Layout{}, fmt.Errorf("%w: stripe %d bytes: want a multiple of 8 from %d to %d", ErrLayout, stripe, MinStripe, MaxStripe)
	case columns < 1 || columns > MaxColumns:
		return Layout{}, fmt.Errorf("%w: %d memory nodes: want 1 to %d", ErrLayout, columns, MaxColumns)
	case replicas < 1 || replicas > MaxReplicas:
		return Layout{}, fmt.Errorf("%w: %d replicas: want 1 or 2", ErrLayout, replicas)
	case replicas > columns:
		return Layout{}, fmt.Errorf("%w: %d replicas need as many memory nodes, have %d", ErrLayout, replicas, columns)
	}
	return l, nil
}

// Stripes is the number of stripes (the last may be short).
func (l Layout) Stripes() uint64 { return (l.Size + l.Stripe - 1) / l.Stripe }

// Primaries is the number of stripes whose first copy is on column c.
func (l Layout) Primaries(c int) uint64 {
	n, k := l.Stripes(), uint64(l.Columns)
	p := n / k
	if uint64(c) < n%k {
		p++
	}
	return p
}

// ColumnBytes is the node memory the region needs on column c: whole
// stripe slots for its primary stripes and, with two replicas, for the
// replicas of the previous column's stripes.
func (l Layout) ColumnBytes(c int) uint64 {
	n := l.Primaries(c)
	if l.Replicas == 2 {
		n += l.Primaries((c - 1 + l.Columns) % l.Columns)
	}
	return n * l.Stripe
}

// Extent is one piece of a pool access: Len bytes at region offset Off,
// which copy Replica of them lives at local offset Local of the region's
// extent on column Column.
type Extent struct {
	Off     uint64
	Len     uint64
	Column  int
	Local   uint64
	Replica int
}

// Extents appends to dst the pieces of the access [off, off+n) for copy
// replica (0: primary, 1: second copy), split at stripe boundaries, in
// address order. An access outside the region or a replica the layout
// lacks is an error wrapping ErrLayout.
func (l Layout) Extents(off, n uint64, replica int, dst []Extent) ([]Extent, error) {
	if off > l.Size || n > l.Size-off {
		return dst, fmt.Errorf("%w: [%d, +%d) outside the region's %d bytes", ErrLayout, off, n, l.Size)
	}
	if replica < 0 || replica >= l.Replicas {
		return dst, fmt.Errorf("%w: replica %d of %d", ErrLayout, replica, l.Replicas)
	}
	k := uint64(l.Columns)
	for n > 0 {
		i := off / l.Stripe // stripe index
		in := off % l.Stripe
		piece := min(n, l.Stripe-in)
		c := int(i % k)
		local := (i/k)*l.Stripe + in
		if replica == 1 {
			c = int((i + 1) % k)
			local += l.Primaries(c) * l.Stripe
		}
		dst = append(dst, Extent{Off: off, Len: piece, Column: c, Local: local, Replica: replica})
		off += piece
		n -= piece
	}
	return dst, nil
}
