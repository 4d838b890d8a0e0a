package main

/*
#include "ndma.h"
void ndma_call_notify(void *fn, void *arg);
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"unsafe"

	"github.com/ndma/ndma/coll"
	"github.com/ndma/ndma/endpoint"
)

// run runs a collective: blocking when req is nil (under the
// communicator's timeout), else started with its handle stored in *req.
func (cm *comm) run(req *C.ndma_request_t, op coll.Operation, f func(ctx context.Context, opts []coll.CallOption) *coll.Request) C.int {
	if req != nil {
		handles.Lock()
		full := len(handles.reqs) >= maxRequests
		handles.Unlock()
		if full {
			return argErr("%d requests not yet waited for or tested complete", maxRequests)
		}
	}
	opts, timeout := cm.callOpts(op)
	// Cancelable always: ndma_comm_free cancels what is in flight.
	var ctx context.Context
	var cancel context.CancelFunc
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(context.Background(), timeout)
	} else {
		ctx, cancel = context.WithCancel(context.Background())
	}
	// Blocking calls are tracked like requests too, so that
	// ndma_comm_free from another thread waits until they no longer use
	// their buffers. A blocking call runs on the caller's goroutine
	// (coll.Inline), outside cm.mu: no other thread takes part in
	// starting it or in reporting its end.
	r := &request{cancel: cancel, c: cm}
	cm.mu.Lock()
	if cm.closed {
		cm.mu.Unlock()
		cancel()
		return fail(coll.ErrClosed)
	}
	cm.inflight[r] = struct{}{}
	if req == nil {
		r.done = make(chan struct{})
		cm.mu.Unlock()
		r.r = f(endpoint.Driving(coll.Inline(ctx)), opts)
		cm.forget(r)
		return r.result()
	}
	// A request stays in flight until ndma_wait or ndma_test finds it
	// complete (or the communicator is freed).
	r.r = f(ctx, opts)
	cm.mu.Unlock()
	handles.Lock()
	h := newHandle()
	handles.reqs[h] = r
	handles.Unlock()
	*req = C.ndma_request_t(h)
	return C.NDMA_OK
}

// forget takes r, done, off the calls in flight.
func (cm *comm) forget(r *request) {
	cm.mu.Lock()
	delete(cm.inflight, r)
	cm.mu.Unlock()
	if r.done != nil {
		close(r.done)
	}
}

// wait waits until r no longer uses its buffers.
func (r *request) wait() {
	if r.done != nil {
		<-r.done // a blocking call, on another thread
	} else {
		<-r.r.Done()
	}
}

// result releases the completed request r's context and returns its
// code; a call ndma_comm_free cancelled is NDMA_ERR_CLOSED.
func (r *request) result() C.int {
	_, err := r.r.Test() // first: the request's end stops its context's watch
	r.cancel()
	if err == nil {
		return C.NDMA_OK
	}
	r.c.mu.Lock()
	closed := r.c.closed
	r.c.mu.Unlock()
	if closed && errors.Is(err, context.Canceled) {
		err = fmt.Errorf("%w: freed while the call was in flight: %w", coll.ErrClosed, err)
	}
	return fail(err)
}

// lookupRequest returns the request of handle h.
func lookupRequest(h C.ndma_request_t) (*request, error) {
	handles.Lock()
	defer handles.Unlock()
	r := handles.reqs[uint64(h)]
	if r == nil {
		return nil, fmt.Errorf("%w: no request %d (never started, or already completed by ndma_wait or ndma_test)", coll.ErrArg, uint64(h))
	}
	return r, nil
}

// finish frees the completed request h and returns its result.
func finish(h C.ndma_request_t, r *request) C.int {
	handles.Lock()
	delete(handles.reqs, uint64(h))
	handles.Unlock()
	r.c.forget(r)
	return r.result()
}

//export ndmago_wait
func ndmago_wait(h C.ndma_request_t) (rc C.int) {
	defer guard(&rc)
	r, err := lookupRequest(h)
	if err != nil {
		return fail(err)
	}
	if r.r.Endpoint() {
		// A switch operation, completed as the endpoint steps its reply:
		// this thread reads the socket itself until then, as a blocking
		// call does.
		r.c.ep.Drive(endpoint.Driving(context.Background()), func() bool {
			select {
			case <-r.r.Done():
				return true
			default:
				return false
			}
		})
	}
	<-r.r.Done()
	return finish(h, r)
}

//export ndmago_request_notify
func ndmago_request_notify(h C.ndma_request_t, fn, arg unsafe.Pointer) (rc C.int) {
	defer guard(&rc)
	if fn == nil {
		return argErr("notify: fn is NULL")
	}
	r, err := lookupRequest(h)
	if err != nil {
		return fail(err)
	}
	handles.Lock()
	twice := r.notified
	r.notified = true
	handles.Unlock()
	if twice {
		return argErr("request %d already has a notification", uint64(h))
	}
	// fn and arg are C pointers, kept only until the call.
	go func() {
		<-r.r.Done()
		C.ndma_call_notify(fn, arg)
	}()
	return C.NDMA_OK
}

//export ndmago_test
func ndmago_test(h C.ndma_request_t, done *C.int) (rc C.int) {
	defer guard(&rc)
	if done == nil {
		return argErr("done is NULL")
	}
	r, err := lookupRequest(h)
	if err != nil {
		return fail(err)
	}
	select {
	case <-r.r.Done():
		*done = 1
		return finish(h, r)
	default:
		*done = 0
		return C.NDMA_OK
	}
}

// request is a non-blocking collective handed out as a handle.
type request struct {
	r        *coll.Request
	cancel   context.CancelFunc
	c        *comm
	done     chan struct{} // blocking calls: closed once r is done and off c.inflight
	notified bool          // ndma_request_notify was called (under handles)
}

// maxRequests bounds the requests not yet waited for or tested complete,
// so that a program that never waits runs out of requests, not memory.
const maxRequests = 1 << 16
