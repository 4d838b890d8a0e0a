package transport

import (
	"time"

	"github.com/ndma/ndma/wire"
)

// A receiver that is not scheduled for a few milliseconds (a busy
// machine, a hypervisor that stops its virtual CPU) keeps receiving into
// its kernel buffer but acknowledges nothing, and a window sized to the
// path's bandwidth-delay product then idles the sender for the whole
// stall. On a stream whose ACKs the switch merges over a group
// (multicast, aggregation) that happens for every member's stall, since
// the merged ACK waits for the slowest. So once such a stream in flight has
// heard of no progress for its base RTT (at least stallQuiet), the
// sender keeps its ACK clock running: a window's worth of packets more
// in flight per base RTT of silence, for up to stallWindows base RTTs
// (BBR keeps more than the bandwidth-delay product in flight for ACKs
// that come late for the same reason). The allowance ends with
// the next progress; a silence that lasts is a loss or an outage, which
// the retransmission timeout handles as before. The base is the lowest
// RTT, not the smoothed one, which the stalls themselves inflate.
const (
	stallQuiet   = time.Millisecond
	stallWindows = 3
)

// sendLimit is how many packets may be in flight now: the congestion
// window, plus the stall allowance while ACKs have stopped.
func (p *peer) sendLimit() int {
	c := p.cwndPkts()
	start, base, ok := p.stallStart()
	if !ok {
		return c
	}
	silent := p.e.now.Sub(start)
	if silent <= 0 {
		return c
	}
	extra := min(int(float64(c)*float64(silent)/float64(base)), stallWindows*c)
	return c + extra
}

// stallStart is when the stall allowance of a stream in flight whose
// ACKs the switch merges over a group (multicast, aggregation) begins to
// grow if no progress comes: its base RTT, at least stallQuiet, after the
// last progress. base is the RTT it clocks packets out at: the lowest of
// a full-size packet, else of any packet. ok is false for other streams,
// for one with nothing in flight, or before any RTT sample.
func (p *peer) stallStart() (start time.Time, base time.Duration, ok bool) {
	if (p.id.Mode != wire.ModeMulticast && p.id.Mode != wire.ModeAggregate) || p.sndUna == p.sndNxt {
		return time.Time{}, 0, false
	}
	base = p.win.Base
	if base == 0 {
		base = p.rtt.Min
	}
	if base <= 0 {
		return time.Time{}, 0, false
	}
	return p.lastProgress.Add(max(base, stallQuiet)), base, true
}

// stallDeadline is when sendLimit next grows for a peer held by it with
// data to send (zero: it does not).
func (p *peer) stallDeadline() time.Time {
	start, base, ok := p.stallStart()
	if !ok || p.qhead == nil || p.inflight < p.sendLimit() {
		return time.Time{}
	}
	c := p.cwndPkts()
	k := max(p.inflight-c+1, 1) // the allowance that lets one more go
	if k > stallWindows*c {
		return time.Time{}
	}
	at := start.Add(time.Duration(float64(k) * float64(base) / float64(c)))
	if !at.After(p.e.now) {
		at = p.e.now.Add(time.Microsecond)
	}
	return at
}
