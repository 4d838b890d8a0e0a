package stor

import "sync"

// gate lets any number of operations through at once (enter, leave) until
// it is closed: close waits for those inside to leave and keeps new ones
// out until open. Its waits are on a sync.Cond, which a synctest bubble
// counts as durably blocked, and its mutex is held only to count.
type gate struct {
	mu     sync.Mutex
	cond   sync.Cond
	inside int
	closed bool
}

func (g *gate) init() {
	if g.cond.L == nil {
		g.cond.L = &g.mu
	}
}

// enter waits while the gate is closed, then counts one more inside.
func (g *gate) enter() {
	g.mu.Lock()
	g.init()
	for g.closed {
		g.cond.Wait()
	}
	g.inside++
	g.mu.Unlock()
}

// leave counts one less inside.
func (g *gate) leave() {
	g.mu.Lock()
	g.init()
	g.inside--
	if g.inside == 0 {
		g.cond.Broadcast()
	}
	g.mu.Unlock()
}

// close keeps new operations out and waits until none is inside. Only
// one closer at a time (the caller serializes them).
func (g *gate) close() {
	g.mu.Lock()
	g.init()
	g.closed = true
	for g.inside > 0 {
		g.cond.Wait()
	}
	g.mu.Unlock()
}

// open lets operations in again.
func (g *gate) open() {
	g.mu.Lock()
	g.init()
	g.closed = false
	g.cond.Broadcast()
	g.mu.Unlock()
}
