package coll

import (
	"context"
)

// Request is a non-blocking collective in progress.
type Request struct {
	done chan struct{}
	err  error
}

// Wait blocks until the collective completes or ctx ends (the collective
// itself keeps running under the context it was started with).
func (r *Request) Wait(ctx context.Context) error {
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Test reports whether the collective has completed, and its error.
func (r *Request) Test() (bool, error) {
	select {
	case <-r.done:
		return true, r.err
	default:
		return false, nil
	}
}

// Done is closed when the collective completes.
func (r *Request) Done() <-chan struct{} { return r.done }

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
	r := &Request{done: make(chan struct{})}
	if ctx.Value(inlineKey{}) != nil {
		r.err = f(context.WithValue(ctx, inlineKey{}, nil))
		close(r.done)
		return r
	}
	go func() {
		defer close(r.done)
		r.err = f(ctx)
	}()
	return r
}

// failed returns a completed request carrying err.
func failed(err error) *Request {
	r := &Request{done: make(chan struct{}), err: err}
	close(r.done)
	return r
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
