package endpoint

import (
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// ErrSwitchSilent is matched (errors.Is) by a *SwitchError: a group's
// forwarding node stopped answering.
var ErrSwitchSilent = errors.New("endpoint: the switch stopped answering")

// SwitchError fails every operation of a group whose forwarding node
// answered none of this member's heartbeats for Silent (the transport's
// dead-peer timeout): it died, restarted without its state or became
// unreachable. The group is over for this member, as after a
// *MemberError naming it; operations posted to the group later fail with
// the same error at once.
type SwitchError struct {
	Group  uint32
	Switch netip.AddrPort
	Silent time.Duration
}

func (e *SwitchError) Error() string {
	return fmt.Sprintf("endpoint: group %d: the switch %v answered no heartbeat for %v: it died or is unreachable", e.Group, e.Switch, e.Silent)
}

// Unwrap makes errors.Is(err, ErrSwitchSilent) true.
func (e *SwitchError) Unwrap() error { return ErrSwitchSilent }

// switchGone fails every group operation of se.Group (multicasts, their
// receives and aggregations, all of which need the switch) and makes
// later ones fail at once. Two-sided messages between members do not go
// through the switch and are left alone. The entry lives until
// LeaveGroup (one per joined group at most).
func (c *Core) switchGone(se *SwitchError) {
	if c.goneSw == nil {
		c.goneSw = make(map[uint32]*SwitchError)
	}
	if c.goneSw[se.Group] != nil {
		return
	}
	c.goneSw[se.Group] = se
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

// SwitchGone reports the *SwitchError of group g once its switch was
// found silent, else nil.
func (c *Core) SwitchGone(g uint32) *SwitchError { return c.goneSw[g] }

// switchSilent fails the group's operations with a *SwitchError: its
// switch answered no heartbeat for silent.
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
