package fabric

// Anycast member selection.
//
// A client sends an anycast request to a service group; the forwarding node
// picks one member of the group per request and forwards it there. Selector
// is the sans-I/O core of that choice: it holds the liveness and the
// in-flight (outstanding) count of every member and, for key affinity, the
// ownership table. It starts no goroutines, reads no clock and does no I/O.
//
// The switch around it calls Pick once per new request (and pins
// retransmissions of that request to the member it got, without calling Pick
// again), Done when the member's reply or a failure ends the request, and
// SetAlive when heartbeats say a member died or came back.

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/ndma/ndma/wire/ctrl"
)

// ParsePolicy returns the policy named s: "least-outstanding",
// "round-robin" or "key-affinity". Any other name gives an error wrapping
// ErrSelectorConfig.
func ParsePolicy(s string) (ctrl.Policy, error) {
	for p := ctrl.PolicyLeastOutstanding; p.Valid(); p++ {
		if p.String() == s {
			return p, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown anycast policy %q (want least-outstanding, round-robin or key-affinity)", ErrSelectorConfig, s)
}

// Errors returned by Selector. Callers test them with errors.Is; the
// returned errors wrap them with details (the key, the offending range).
var (
	// ErrNoMember: no member of the group is alive.
	ErrNoMember = errors.New("fabric: anycast: no live member")
	// ErrNoOwner: key affinity found no member for the key — the key lies
	// in no range, or the owner and all its replicas are dead.
	ErrNoOwner = errors.New("fabric: anycast: no live owner for key")
	// ErrRanges: an ownership table is invalid, or one was given to a
	// policy other than ctrl.PolicyKeyAffinity.
	ErrRanges = errors.New("fabric: anycast: invalid key ranges")
	// ErrSelectorConfig: an unknown policy, or a member count out of
	// [1, MaxSelectorMembers].
	ErrSelectorConfig = errors.New("fabric: anycast: invalid selector config")
)

// MaxSelectorMembers is the largest service group a Selector accepts.
const MaxSelectorMembers = 4096

// SelectorStats are the counters of a Selector since it was made.
type SelectorStats struct {
	// Picks counts successful Pick calls.
	Picks uint64
	// Failovers counts key-affinity picks that went to a replica because
	// the range's owner was dead. They are included in Picks.
	Failovers uint64
	// PerMember[i] counts the picks that chose member i; len is the group
	// size.
	PerMember []uint64
}

// Selector picks one member of an anycast service group per request.
//
// A Selector is not safe for concurrent use: one goroutine (the switch's
// group owner) calls all its methods. Member indices out of [0, n) given to
// Done, SetAlive, Alive and Outstanding are ignored (they report a dead
// member with nothing outstanding); they never panic.
//
// Cost: Pick and Done allocate nothing on success (least outstanding grows
// a small per-load table when a member reaches a new highest load, once).
// Pick is O(log R) for key affinity over R ranges; O(1) for least
// outstanding, and O(1) for round robin unless it must skip a run of dead
// members (O(n) worst case). Done is O(1); SetAlive is O(1) except that a
// least-outstanding member dying may scan the per-load table.
type Selector struct {
	policy ctrl.Policy
	alive  []bool
	out    []int    // requests in flight per member; 0 for dead members
	per    []uint64 // picks per member
	live   int      // number of live members

	// next is where the next round-robin search starts: one past the
	// member picked last.
	next int

	// Least outstanding only: live members are bucketed by load. level[c]
	// is the first live member with c outstanding, or -1; each bucket is a
	// circular doubly linked list through lnext/lprev, in the order the
	// members entered it (Pick takes the head, arrivals go to the tail).
	// minOut is the lowest non-empty bucket (0 when no member is alive).
	level        []int32
	lnext, lprev []int32
	minOut       int

	ranges []ctrl.KeyRange // key affinity: sorted by Start, non-overlapping, owned copies

	picks, failovers uint64
}

// NewSelector returns a selector using policy p over members 0..n-1, all
// alive with nothing outstanding. n must be in [1, MaxSelectorMembers].
//
// For ctrl.PolicyKeyAffinity, ranges is the ownership table: at least one
// range, each non-empty (Start < End), no two overlapping, every Owner and
// replica a member index, replicas distinct and different from the owner.
// Gaps are allowed: a key in no range gets ErrNoOwner. The selector keeps
// its own copy of ranges. For other policies ranges must be empty.
func NewSelector(p ctrl.Policy, n int, ranges []ctrl.KeyRange) (*Selector, error) {
	if !p.Valid() {
		return nil, fmt.Errorf("%w: unknown policy %v", ErrSelectorConfig, p)
	}
	if n < 1 || n > MaxSelectorMembers {
		return nil, fmt.Errorf("%w: %d members, want 1 to %d", ErrSelectorConfig, n, MaxSelectorMembers)
	}
	s := &Selector{
		policy: p,
		alive:  make([]bool, n),
		out:    make([]int, n),
		per:    make([]uint64, n),
		live:   n,
	}
	for i := range s.alive {
		s.alive[i] = true
	}
	if p == ctrl.PolicyLeastOutstanding {
		s.level = make([]int32, 1, 16)
		s.level[0] = -1
		s.lnext = make([]int32, n)
		s.lprev = make([]int32, n)
		for i := range n {
			s.link(i, 0)
		}
	}
	if err := s.SetRanges(ranges); err != nil {
		return nil, err
	}
	return s, nil
}

// SetRanges replaces the ownership table, validated as in NewSelector. On
// error the old table stays. Outstanding counts are unchanged: requests in
// flight stay with the member they were picked for. For a policy other than
// ctrl.PolicyKeyAffinity, only an empty table is accepted (and changes
// nothing).
func (s *Selector) SetRanges(ranges []ctrl.KeyRange) error {
	if s.policy != ctrl.PolicyKeyAffinity {
		if len(ranges) != 0 {
			return fmt.Errorf("%w: %d key ranges given for policy %v, which takes none", ErrRanges, len(ranges), s.policy)
		}
		return nil
	}
	sorted, err := checkRanges(len(s.alive), ranges)
	if err != nil {
		return err
	}
	s.ranges = sorted
	return nil
}

// checkRanges validates an ownership table for n members and returns a copy
// sorted by Start, with its own replica slices.
func checkRanges(n int, ranges []ctrl.KeyRange) ([]ctrl.KeyRange, error) {
	if len(ranges) == 0 {
		return nil, fmt.Errorf("%w: key affinity needs at least one range", ErrRanges)
	}
	nrep := 0
	for i, r := range ranges {
		if r.Start >= r.End {
			return nil, fmt.Errorf("%w: range %d [%#x, %#x) is empty", ErrRanges, i, r.Start, r.End)
		}
		if r.Owner < 0 || r.Owner >= n {
			return nil, fmt.Errorf("%w: range %d [%#x, %#x): owner %d is not a member (0..%d)", ErrRanges, i, r.Start, r.End, r.Owner, n-1)
		}
		for j, m := range r.Replicas {
			if m < 0 || m >= n {
				return nil, fmt.Errorf("%w: range %d [%#x, %#x): replica %d is not a member (0..%d)", ErrRanges, i, r.Start, r.End, m, n-1)
			}
			if m == r.Owner || slices.Contains(r.Replicas[:j], m) {
				return nil, fmt.Errorf("%w: range %d [%#x, %#x): member %d listed twice as owner or replica", ErrRanges, i, r.Start, r.End, m)
			}
		}
		nrep += len(r.Replicas)
	}
	sorted := make([]ctrl.KeyRange, len(ranges))
	reps := make([]int, 0, nrep) // one backing array for all replica lists
	for i, r := range ranges {
		k := len(reps)
		reps = append(reps, r.Replicas...)
		r.Replicas = reps[k:len(reps):len(reps)]
		sorted[i] = r
	}
	slices.SortFunc(sorted, func(a, b ctrl.KeyRange) int { return cmp.Compare(a.Start, b.Start) })
	for i := 1; i < len(sorted); i++ {
		a, b := sorted[i-1], sorted[i]
		if a.End > b.Start {
			return nil, fmt.Errorf("%w: ranges [%#x, %#x) and [%#x, %#x) overlap", ErrRanges, a.Start, a.End, b.Start, b.End)
		}
	}
	return sorted, nil
}

// Policy returns the selector's policy.
func (s *Selector) Policy() ctrl.Policy { return s.policy }

// Len returns the number of members in the group.
func (s *Selector) Len() int { return len(s.alive) }

// Pick chooses the member for a new request and counts the request
// outstanding on it until Done. key is used only by ctrl.PolicyKeyAffinity.
//
// Errors: ErrNoMember when no member is alive (checked first, for every
// policy); for key affinity, ErrNoOwner, wrapped with the key, when the key
// lies in no range or the owner and all its replicas are dead. On error
// nothing is counted and member is -1.
func (s *Selector) Pick(key uint64) (member int, err error) {
	if s.live == 0 {
		return -1, ErrNoMember
	}
	switch s.policy {
	case ctrl.PolicyLeastOutstanding:
		member = s.pickLeast()
	case ctrl.PolicyRoundRobin:
		member = s.pickNext()
	default: // ctrl.PolicyKeyAffinity; NewSelector admits no other.
		if member, err = s.pickOwner(key); err != nil {
			return -1, err
		}
	}
	s.picks++
	s.per[member]++
	s.out[member]++
	return member, nil
}

// pickLeast takes the head of the least-loaded bucket and moves it one
// bucket up; Pick then counts the request. There is a head: live > 0.
func (s *Selector) pickLeast() int {
	c := s.minOut
	m := int(s.level[c])
	s.unlink(m, c)
	s.link(m, c+1)
	if s.level[c] < 0 {
		s.minOut = c + 1 // m is there
	}
	return m
}

// link appends live member m to the tail of the bucket for load c, growing
// the bucket table when c is a new highest load.
func (s *Selector) link(m, c int) {
	for c >= len(s.level) {
		s.level = append(s.level, -1)
	}
	h := s.level[c]
	if h < 0 {
		s.level[c] = int32(m)
		s.lnext[m], s.lprev[m] = int32(m), int32(m)
		return
	}
	t := s.lprev[h]
	s.lnext[t], s.lprev[m] = int32(m), t
	s.lnext[m], s.lprev[h] = h, int32(m)
}

// unlink removes member m from the bucket for load c.
func (s *Selector) unlink(m, c int) {
	nx := s.lnext[m]
	if int(nx) == m {
		s.level[c] = -1
		return
	}
	pv := s.lprev[m]
	s.lnext[pv], s.lprev[nx] = nx, pv
	if int(s.level[c]) == m {
		s.level[c] = nx
	}
}

// pickNext returns the first live member at or after s.next, cyclically.
// There is one: live > 0.
func (s *Selector) pickNext() int {
	n := len(s.alive)
	i := s.next
	for range n {
		if s.alive[i] {
			s.next = i + 1
			if s.next == n {
				s.next = 0
			}
			return i
		}
		i++
		if i == n {
			i = 0
		}
	}
	panic("fabric: anycast selector: live count is inconsistent")
}

// pickOwner returns the owner of key, or its first live replica.
func (s *Selector) pickOwner(key uint64) (int, error) {
	i := s.find(key)
	if i < 0 {
		return -1, fmt.Errorf("%w: key %#x lies in no range", ErrNoOwner, key)
	}
	r := &s.ranges[i]
	if s.alive[r.Owner] {
		return r.Owner, nil
	}
	for _, m := range r.Replicas {
		if s.alive[m] {
			s.failovers++
			return m, nil
		}
	}
	return -1, fmt.Errorf("%w: key %#x: owner %d and its %d replicas are dead", ErrNoOwner, key, r.Owner, len(r.Replicas))
}

// find returns the index of the range holding key, or -1. O(log R).
func (s *Selector) find(key uint64) int {
	// lo becomes the number of ranges with Start <= key.
	lo, hi := 0, len(s.ranges)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if s.ranges[mid].Start <= key {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == 0 || key >= s.ranges[lo-1].End {
		return -1
	}
	return lo - 1
}

// Done ends one outstanding request on member: its reply was seen, or the
// request failed. A call for a dead member, for a member with nothing
// outstanding, or for an index out of range does nothing, so the count never
// goes negative.
//
// The caller must call Done only for requests picked since the member last
// came alive: SetAlive(member, false) forgets the member's outstanding
// requests, and a late Done for one of them after the member is back would
// end a newer request's count.
func (s *Selector) Done(member int) {
	if !s.Alive(member) || s.out[member] == 0 {
		return
	}
	c := s.out[member]
	s.out[member] = c - 1
	if s.policy == ctrl.PolicyLeastOutstanding {
		s.unlink(member, c)
		s.link(member, c-1)
		s.minOut = min(s.minOut, c-1)
	}
}

// SetAlive marks member alive or dead. A dead member is never picked and
// its outstanding count is reset to zero (the switch fails its requests
// separately); a member that comes back starts with nothing outstanding.
// Setting the state a member already has does nothing, as does an index
// out of range.
func (s *Selector) SetAlive(member int, alive bool) {
	if member < 0 || member >= len(s.alive) || s.alive[member] == alive {
		return
	}
	s.alive[member] = alive
	c := s.out[member]
	s.out[member] = 0
	lo := s.policy == ctrl.PolicyLeastOutstanding
	if alive {
		s.live++
		if lo {
			s.link(member, 0)
			s.minOut = 0
		}
		return
	}
	s.live--
	if lo {
		s.unlink(member, c)
		if c == s.minOut && s.level[c] < 0 {
			// Find the next non-empty bucket; none when no member is alive.
			for s.minOut < len(s.level) && s.level[s.minOut] < 0 {
				s.minOut++
			}
			if s.minOut == len(s.level) {
				s.minOut = 0
			}
		}
	}
}

// Alive reports whether member is alive; false for an index out of range.
func (s *Selector) Alive(member int) bool {
	return member >= 0 && member < len(s.alive) && s.alive[member]
}

// Outstanding returns the number of requests in flight on member (picked,
// not yet Done); 0 for a dead member or an index out of range.
func (s *Selector) Outstanding(member int) int {
	if member < 0 || member >= len(s.out) {
		return 0
	}
	return s.out[member]
}

// Owner returns the home member of key in the ownership table, whether or
// not it is alive, or -1 when the key lies in no range or the policy is not
// ctrl.PolicyKeyAffinity. It has no side effects.
func (s *Selector) Owner(key uint64) int {
	i := s.find(key)
	if i < 0 {
		return -1
	}
	return s.ranges[i].Owner
}

// Stats returns the selector's counters. PerMember is a fresh copy.
func (s *Selector) Stats() SelectorStats {
	return SelectorStats{
		Picks:     s.picks,
		Failovers: s.failovers,
		PerMember: slices.Clone(s.per),
	}
}
