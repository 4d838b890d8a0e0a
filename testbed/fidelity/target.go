package fidelity

import (
	"errors"

	"github.com/ndma/ndma/testbed"
)

// Daemon is a long-lived process of the testbed whose CPU a Monitor
// counts.
type Daemon struct {
	Role string // "switch", "memd", "stord", "storgw"
	PID  int
}

// Target is what a Monitor watches: besides the processes the job starts
// as children of the calling process (its ranks, and a peer's launcher,
// daemons and ranks, whose CPU the kernel adds to the caller's children
// once they are waited for), the testbed's daemons and its links.
type Target struct {
	Daemons []Daemon
	// NetDevPID is a process in the switch namespace (the switch
	// daemon): /proc/NetDevPID/net/dev holds the switch ports'
	// counters. Zero: no links are watched.
	NetDevPID int
	Links     []Link
}

// TargetOf returns the Target of a running testbed: its daemons, and
// both directions of every link between the switch namespace and a host,
// memory, storage or gateway node.
func TargetOf(st *testbed.State) (Target, error) {
	var t Target
	for _, d := range st.Daemons {
		t.Daemons = append(t.Daemons, Daemon{Role: d.Role, PID: d.PID})
		if d.Role == "switch" {
			t.NetDevPID = d.PID
		}
	}
	if t.NetDevPID == 0 {
		return Target{}, errors.New("fidelity: the testbed has no switch daemon")
	}
	add := func(nodes []testbed.Node, rate uint64) {
		for _, n := range nodes {
			t.Links = append(t.Links,
				Link{Name: "sw→" + n.Name, Port: n.Port, RateBits: rate, NS: st.Switch.NS, Dev: n.Port},
				Link{Name: n.Name + "→sw", Port: n.Port, Up: true, RateBits: rate, NS: n.NS, Dev: n.Iface})
		}
	}
	hostRate := st.RateBits
	if st.HostRateBits > 0 {
		hostRate = st.HostRateBits
	}
	add(st.Hosts, hostRate)
	add(st.MemNodes, st.RateBits)
	add(st.StorNodes, st.RateBits)
	add(st.Gateways, st.RateBits)
	return t, nil
}
