package endpoint

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/ndma/ndma/transport"
)

// ErrSwitchSilent is matched (errors.Is) by a *SwitchError: a group's
// forwarding node stopped answering.
var ErrSwitchSilent = errors.New("endpoint: the switch stopped answering")

// SwitchError fails the operations of a group whose forwarding node
// answered none of this member's heartbeats for Silent (the transport's
// dead-peer timeout): it died, stalled or became unreachable. Every
// multicast, multicast receive and aggregation of the group in flight
// then fails with it, and so does each one posted while the switch stays
// silent, at the next heartbeat interval. A switch that answers again
// (it was stalled) serves the group's later operations as before; one
// that restarted without its state answers that the member is unknown,
// and the group is over (a *MemberError naming the member).
type SwitchError struct {
	Group  uint32
	Switch netip.AddrPort
	Silent time.Duration
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

// silentAfter is how long a group's switch may answer no heartbeat
// before the group's operations fail: the transport's dead-peer timeout,
// after which the switch's own streams to this member would be given up.
func (g *Group) silentAfter() time.Duration {
	g.ep.mu.Lock()
	defer g.ep.mu.Unlock()
	return g.ep.core.deadTimeout()
}
