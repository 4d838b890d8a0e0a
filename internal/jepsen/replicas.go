package jepsen

import (
	"fmt"
	"slices"
	"strings"
)

// Snapshot is what one replica holds at the end of a run: the bytes of
// every key it keeps.
type Snapshot struct {
	Replica string
	Keys    map[string][]byte
}

// Divergence is a key whose replicas do not all hold the same bytes.
type Divergence struct {
	Key string
	// Digests is each replica's Digest of the key's bytes, by replica.
	Digests map[string]uint64
	// Missing lists the replicas that do not hold the key while others
	// do.
	Missing []string
}

func (d Divergence) String() string {
	names := make([]string, 0, len(d.Digests))
	for r := range d.Digests {
		names = append(names, r)
	}
	slices.Sort(names)
	var b strings.Builder
	fmt.Fprintf(&b, "%s:", d.Key)
	for _, r := range names {
		fmt.Fprintf(&b, " %s %#x", r, d.Digests[r])
	}
	if len(d.Missing) > 0 {
		fmt.Fprintf(&b, ", missing on %v", d.Missing)
	}
	return b.String()
}

// CompareReplicas checks that no two replicas differ: every key any
// snapshot holds must be held by every snapshot, with the same bytes. It
// returns the keys that are not, in order. Pass the snapshots of the
// replicas of one set of keys (with partial replication, one call per
// replica set).
func CompareReplicas(snaps []Snapshot) []Divergence {
	keys := map[string]bool{}
	for _, s := range snaps {
		for k := range s.Keys {
			keys[k] = true
		}
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	slices.Sort(sorted)
	var out []Divergence
	for _, k := range sorted {
		d := Divergence{Key: k, Digests: map[string]uint64{}}
		same := true
		var first []byte
		have := false
		for _, s := range snaps {
			b, ok := s.Keys[k]
			if !ok {
				d.Missing = append(d.Missing, s.Replica)
				same = false
				continue
			}
			d.Digests[s.Replica] = Digest(b)
			if !have {
				first, have = b, true
			} else if string(b) != string(first) {
				same = false
			}
		}
		if !same {
			out = append(out, d)
		}
	}
	return out
}
