// Package poolmap is the pool's address map: how a pool region of Size
// bytes is striped over its memory nodes (Layout, Extents) and the limits
// of a region's shape. The switch's MMU translates pool accesses with it,
// clients (package pool) split and chain their accesses by it, and a
// memory node rebuilding a copy reads its column by it, so all three
// agree on where every byte lives; the control messages (package
// wire/ctrl) check a region's shape against its limits. It is arithmetic
// only: no clock, no state.
package poolmap
