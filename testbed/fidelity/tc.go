package fidelity

import (
	"encoding/json"
	"fmt"
)

// Qdisc is one queueing discipline's statistics, as
// `tc -s -j qdisc show` prints them.
type Qdisc struct {
	Kind       string `json:"kind"`
	Dev        string `json:"dev"`
	Root       bool   `json:"root"`
	Bytes      uint64 `json:"bytes"`   // sent
	Packets    uint64 `json:"packets"` // sent
	Drops      uint64 `json:"drops"`
	Overlimits uint64 `json:"overlimits"` // times the rate held a packet back
	Backlog    uint64 `json:"backlog"`    // bytes queued now
	Qlen       uint64 `json:"qlen"`       // packets queued now
}

// ParseQdiscs parses the output of `tc -s -j qdisc show`.
func ParseQdiscs(b []byte) ([]Qdisc, error) {
	var q []Qdisc
	if err := json.Unmarshal(b, &q); err != nil {
		return nil, fmt.Errorf("tc -s -j qdisc show: %w", err)
	}
	return q, nil
}

// rootQdisc returns dev's root qdisc in qs (the tbf of a testbed link).
func rootQdisc(qs []Qdisc, dev string) (Qdisc, bool) {
	for _, q := range qs {
		if q.Dev == dev && q.Root {
			return q, true
		}
	}
	return Qdisc{}, false
}
