package endpoint

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/ndma/ndma/internal/detector"
	"github.com/ndma/ndma/transport"
)

// ErrSwitchSilent is matched (errors.Is) by a *SwitchError: a group's
// forwarding node stopped answering.
var ErrSwitchSilent = errors.New("endpoint: the switch stopped answering")

// SwitchError fails the operations of a group whose forwarding node
// answered none of this member's heartbeats, and sent it nothing else,
// for Silent: more than 4 heartbeat intervals (FabricOptions.Heartbeat;
// 1 s with the default 250 ms, the switch's default heartbeat timeout),
// up to 6 for a switch whose answers have come irregularly, while the
// member sent one at every interval. It died, stalled or became
// unreachable; the members fail within twice the switch's heartbeat
// timeout of its death, as those under its neighbors do. Every
// multicast, multicast receive and aggregation of the group in flight
// then fails with it, and so does each one posted while the switch stays
// silent, at the next heartbeat interval. A switch that answers again
// (it was stalled) serves the group's later operations as before; one
// that restarted without its state answers that the member is unknown,
// and the group is over (a *MemberError naming the member).
type SwitchError struct {
	Group  uint32
	Switch netip.AddrPort
	Silent time.Duration // since the switch's latest datagram
}

func (e *SwitchError) Error() string {
	return fmt.Sprintf("endpoint: group %d: the switch %v answered no heartbeat for %v: it died or is unreachable", e.Group, e.Switch, e.Silent)
}

// Unwrap makes errors.Is(err, ErrSwitchSilent) true, and errors.Is(err,
// transport.ErrPeerDead): the switch is a peer that stopped responding,
// as a *transport.PeerError of an operation in flight to it reports.
func (e *SwitchError) Unwrap() []error { return []error{ErrSwitchSilent, transport.ErrPeerDead} }

// switchGone fails every group operation of se.Group in flight
// (multicasts, their receives and aggregations, all of which need the
// switch). Two-sided messages between members do not go through the
// switch and are left alone.
func (c *Core) switchGone(se *SwitchError) {
	for _, op := range c.gops {
		if op.Group != se.Group {
			continue
		}
		switch op.Kind {
		case KindMulticast, KindRecv, KindAggregate:
			op.fail(se)
			c.finish(op)
		}
	}
}

// switchHeard is when a datagram last came from the group's switch
// (Core.switchHeard).
func (g *Group) switchHeard() time.Time {
	g.ep.mu.Lock()
	defer g.ep.mu.Unlock()
	return g.ep.core.switchHeard(g.sw)
}

// switchSilent fails the group's operations in flight with a
// *SwitchError: its switch answered no heartbeat for silent.
func (g *Group) switchSilent(silent time.Duration) {
	g.ep.mu.Lock()
	defer g.ep.mu.Unlock()
	if g.ep.closed {
		return
	}
	g.ep.core.switchGone(&SwitchError{Group: g.id, Switch: g.sw, Silent: silent})
	g.ep.pumpLocked(time.Now())
}

// silentBeats is how many heartbeat intervals a switch may answer none of
// a member's heartbeats before it is taken for gone. With the interval a
// quarter of the switch's heartbeat timeout (FabricOptions.Heartbeat),
// that is the switch's own timeout for its members, so the members under
// a dead switch fail their group operations about when the members under
// its neighbors, which the neighbors count dead, do.
const silentBeats = 4

// maxSilentBeats bounds, in heartbeat intervals, the silence allowed a
// switch whose answers have come irregularly: with the check at every
// interval, a dead switch's members fail within 7 intervals (1.75 s with
// the defaults), under twice the switch's heartbeat timeout.
const maxSilentBeats = 6

// lateBeats intervals without a heartbeat sent end a member's run of
// heartbeats on time (heartbeats): it was paused, or could not send.
const lateBeats = 2

// silentAfter is how long a group's switch may answer none of a member's
// heartbeats sent every iv before the group's operations fail (silence;
// a switch whose answers came irregularly is given up to maxSilentBeats
// intervals), and past which Leave waits for the switch's answer to the
// LEAVE no longer than two intervals: silentBeats intervals, 1 s with the
// default 250 ms.
func silentAfter(iv time.Duration) time.Duration { return silentBeats * iv }

// silence judges whether a group's switch is gone from its answers to
// the member's heartbeats, one every interval (Group.heartbeats), with
// no clock of its own. The switch is gone when it sent nothing (no
// answer, no data, no acknowledgement) for silentAfter, or longer for a
// switch whose answers have come irregularly (detector.Beats, as the
// switch judges its members), up to maxSilentBeats intervals. The
// silence counts from the later of the switch's latest datagram and the
// first heartbeat of the member's current run of heartbeats on time: a
// member that was paused itself (GC, a starved or stopped process) or
// could not send has given the switch no chance to answer, and waits the
// whole allowance again from its first heartbeat after the pause.
type silence struct {
	iv       time.Duration
	rhythm   detector.Beats // the switch's answers
	alive    time.Time      // the switch's latest answer, or other datagram
	onTime   time.Time      // the first heartbeat of the current run on time
	lastSent time.Time      // the latest heartbeat sent
}

// newSilence starts judging at now a switch last heard at alive (the
// join's answer), for heartbeats every iv.
func newSilence(iv time.Duration, alive, now time.Time) *silence {
	return &silence{iv: iv, alive: alive, onTime: now, lastSent: now}
}

// answer records an answer from the switch to a heartbeat (an
// acknowledgement or a refusal) at now.
func (s *silence) answer(now time.Time) {
	s.alive = later(s.alive, now)
	s.rhythm.Beat(now)
}

// heard records that a datagram came from the switch at at (zero: none
// yet): data or an acknowledgement are signs of life as well, as the
// switch counts any datagram from a member, and so is an answer that
// came after its heartbeat was given up.
func (s *silence) heard(at time.Time) { s.alive = later(s.alive, at) }

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// sent records a heartbeat handed to the transport at now.
func (s *silence) sent(now time.Time) { s.lastSent = now }

// check is called at every interval, before the heartbeat goes out: it
// reports how long the switch has answered nothing, and whether it is
// gone.
func (s *silence) check(now time.Time) (quiet time.Duration, gone bool) {
	if now.Sub(s.lastSent) > lateBeats*s.iv {
		// This member sent no heartbeat for a while: it was paused, or
		// could not send. The switch's silence counts from now.
		s.onTime = now
	}
	allowed := s.rhythm.Allowed(silentAfter(s.iv), maxSilentBeats*s.iv)
	return now.Sub(s.alive), now.Sub(later(s.alive, s.onTime)) > allowed
}
