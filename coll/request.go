package coll

import (
	"context"
	"sync"
)

// Request is a non-blocking collective in progress.
type Request struct {
	done <-chan struct{}
	err  error
	// result, when set, gives err once done is closed (a request that is
	// one switch operation: op, no goroutine of its own).
	result func() error
	once   sync.Once
	op     bool
}

// Wait blocks until the collective completes or ctx ends (the collective
// itself keeps running under the context it was started with).
func (r *Request) Wait(ctx context.Context) error {
	select {
	case <-r.done:
		return r.finish()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Test reports whether the collective has completed, and its error.
func (r *Request) Test() (bool, error) {
	select {
	case <-r.done:
		return true, r.finish()
	default:
		return false, nil
	}
}

// finish returns the completed request's error.
func (r *Request) finish() error {
	if r.result != nil {
		r.once.Do(func() { r.err = r.result() })
	}
	return r.err
}

// Done is closed when the collective completes.
func (r *Request) Done() <-chan struct{} { return r.done }

// Endpoint reports whether the request is one operation of the
// communicator's endpoint, which completes it as the endpoint steps the
// reply, with no goroutine of its own: a waiter may then drive the
// endpoint itself until Done is closed (endpoint.Endpoint.Drive). Other
// requests run in a goroutine that must get the thread.
func (r *Request) Endpoint() bool { return r.op }

// inlineKey marks a context made by Inline.
type inlineKey struct{}

// Inline returns a context under which the non-blocking forms (Ibcast,
// IallreduceBytes, ...) run the collective on the calling goroutine and
// return it completed, as the blocking forms do. It is for callers that
// hold one API for both and wait at once (the C library's blocking
// calls): no goroutine is started, so no other thread has to be woken
// to run the call or to report its end. The mark is not passed on to
// the collective's own context.
func Inline(ctx context.Context) context.Context {
	return context.WithValue(ctx, inlineKey{}, true)
}

// start runs f in a goroutine as a non-blocking collective (on the
// caller's goroutine under Inline). The call's sequence number is
// reserved by the caller before start, so every rank numbers its
// collectives identically whatever the goroutines' timing.
func start(ctx context.Context, f func(ctx context.Context) error) *Request {
	done := make(chan struct{})
	r := &Request{done: done}
	if ctx.Value(inlineKey{}) != nil {
		r.err = f(context.WithValue(ctx, inlineKey{}, nil))
		close(done)
		return r
	}
	go func() {
		defer close(done)
		r.err = f(ctx)
	}()
	return r
}

// failed returns a completed request carrying err.
func failed(err error) *Request {
	done := make(chan struct{})
	close(done)
	return &Request{done: done, err: err}
}

// closed reports whether ch is closed (a Done channel).
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// closedChan is a closed channel, the Done of requests complete at once.
var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()
