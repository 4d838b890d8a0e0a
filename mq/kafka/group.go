package kafka

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// The coordinator keeps consumer groups' membership in this process,
// after Kafka's group protocol: a join round gathers every member
// (waiting up to the longest rebalance timeout for the ones known),
// names a generation, a leader and a protocol; the leader's SyncGroup
// hands each member its assignment. A member that sends no heartbeat
// within its session timeout is dropped and the others rebalance.

type groupState int

const (
	groupEmpty      groupState = iota
	groupPreparing             // a join round is open
	groupCompleting            // waiting for the leader's assignments
	groupStable
)

// Bounds of a member's timeouts, as a Kafka broker's defaults.
const (
	minSession = 1 * time.Second
	maxSession = 30 * time.Minute
)

type member struct {
	id              string
	instanceID      *string
	protocols       []kmsg.JoinGroupRequestProtocol
	session, rebal  time.Duration
	lastSeen        time.Time
	joined, waiting bool
	assignment      []byte
}

type group struct {
	name       string
	state      groupState
	generation int32
	protoType  string
	protocol   string
	leader     string
	members    map[string]*member // at most the coordinator's maxMembers
	joinDone   chan struct{}      // closed when the open join round ends
	syncDone   chan struct{}      // closed when the assignments are in
	deadline   time.Time          // the open join round's end
}

type coordinator struct {
	maxGroups, maxMembers int
	mu                    sync.Mutex
	groups                map[string]*group // under mu; at most maxGroups
	nextID                uint64            // under mu
}

func newCoordinator(maxGroups, maxMembers int) *coordinator {
	return &coordinator{maxGroups: maxGroups, maxMembers: maxMembers, groups: make(map[string]*group)}
}

// reap drops members whose session expired and ends join rounds past
// their deadline, until ctx ends.
func (co *coordinator) reap(ctx context.Context) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			co.mu.Lock()
			for _, g := range co.groups {
				g.abort()
			}
			co.mu.Unlock()
			return
		case now := <-tick.C:
			co.mu.Lock()
			for name, g := range co.groups {
				for id, m := range g.members {
					if !m.waiting && now.Sub(m.lastSeen) > m.session {
						delete(g.members, id)
						g.rebalance(now)
					}
				}
				if g.state == groupPreparing && now.After(g.deadline) {
					g.completeJoin()
				}
				if len(g.members) == 0 && g.state == groupEmpty {
					delete(co.groups, name)
				}
			}
			co.mu.Unlock()
		}
	}
}

// abort ends the open rounds: their waiters answer REBALANCE_IN_PROGRESS.
func (g *group) abort() {
	if g.joinDone != nil {
		close(g.joinDone)
		g.joinDone = nil
	}
	if g.syncDone != nil {
		close(g.syncDone)
		g.syncDone = nil
	}
}

// rebalance opens a join round (if none is open): every member must
// join again.
func (g *group) rebalance(now time.Time) {
	if g.syncDone != nil {
		close(g.syncDone)
		g.syncDone = nil
	}
	if len(g.members) == 0 {
		if g.joinDone != nil {
			close(g.joinDone)
			g.joinDone = nil
		}
		g.state, g.leader = groupEmpty, ""
		return
	}
	if g.state == groupPreparing {
		return
	}
	g.state = groupPreparing
	g.joinDone = make(chan struct{})
	var longest time.Duration
	for _, m := range g.members {
		m.joined = false
		longest = max(longest, m.rebal)
	}
	g.deadline = now.Add(longest)
}

// completeJoin ends the join round: members that did not join are
// dropped; the rest get a new generation.
func (g *group) completeJoin() {
	for id, m := range g.members {
		if !m.joined {
			delete(g.members, id)
		}
	}
	g.generation++
	if len(g.members) == 0 {
		g.state, g.leader = groupEmpty, ""
		g.abort()
		return
	}
	if _, ok := g.members[g.leader]; !ok {
		ids := make([]string, 0, len(g.members))
		for id := range g.members {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		g.leader = ids[0]
	}
	g.protocol = g.members[g.leader].protocols[0].Name
	for _, p := range g.members[g.leader].protocols {
		if g.allSupport(p.Name) {
			g.protocol = p.Name
			break
		}
	}
	for _, m := range g.members {
		m.assignment = nil
	}
	g.state = groupCompleting
	g.syncDone = make(chan struct{})
	close(g.joinDone)
	g.joinDone = nil
}

func (g *group) allSupport(name string) bool {
	for _, m := range g.members {
		if !slices.ContainsFunc(m.protocols, func(p kmsg.JoinGroupRequestProtocol) bool { return p.Name == name }) {
			return false
		}
	}
	return true
}

func (g *group) allJoined() bool {
	for _, m := range g.members {
		if !m.joined {
			return false
		}
	}
	return true
}

// lookup finds a member of a group for SyncGroup, Heartbeat and
// OffsetCommit: an error code when the group or member is unknown or
// the generation is not the group's.
func (co *coordinator) lookup(name, memberID string, gen int32) (*group, *member, int16) {
	g := co.groups[name]
	if g == nil {
		return nil, nil, errUnknownMember
	}
	m := g.members[memberID]
	switch {
	case m == nil:
		return g, nil, errUnknownMember
	case gen != g.generation:
		return g, m, errIllegalGeneration
	}
	m.lastSeen = time.Now()
	return g, m, 0
}

// newMemberID names a member that joins without one.
func (co *coordinator) newMemberID(clientID string) string {
	co.nextID++
	return fmt.Sprintf("%s-%d-%d", clientID, time.Now().UnixNano(), co.nextID)
}
