package fabric

import (
	"net/netip"
	"time"
)

// EventKind says what an Event reports.
type EventKind uint8

// Event kinds: what happened to the switch's jobs and pool that an
// operator wants to read in its log.
const (
	// EventJobJoined: the rendezvous of job Job completed; Group is the
	// new group's id, Size its number of ranks.
	EventJobJoined EventKind = iota + 1
	// EventMemberDead: rank Member (at Addr) of group Group (job Job)
	// stopped heartbeating, or left on its own (Left).
	EventMemberDead
	// EventPoolNodeJoined: memory node Node at Addr lent Capacity bytes
	// to the pool for the first time.
	EventPoolNodeJoined
	// EventPoolNodeDied: memory node Node at Addr stopped heartbeating,
	// or stopped lending on its own (Left).
	EventPoolNodeDied
	// EventPoolNodeBack: memory node Node at Addr, dead, heartbeats
	// again with its memory intact (same incarnation).
	EventPoolNodeBack
	// EventPoolNodeRestarted: memory node Node at Addr registered as a
	// new incarnation: the copies it held are lost and rebuilt where a
	// region has another copy.
	EventPoolNodeRestarted
	// EventCopyRebuilt: copy Copy of pool region Region, on memory node
	// Node at Addr, was rebuilt from another copy and serves again.
	EventCopyRebuilt
	// EventPoolNodeReported: memory node Node at Addr reported the grants
	// it holds to this switch (after a switch restart, every node does).
	EventPoolNodeReported
	// EventCopyLost: copy Copy of pool region Region, on memory node Node
	// at Addr, is lost: the node did not report it, reported it
	// incomplete, or reported one that contradicts the switch's map.
	EventCopyLost
	// EventRegionLost: every copy of some bytes of pool region Region is
	// lost.
	EventRegionLost
	// EventPoolRecovered: the switch rebuilt its pool map from the
	// memory nodes' reports: Count regions, Node nodes registered.
	EventPoolRecovered
	// EventAuthRefused: a control request from Addr did not carry this
	// switch's fabric token; Count more were refused so since the last
	// such event (at most one a second).
	EventAuthRefused
	// EventRegionsLoaded: the switch took Count regions from its store
	// (Config.Store) at its start.
	EventRegionsLoaded
	// EventRecordRefused: the store's record of region Region could not
	// be taken into the map (Err says why); the region's nodes' reports
	// rebuild it if they hold it.
	EventRecordRefused
)

var eventKindNames = [...]string{
	EventJobJoined:         "job joined",
	EventMemberDead:        "member dead",
	EventPoolNodeJoined:    "memory node joined",
	EventPoolNodeDied:      "memory node dead",
	EventPoolNodeBack:      "memory node back",
	EventPoolNodeRestarted: "memory node restarted",
	EventCopyRebuilt:       "copy rebuilt",
	EventPoolNodeReported:  "memory node reported",
	EventCopyLost:          "copy lost",
	EventRegionLost:        "region lost",
	EventPoolRecovered:     "pool map recovered",
	EventAuthRefused:       "control request refused: wrong fabric token",
	EventRegionsLoaded:     "pool regions loaded from the store",
	EventRecordRefused:     "pool region record refused",
}

func (k EventKind) String() string {
	if int(k) < len(eventKindNames) && eventKindNames[k] != "" {
		return eventKindNames[k]
	}
	return "event"
}

// Event is a change to the switch's jobs or pool, queued for the switch's
// driver to log (the Switch does no I/O). Only the fields its Kind names
// are set.
type Event struct {
	Kind     EventKind
	Job      string         // job name
	Group    uint32         // group id
	Size     int            // ranks in the job
	Member   uint16         // rank
	Left     bool           // the member, or memory node, left on its own
	Forgot   bool           // a memory node that left held no copies: the switch forgot it
	Silent   time.Duration  // how long the switch had heard nothing from a member counted dead
	Addr     netip.AddrPort // member's or memory node's address
	Node     int            // memory node id
	Capacity uint64         // bytes the memory node lends
	Region   uint32         // pool region id
	Copy     int            // copy (column) of the region
	Count    int            // regions
	Err      error          // why (EventRecordRefused)
}

// MaxEvents bounds the events the Switch queues between two calls of
// Events; beyond it, new events are dropped and counted in
// Stats.EventsDropped.
const MaxEvents = 256

// logEvent queues e for Events.
func (s *Switch) logEvent(e Event) {
	if len(s.events) >= MaxEvents {
		s.stats.EventsDropped++
		return
	}
	s.events = append(s.events, e)
}

// Events appends the events queued since the last call to dst, oldest
// first, empties the queue and returns dst. A driver calls it after Receive
// and Poll and logs them; at most MaxEvents are kept in between.
func (s *Switch) Events(dst []Event) []Event {
	dst = append(dst, s.events...)
	clear(s.events)
	s.events = s.events[:0]
	return dst
}
