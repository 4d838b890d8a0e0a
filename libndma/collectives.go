package main

/*
#include "ndma.h"
*/
import "C"

import (
	"context"
	"unsafe"

	"github.com/ndma/ndma/coll"
	"github.com/ndma/ndma/wire"
)

// cbytes is n bytes of C memory at p (nil for n == 0).
func cbytes(p unsafe.Pointer, n uintptr) []byte {
	if n == 0 || p == nil {
		return nil
	}
	return unsafe.Slice((*byte)(p), n)
}

// dtypeOf maps an ndma_dtype to its wire type and element size (0 for
// an unknown type).
func dtypeOf(dt C.int) (wire.Dtype, uintptr) {
	switch dt {
	case C.NDMA_FLOAT32:
		return wire.DtypeF32, 4
	case C.NDMA_FLOAT64:
		return wire.DtypeF64, 8
	case C.NDMA_INT32:
		return wire.DtypeI32, 4
	case C.NDMA_INT64:
		return wire.DtypeI64, 8
	}
	return 0, 0
}

func opOf(op C.int) (coll.ReduceOp, bool) {
	switch op {
	case C.NDMA_SUM:
		return coll.Sum, true
	case C.NDMA_PROD:
		return coll.Prod, true
	case C.NDMA_MIN:
		return coll.Min, true
	case C.NDMA_MAX:
		return coll.Max, true
	}
	return 0, false
}

// maxBytes bounds one call's buffer (the size of a C array in Go).
const maxBytes = 1 << 40

//export ndmago_reduce
func ndmago_reduce(h C.ndma_comm_t, kind C.int, send, recv unsafe.Pointer, count C.size_t, dtype, op C.int, root C.int, req *C.ndma_request_t) (rc C.int) {
	defer guard(&rc)
	cm, err := lookupComm(h)
	if err != nil {
		return fail(err)
	}
	dt, esize := dtypeOf(dtype)
	if esize == 0 {
		return argErr("unknown data type %d", int(dtype))
	}
	alu, ok := opOf(op)
	if !ok {
		return argErr("unknown reduction %d", int(op))
	}
	if uintptr(count) > maxBytes/esize {
		return argErr("count %d too large", uint64(count))
	}
	n := uintptr(count) * esize
	size := uintptr(cm.c.Size())
	switch kind {
	case kindAllreduce:
		if n > 0 && (recv == nil || send == nil) {
			return argErr("allreduce: send or recv is NULL")
		}
		s, r := cbytes(send, n), cbytes(recv, n)
		if send == recv {
			s = nil // in place
		}
		return cm.run(req, coll.OpAllreduce, func(ctx context.Context, opts []coll.CallOption) *coll.Request {
			return cm.c.IallreduceBytes(ctx, s, r, dt, alu, opts...)
		})
	case kindReduce:
		if root < 0 || int(root) >= cm.c.Size() {
			return argErr("reduce: root %d of %d ranks", int(root), cm.c.Size())
		}
		atRoot := int(root) == cm.c.Rank()
		if n > 0 && (send == nil || atRoot && recv == nil) {
			return argErr("reduce: send, or recv at the root, is NULL")
		}
		s, r := cbytes(send, n), []byte(nil)
		if atRoot {
			r = cbytes(recv, n)
			if send == recv {
				s = nil
			}
		}
		return cm.run(req, coll.OpReduce, func(ctx context.Context, opts []coll.CallOption) *coll.Request {
			return cm.c.IreduceBytes(ctx, s, r, dt, alu, int(root), opts...)
		})
	case kindReduceScatter:
		if n > 0 && (send == nil || recv == nil) {
			return argErr("reduce_scatter: send or recv is NULL")
		}
		if n > maxBytes/size {
			return argErr("count %d too large", uint64(count))
		}
		s, r := cbytes(send, n*size), cbytes(recv, n)
		return cm.run(req, coll.OpReduceScatter, func(ctx context.Context, opts []coll.CallOption) *coll.Request {
			return cm.c.IreduceScatterBytes(ctx, s, r, dt, alu, opts...)
		})
	}
	return argErr("unknown reduction kind %d", int(kind))
}

//export ndmago_bcast
func ndmago_bcast(h C.ndma_comm_t, buf unsafe.Pointer, n C.size_t, root C.int, req *C.ndma_request_t) (rc C.int) {
	defer guard(&rc)
	cm, err := lookupComm(h)
	if err != nil {
		return fail(err)
	}
	if root < 0 || int(root) >= cm.c.Size() {
		return argErr("bcast: root %d of %d ranks", int(root), cm.c.Size())
	}
	if n > 0 && buf == nil || uintptr(n) > maxBytes {
		return argErr("bcast: buf is NULL or too large")
	}
	b := cbytes(buf, uintptr(n))
	return cm.run(req, coll.OpBcast, func(ctx context.Context, opts []coll.CallOption) *coll.Request {
		return cm.c.Ibcast(ctx, b, int(root), opts...)
	})
}

//export ndmago_allgather
func ndmago_allgather(h C.ndma_comm_t, send, recv unsafe.Pointer, n C.size_t, req *C.ndma_request_t) (rc C.int) {
	defer guard(&rc)
	cm, err := lookupComm(h)
	if err != nil {
		return fail(err)
	}
	size := uintptr(cm.c.Size())
	if uintptr(n) > maxBytes/size {
		return argErr("allgather: %d bytes per rank too large", uint64(n))
	}
	if n > 0 && recv == nil {
		return argErr("allgather: recv is NULL")
	}
	var s []byte
	if send != nil {
		s = cbytes(send, uintptr(n))
		if s == nil {
			s = []byte{}
		}
	}
	r := cbytes(recv, uintptr(n)*size)
	return cm.run(req, coll.OpAllgather, func(ctx context.Context, opts []coll.CallOption) *coll.Request {
		return cm.c.Iallgather(ctx, s, r, opts...)
	})
}

//export ndmago_barrier
func ndmago_barrier(h C.ndma_comm_t, req *C.ndma_request_t) (rc C.int) {
	defer guard(&rc)
	cm, err := lookupComm(h)
	if err != nil {
		return fail(err)
	}
	return cm.run(req, coll.OpBarrier, func(ctx context.Context, opts []coll.CallOption) *coll.Request {
		return cm.c.Ibarrier(ctx, opts...)
	})
}

// Kinds of ndmago_blocks.
const (
	kindGather   = 0
	kindScatter  = 1
	kindAlltoall = 2
)

// ndmago_blocks runs the collectives that move blocks of n bytes between
// ranks: gather, scatter (at root) and alltoall.
//
//export ndmago_blocks
func ndmago_blocks(h C.ndma_comm_t, kind C.int, send, recv unsafe.Pointer, n C.size_t, root C.int, req *C.ndma_request_t) (rc C.int) {
	defer guard(&rc)
	cm, err := lookupComm(h)
	if err != nil {
		return fail(err)
	}
	size := uintptr(cm.c.Size())
	if uintptr(n) > maxBytes/size {
		return argErr("%d bytes per block too large", uint64(n))
	}
	block, all := uintptr(n), uintptr(n)*size
	if kind != kindAlltoall && (root < 0 || int(root) >= cm.c.Size()) {
		return argErr("root %d of %d ranks", int(root), cm.c.Size())
	}
	atRoot := int(root) == cm.c.Rank()
	switch kind {
	case kindGather:
		// send nil at the root: in place; recv only at the root.
		if n > 0 && (!atRoot && send == nil || atRoot && recv == nil) {
			return argErr("gather: send, or recv at the root, is NULL")
		}
		s, r := cbytes(send, block), []byte(nil)
		if atRoot {
			r = cbytes(recv, all)
		}
		return cm.run(req, coll.OpGather, func(ctx context.Context, opts []coll.CallOption) *coll.Request {
			return cm.c.Igather(ctx, s, r, int(root), opts...)
		})
	case kindScatter:
		if n > 0 && (!atRoot && recv == nil || atRoot && send == nil) {
			return argErr("scatter: recv, or send at the root, is NULL")
		}
		s, r := []byte(nil), cbytes(recv, block)
		if atRoot {
			s = cbytes(send, all)
		}
		return cm.run(req, coll.OpScatter, func(ctx context.Context, opts []coll.CallOption) *coll.Request {
			return cm.c.Iscatter(ctx, s, r, int(root), opts...)
		})
	case kindAlltoall:
		if n > 0 && (send == nil || recv == nil) {
			return argErr("alltoall: send or recv is NULL")
		}
		s, r := cbytes(send, all), cbytes(recv, all)
		return cm.run(req, coll.OpAlltoall, func(ctx context.Context, opts []coll.CallOption) *coll.Request {
			return cm.c.Ialltoall(ctx, s, r, opts...)
		})
	}
	return argErr("unknown block collective %d", int(kind))
}

// Kinds of ndmago_reduce.
const (
	kindAllreduce     = 0
	kindReduce        = 1
	kindReduceScatter = 2
)
