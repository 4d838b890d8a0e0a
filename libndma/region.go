package main

/*
#include "ndma.h"
*/
import "C"

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/ndma/ndma/coll"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// region is a pool region handed out as a handle.
type region struct {
	r     *pool.Region
	c     *comm
	owner bool // this rank created it and frees it
}

// maxRegions bounds the regions a process holds at once.
const maxRegions = 4096

// poolCallTimeout bounds a region call when the communicator has no
// timeout of its own.
const poolCallTimeout = 5 * time.Minute

// poolClient returns the communicator's pool client, made on first use
// over its endpoint.
func (cm *comm) poolClient() (*pool.Client, error) {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	if cm.closed {
		return nil, coll.ErrClosed
	}
	if cm.pool == nil {
		p, err := pool.New(cm.ep, cm.launch.Switch, pool.Options{Fabric: cm.launch.FabricOptions()})
		if err != nil {
			return nil, err
		}
		cm.pool = p
	}
	return cm.pool, nil
}

// poolCall is a region call in flight, which ndma_comm_free cancels and
// waits for before the buffers it uses are given back.
type poolCall struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// do runs f as a region call of cm, bounded by the communicator's
// timeout (or poolCallTimeout), and returns its code.
func (cm *comm) do(f func(ctx context.Context) error) C.int {
	_, timeout := cm.callOpts(coll.OpBarrier)
	if timeout <= 0 {
		timeout = poolCallTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	pc := &poolCall{cancel: cancel, done: make(chan struct{})}
	cm.mu.Lock()
	if cm.closed {
		cm.mu.Unlock()
		cancel()
		return fail(coll.ErrClosed)
	}
	cm.poolCalls[pc] = struct{}{}
	cm.mu.Unlock()
	err := f(ctx)
	cancel()
	cm.mu.Lock()
	delete(cm.poolCalls, pc)
	closed := cm.closed
	cm.mu.Unlock()
	close(pc.done)
	if err == nil {
		return C.NDMA_OK
	}
	if closed && errors.Is(err, context.Canceled) {
		err = fmt.Errorf("%w: freed while the call was in flight: %w", coll.ErrClosed, err)
	}
	return fail(err)
}

// endPoolCalls cancels the communicator's region calls in flight, waits
// for them, and gives back the memory of the regions this rank created
// (the communicator is closed already: no new call starts).
func (cm *comm) endPoolCalls() {
	cm.mu.Lock()
	var calls []*poolCall
	for pc := range cm.poolCalls {
		calls = append(calls, pc)
	}
	cm.mu.Unlock()
	for _, pc := range calls {
		pc.cancel()
		<-pc.done
	}
	handles.Lock()
	var owned []*region
	for h, r := range handles.regions {
		if r.c == cm {
			delete(handles.regions, h)
			if r.owner {
				owned = append(owned, r)
			}
		}
	}
	handles.Unlock()
	for _, r := range owned {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = cm.pool.Free(ctx, r.r) // best effort: the communicator is going away
		cancel()
	}
}

func lookupRegion(h C.ndma_region_t) (*region, error) {
	handles.Lock()
	defer handles.Unlock()
	r := handles.regions[uint64(h)]
	if r == nil {
		return nil, fmt.Errorf("%w: no region %d (never allocated, or freed with it or its communicator)", coll.ErrArg, uint64(h))
	}
	return r, nil
}

// regionAnnounce is what rank 0 broadcasts after creating a region:
// ok (1) or not (0), the region's id and its key.
const regionAnnounce = 16

//export ndmago_region_alloc
func ndmago_region_alloc(h C.ndma_comm_t, size, stripe C.uint64_t, out *C.ndma_region_t) (rc C.int) {
	defer guard(&rc)
	cm, err := lookupComm(h)
	if err != nil {
		return fail(err)
	}
	if out == nil {
		return argErr("region is NULL")
	}
	if size == 0 || stripe%8 != 0 {
		return argErr("region of %d bytes, stripe %d: want a size above 0 and a stripe that is a multiple of 8", uint64(size), uint64(stripe))
	}
	handles.Lock()
	full := len(handles.regions) >= maxRegions
	handles.Unlock()
	if full {
		return argErr("%d regions held: free some first", maxRegions)
	}
	c, err := cm.poolClient()
	if err != nil {
		return fail(err)
	}
	var reg *pool.Region
	rc = cm.do(func(ctx context.Context) error {
		// Rank 0 creates and tells the others; every rank then says
		// whether it could open it, so that all fail or none.
		msg := make([]byte, regionAnnounce)
		var cerr error
		if cm.c.Rank() == 0 {
			reg, cerr = c.Alloc(ctx, uint64(size), pool.AllocOptions{Stripe: uint64(stripe)})
			if cerr == nil {
				msg[0] = 1
				binary.LittleEndian.PutUint32(msg[4:], reg.ID())
				binary.LittleEndian.PutUint64(msg[8:], reg.Key())
			}
		}
		if err := cm.c.Bcast(ctx, msg, 0); err != nil {
			return err
		}
		if cm.c.Rank() != 0 {
			if msg[0] != 1 {
				return fmt.Errorf("%w: rank 0 could not create the region of %d bytes (its error says why)", ctrl.ErrNoSpace, uint64(size))
			}
			reg, cerr = c.Open(ctx, binary.LittleEndian.Uint32(msg[4:]), binary.LittleEndian.Uint64(msg[8:]))
		} else if cerr != nil {
			return cerr
		}
		ok := []byte{1, 0, 0, 0}
		if cerr != nil {
			ok[0] = 0
		}
		all := make([]byte, 4)
		if err := cm.c.AllreduceBytes(ctx, ok, all, wire.DtypeI32, coll.Min); err != nil {
			return err
		}
		if cerr != nil {
			return cerr
		}
		if all[0] != 1 {
			if cm.c.Rank() == 0 {
				_ = c.Free(ctx, reg)
			}
			reg = nil
			return fmt.Errorf("%w: a rank could not open the region (its error says why)", coll.ErrArg)
		}
		return nil
	})
	if rc != C.NDMA_OK {
		return rc
	}
	handles.Lock()
	id := newHandle()
	handles.regions[id] = &region{r: reg, c: cm, owner: cm.c.Rank() == 0}
	handles.Unlock()
	*out = C.ndma_region_t(id)
	return C.NDMA_OK
}

//export ndmago_region_free
func ndmago_region_free(h C.ndma_region_t) (rc C.int) {
	defer guard(&rc)
	handles.Lock()
	r := handles.regions[uint64(h)]
	delete(handles.regions, uint64(h))
	handles.Unlock()
	if r == nil {
		return argErr("no region %d (never allocated, or freed with it or its communicator)", uint64(h))
	}
	return r.c.do(func(ctx context.Context) error {
		// Nobody may still use the region when its memory goes back.
		berr := r.c.c.Barrier(ctx)
		if !r.owner {
			return berr
		}
		err := r.c.pool.Free(ctx, r.r)
		if berr != nil {
			return berr
		}
		return err
	})
}

//export ndmago_region_size
func ndmago_region_size(h C.ndma_region_t, size *C.uint64_t) (rc C.int) {
	defer guard(&rc)
	r, err := lookupRegion(h)
	if err != nil {
		return fail(err)
	}
	if size == nil {
		return argErr("bytes is NULL")
	}
	*size = C.uint64_t(r.r.Size())
	return C.NDMA_OK
}

// inRegion checks that n bytes at off lie inside r.
func (r *region) inRegion(off, n uint64) error {
	if size := uint64(r.r.Size()); off > size || n > size-off {
		return fmt.Errorf("%w: %d bytes at %d: outside the region of %d bytes", coll.ErrArg, n, off, size)
	}
	return nil
}

//export ndmago_region_io
func ndmago_region_io(h C.ndma_region_t, write C.int, off C.uint64_t, buf unsafe.Pointer, n C.size_t) (rc C.int) {
	defer guard(&rc)
	r, err := lookupRegion(h)
	if err != nil {
		return fail(err)
	}
	if n > 0 && buf == nil {
		return argErr("buf is NULL")
	}
	if err := r.inRegion(uint64(off), uint64(n)); err != nil {
		return fail(err)
	}
	b := cbytes(buf, uintptr(n))
	return r.c.do(func(ctx context.Context) error {
		if write != 0 {
			_, err := r.r.WriteAtContext(ctx, b, int64(off))
			return err
		}
		_, err := r.r.ReadAtContext(ctx, b, int64(off))
		return err
	})
}

//export ndmago_region_state_stride
func ndmago_region_state_stride(h C.ndma_region_t, n C.uint64_t, stride *C.uint64_t) (rc C.int) {
	defer guard(&rc)
	r, err := lookupRegion(h)
	if err != nil {
		return fail(err)
	}
	if stride == nil {
		return argErr("stride is NULL")
	}
	*stride = C.uint64_t(r.r.StateStride(uint64(n)))
	return C.NDMA_OK
}

//export ndmago_region_optim_step
func ndmago_region_optim_step(h C.ndma_region_t, off, stride C.uint64_t, o *C.ndma_optim, grads *C.float, count C.size_t) (rc C.int) {
	defer guard(&rc)
	r, err := lookupRegion(h)
	if err != nil {
		return fail(err)
	}
	if o == nil || count > 0 && grads == nil {
		return argErr("optimizer parameters or grads is NULL")
	}
	if o.struct_size < C.size_t(unsafe.Sizeof(*o)) {
		return argErr("ndma_optim.struct_size %d: fill it with ndma_optim_init first", uint64(o.struct_size))
	}
	p := wire.OptimParams{Algo: wire.OptimAlgo(o.algo), Step: uint32(o.step), LR: float32(o.lr), Beta1: float32(o.beta1),
		Beta2: float32(o.beta2), Eps: float32(o.eps), WeightDecay: float32(o.weight_decay)}
	if o.algo != C.NDMA_OPTIM_SGD && o.algo != C.NDMA_OPTIM_ADAM {
		return argErr("optimizer %d: want NDMA_OPTIM_SGD or NDMA_OPTIM_ADAM", int(o.algo))
	}
	if _, err := wire.ParseOptim(wire.AppendOptim(nil, &p)); err != nil {
		return fail(fmt.Errorf("%w: %w", coll.ErrArg, err))
	}
	if uintptr(count) > maxBytes/4 {
		return argErr("count %d too large", uint64(count))
	}
	n := uint64(count) * 4
	least := r.r.StateStride(n)
	if off%4 != 0 || stride == 0 || uint64(stride)%r.r.StateStride(1) != 0 || uint64(stride) < least {
		return argErr("offset %d, stride %d: want an offset that is a multiple of 4 and a stride that is a multiple of %d, at least %d",
			uint64(off), uint64(stride), r.r.StateStride(1), least)
	}
	last := uint64(off) + 2*uint64(stride)
	if p.Algo == wire.OptimSGD {
		last = uint64(off) + uint64(stride)
	}
	if err := r.inRegion(last, n); err != nil {
		return fail(fmt.Errorf("%w (the parameters' optimizer state must lie in the region too)", err))
	}
	g := cbytes(unsafe.Pointer(grads), uintptr(n))
	return r.c.do(func(ctx context.Context) error {
		return r.r.OptimizerStep(ctx, uint64(off), uint64(stride), p, g)
	})
}
