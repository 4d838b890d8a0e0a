package coll

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/ndma/ndma/wire"
)

// Number is an element type the reductions support.
type Number interface {
	~float32 | ~float64 | ~int32 | ~int64
}

// ReduceOp is an element-wise reduction.
type ReduceOp = wire.Alu

// Reductions.
const (
	Sum  ReduceOp = wire.AluAdd
	Prod ReduceOp = wire.AluProd
	Min  ReduceOp = wire.AluMin
	Max  ReduceOp = wire.AluMax
)

// dtypeOf maps T to its wire element type.
func dtypeOf[T Number]() wire.Dtype {
	var z T
	switch any(z).(type) {
	case float32:
		return wire.DtypeF32
	case float64:
		return wire.DtypeF64
	case int32:
		return wire.DtypeI32
	case int64:
		return wire.DtypeI64
	}
	// Named types (~float32...): integer division tells ints from floats.
	if unsafe.Sizeof(z) == 4 {
		if T(1)/T(2) == 0 {
			return wire.DtypeI32
		}
		return wire.DtypeF32
	}
	if T(1)/T(2) == 0 {
		return wire.DtypeI64
	}
	return wire.DtypeF64
}

// asBytes views a slice of numbers as its bytes (no copy). NDMA memory is
// little-endian, as are the machines it runs on (amd64, arm64).
func asBytes[T Number](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0])))
}

// Allreduce reduces send element-wise over all ranks into recv on every
// rank. send nil means in place (recv holds this rank's input, MPI_IN_PLACE).
func Allreduce[T Number](ctx context.Context, c *Communicator, send, recv []T, op ReduceOp, opts ...CallOption) error {
	if send != nil && len(send) != len(recv) {
		return fmt.Errorf("%w: send %d elements, recv %d", ErrArg, len(send), len(recv))
	}
	return c.AllreduceBytes(ctx, asBytes(send), asBytes(recv), dtypeOf[T](), op, opts...)
}

// Reduce reduces send over all ranks into recv at root (recv is ignored
// elsewhere and may be nil). send nil at the root means in place.
func Reduce[T Number](ctx context.Context, c *Communicator, send, recv []T, op ReduceOp, root int, opts ...CallOption) error {
	return c.ReduceBytes(ctx, asBytes(send), asBytes(recv), dtypeOf[T](), op, root, opts...)
}

// ReduceScatter reduces send (Size blocks of len(recv) elements) over all
// ranks and leaves block i of the result at rank i.
func ReduceScatter[T Number](ctx context.Context, c *Communicator, send, recv []T, op ReduceOp, opts ...CallOption) error {
	if len(send) != len(recv)*c.size {
		return fmt.Errorf("%w: send %d elements for %d ranks × %d", ErrArg, len(send), c.size, len(recv))
	}
	return c.ReduceScatterBytes(ctx, asBytes(send), asBytes(recv), dtypeOf[T](), op, opts...)
}
