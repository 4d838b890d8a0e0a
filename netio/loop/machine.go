package loop

import (
	"time"

	"github.com/ndma/ndma/netio"
)

// Machine is a sans-I/O protocol core attached to a network at one
// address: the shape every core (endpoint.Core through the endpoint,
// fabric.Switch, the transport tests' nodes) takes, so that one driver
// (Driver, simnet.Network) runs any of them and wrappers (secure.Wrap)
// compose. Its owner calls it one call at a time; it never does I/O or
// reads the clock.
type Machine interface {
	// Receive delivers one datagram at time now. d.Addr is the sender,
	// d.RxTime when it arrived (Unix ns: when the kernel received it,
	// or on simnet the virtual time, earlier than now for a datagram
	// held while the node was stalled; zero: unknown). d.Buf is only
	// valid during the call, and the machine may modify it in place.
	Receive(now time.Time, d netio.Datagram)
	// Poll appends the datagrams the machine wants to send now to out
	// and returns them, plus the next time it wants Poll called (the
	// zero time means no timer). The returned deadline replaces the
	// previous one; a deadline at or before now asks for another Poll at
	// once. The datagrams stay valid until the next call of the
	// machine: a Driver writes them before it calls it again (unless
	// Config.Overlap says that Receive calls leave them alone), and
	// simnet copies them.
	Poll(now time.Time, out []netio.Datagram) ([]netio.Datagram, time.Time)
}

// Streamer is a Machine whose output is costly to produce per datagram
// (secure.Wrap seals each one): the Driver calls PollWrite instead of
// Poll, and the machine hands its datagrams to write in parts, so that
// the first are on the wire while the next are produced. write sends a
// part at once; the part's buffers are the machine's again when write
// returns. scratch is the machine's to reuse: PollWrite returns it
// (grown) for the next call. The deadline is Poll's.
type Streamer interface {
	Machine
	PollWrite(now time.Time, scratch []netio.Datagram, write func([]netio.Datagram)) ([]netio.Datagram, time.Time)
}

// Earliest returns the earlier of two deadlines, where the zero time
// means none.
func Earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
