package fabric

import (
	"time"

	"github.com/ndma/ndma/wire/ctrl"
)

// deadList is a group's dead members, each at most once: a set bounded by
// the group's size. A job group keeps its dead until it ends (a chunk
// whose dead member's contribution is missing can never complete); a
// service group drops a rank when it registers again, and ages entries out
// after ControlLimits.DeadMemberTTL.
type deadList struct {
	ids []uint16
	at  []time.Time // when ids[i] died
}

// add records member id dead at now, once.
func (l *deadList) add(id uint16, now time.Time) {
	for _, x := range l.ids {
		if x == id {
			return
		}
	}
	l.ids = append(l.ids, id)
	l.at = append(l.at, now)
}

// remove forgets member id (it is alive again).
func (l *deadList) remove(id uint16) {
	for i, x := range l.ids {
		if x == id {
			l.ids = append(l.ids[:i], l.ids[i+1:]...)
			l.at = append(l.at[:i], l.at[i+1:]...)
			return
		}
	}
}

// prune drops the entries that died more than ttl before now.
func (l *deadList) prune(now time.Time, ttl time.Duration) {
	k := 0
	for i, id := range l.ids {
		if now.Sub(l.at[i]) <= ttl {
			l.ids[k], l.at[k] = id, l.at[i]
			k++
		}
	}
	l.ids, l.at = l.ids[:k], l.at[:k]
}

func (g *group) undead(id uint16) { g.dead.remove(id) }

func (g *group) pruneDead(now time.Time, ttl time.Duration) { g.dead.prune(now, ttl) }

// deadIDs is the dead list a heartbeat reply carries: never more than a
// control message holds (the group's size is within that limit; the most
// recent deaths are kept should it not be).
func (g *group) deadIDs() []uint16 {
	ids := g.dead.ids
	if len(ids) > ctrl.MaxMembers {
		ids = ids[len(ids)-ctrl.MaxMembers:]
	}
	return ids
}
