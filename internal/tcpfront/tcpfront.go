// Package tcpfront is what NDMA's TCP front ends (kv/frontend's memcached
// and Redis, mq/kafka's Kafka) share: their listeners and connections,
// bounded, counted, and all closed at once.
package tcpfront

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
)

// ErrClosed is returned by Serve once the set is closed.
var ErrClosed = errors.New("tcpfront: closed")

// Conns is a front end's listeners and connections, at most Max
// connections at once. Its methods are safe for concurrent use.
type Conns struct {
	max      int
	mu       sync.Mutex
	lns      map[net.Listener]struct{} // under mu
	conns    map[net.Conn]struct{}     // under mu; at most max
	closed   bool                      // under mu
	wg       sync.WaitGroup            // Serve's connection goroutines
	accepted atomic.Uint64
	refused  atomic.Uint64
}

// New returns a set of at most max connections.
func New(max int) *Conns {
	return &Conns{max: max, lns: make(map[net.Listener]struct{}), conns: make(map[net.Conn]struct{})}
}

// Serve accepts connections on l and runs serve on each, on a goroutine
// of its own, until Close (ErrClosed) or until l fails. serve calls
// Enter and Leave.
func (c *Conns) Serve(l net.Listener, serve func(net.Conn)) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		l.Close()
		return ErrClosed
	}
	c.lns[l] = struct{}{}
	c.mu.Unlock()
	for {
		nc, err := l.Accept()
		if err != nil {
			c.mu.Lock()
			closed := c.closed
			delete(c.lns, l)
			c.mu.Unlock()
			if closed {
				return ErrClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("accept on %v: %w", l.Addr(), err)
		}
		c.wg.Go(func() { serve(nc) })
	}
}

// Enter admits connection nc and returns its number (from 1), or 0 when
// the set is closed or full (full then true: the refusal is counted).
// An admitted connection calls Leave when it ends.
func (c *Conns) Enter(nc net.Conn) (id uint64, full bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return 0, false
	case len(c.conns) >= c.max:
		c.refused.Add(1)
		return 0, true
	}
	c.conns[nc] = struct{}{}
	return c.accepted.Add(1), false
}

// Leave forgets an admitted connection.
func (c *Conns) Leave(nc net.Conn) {
	c.mu.Lock()
	delete(c.conns, nc)
	c.mu.Unlock()
}

// Close closes every listener and connection; Serve returns ErrClosed
// and later connections are not admitted. Wait then waits for the
// connections' goroutines.
func (c *Conns) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for l := range c.lns {
		l.Close()
	}
	for nc := range c.conns {
		nc.Close()
	}
}

// Wait waits until every connection Serve started has ended.
func (c *Conns) Wait() { c.wg.Wait() }

// Counts returns the connections served now, admitted in all and
// refused for the bound.
func (c *Conns) Counts() (now int, accepted, refused uint64) {
	c.mu.Lock()
	now = len(c.conns)
	c.mu.Unlock()
	return now, c.accepted.Load(), c.refused.Load()
}
