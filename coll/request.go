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

// start runs f in a goroutine as a non-blocking collective. The call's
// sequence number is reserved by the caller before start, so every rank
// numbers its collectives identically whatever the goroutines' timing.
func start(ctx context.Context, f func(ctx context.Context) error) *Request {
	r := &Request{done: make(chan struct{})}
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
