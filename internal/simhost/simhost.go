// Package simhost puts a sans-I/O core on the simulated network
// (netio/simnet) in tests and simulations: a [Host] is the simnet.Node of
// one core, passing each datagram (its RxTime included) to the core's
// Receive, and on each Poll running the caller's hooks, polling the core,
// handing its completions to their callbacks and merging the deadlines.
//
// The core is any type with Receive(now, datagram) and a Poll that also
// returns completions (endpoint.Core is one, with *endpoint.Op). simhost
// imports only netio, simnet and loop, so that the cores' own tests can
// use it: a package wraps its core in a Host and adds what it needs
// (posting work, heartbeats, serving requests) through the hooks.
//
//	h := &simhost.Host[*endpoint.Op]{Core: core, Repoll: true}
//	h.Attach(net, addr, link, link)
//	core.Post(net.Now(), op)
//	h.Track(op, func(op *endpoint.Op) { ... })
//	h.Wake()
//
// A core whose Poll has no completions (fabric.Switch) is a loop.Machine
// already and is attached to the network as it is.
package simhost

import (
	"net/netip"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/netio/loop"
	"github.com/ndma/ndma/netio/simnet"
)

// Core is a sans-I/O core that completes operations of type T.
type Core[T comparable] interface {
	// Receive takes one received datagram (loop.Machine's Receive).
	Receive(now time.Time, d netio.Datagram)
	// Poll appends what to send to out and returns it, the operations
	// completed since the last Poll and the core's next deadline (zero:
	// none).
	Poll(now time.Time, out []netio.Datagram) ([]netio.Datagram, []T, time.Time)
}

// Host attaches a Core to a simnet.Network: it is the core's
// simnet.Node. Set the fields before attaching it; the hooks run on the
// network's goroutine, inside the Host's Poll.
type Host[T comparable] struct {
	Core Core[T]
	// Before, if set, runs at the start of each Poll, before the core is
	// polled: posting more work, sending heartbeats, answering requests.
	Before func(now time.Time)
	// Done, if set, gets each completed operation that has no callback
	// of its own (see Track). An operation with neither is dropped.
	Done func(now time.Time, op T)
	// Deadline, if set, is the host's own next deadline (zero: none),
	// asked after the completions are handed out; Poll returns the
	// earlier of it and the core's.
	Deadline func() time.Time
	// Repoll asks for another Poll at once after one that completed
	// something, for the work the completions' handlers posted.
	Repoll bool

	net  *simnet.Network
	addr netip.AddrPort
	cbs  map[T]func(T)
}

// Attach attaches h to n at addr over the links up and down.
func (h *Host[T]) Attach(n *simnet.Network, addr netip.AddrPort, up, down simnet.LinkConfig) {
	h.net, h.addr = n, addr
	n.Attach(addr, h, up, down)
}

// Addr is the address h was attached at.
func (h *Host[T]) Addr() netip.AddrPort { return h.addr }

// Wake has the network poll h now (after the caller posted work to the
// core from outside a Poll).
func (h *Host[T]) Wake() { h.net.Wake(h.addr) }

// Track has cb called, instead of Done, when op completes.
func (h *Host[T]) Track(op T, cb func(T)) {
	if h.cbs == nil {
		h.cbs = map[T]func(T){}
	}
	h.cbs[op] = cb
}

// Receive hands d to the core.
func (h *Host[T]) Receive(now time.Time, d netio.Datagram) { h.Core.Receive(now, d) }

// Poll runs Before, polls the core, hands out its completions and
// returns what the core sends and the earliest deadline.
func (h *Host[T]) Poll(now time.Time, out []netio.Datagram) ([]netio.Datagram, time.Time) {
	if h.Before != nil {
		h.Before(now)
	}
	out, done, next := h.Core.Poll(now, out)
	for _, op := range done {
		if cb, ok := h.cbs[op]; ok {
			delete(h.cbs, op)
			cb(op)
		} else if h.Done != nil {
			h.Done(now, op)
		}
	}
	if h.Deadline != nil {
		next = loop.Earliest(next, h.Deadline())
	}
	if len(done) > 0 && h.Repoll {
		next = now
	}
	return out, next
}

// Ticker paces a periodic action (heartbeats) in virtual time.
type Ticker struct {
	Every time.Duration
	next  time.Time
}

// Due reports whether the action is due at now, and if so schedules the
// next one Every later.
func (t *Ticker) Due(now time.Time) bool {
	if now.Before(t.next) {
		return false
	}
	t.next = now.Add(t.Every)
	return true
}

// Next is when the action is due next.
func (t *Ticker) Next() time.Time { return t.next }
