package ctrl

import "fmt"

// Policy selects how the switch spreads the requests of a service group
// over its members (fabric.Selector); a REGISTER request carries it. The
// zero value is not a valid policy.
type Policy uint8

const (
	// PolicyLeastOutstanding picks the live member with the fewest requests
	// in flight. Ties are broken round robin, first in first out: among
	// equally loaded members the one that reached that load earliest goes
	// first, so equal members take turns (0, 1, 2, 0, ... when every request
	// ends before the next) and load spreads evenly.
	PolicyLeastOutstanding Policy = iota + 1
	// PolicyRoundRobin picks the next live member in turn, skipping dead ones.
	PolicyRoundRobin
	// PolicyKeyAffinity picks the member that owns the request's key in the
	// ownership table (key ranges → home member + replicas), so a request
	// reaches its home node without an extra hop. When the owner is dead it
	// falls back to the first live replica, in the range's failover order.
	PolicyKeyAffinity
)

var policyNames = [...]string{
	PolicyLeastOutstanding: "least-outstanding",
	PolicyRoundRobin:       "round-robin",
	PolicyKeyAffinity:      "key-affinity",
}

// String returns the policy's name as accepted by fabric.ParsePolicy, or
// "Policy(N)" for an unknown value.
func (p Policy) String() string {
	if p.Valid() {
		return policyNames[p]
	}
	return fmt.Sprintf("Policy(%d)", uint8(p))
}

// Valid reports whether p is one of the policies above.
func (p Policy) Valid() bool {
	return p >= PolicyLeastOutstanding && p <= PolicyKeyAffinity
}

// KeyRange maps the keys in [Start, End) to a home member and its replicas.
// Members are ranks 0..n-1 of the service group. Since End is
// exclusive, key math.MaxUint64 is never owned. A REGISTER request carries
// it as a Range.
type KeyRange struct {
	// Start is the first key of the range; End is one past the last.
	// Start < End.
	Start, End uint64
	// Owner is the home member of the range.
	Owner int
	// Replicas are the members that take the range's keys while the owner
	// is dead, in failover order: the first live one is used. They must be
	// distinct and differ from Owner. May be empty.
	Replicas []int
}
