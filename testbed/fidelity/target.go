package fidelity

import (
	"errors"
	"fmt"
	"slices"

	"github.com/ndma/ndma/testbed"
)

// Daemon is a long-lived process of the testbed whose CPU a Monitor
// counts.
type Daemon struct {
	Role string // "switch", "memd", "stord", "storgw"
	PID  int
	// Start is the process's start time in clock ticks after boot (0:
	// unknown), so that a reused pid is not taken for it.
	Start uint64
	// NS and Args tell the daemon's process when it is not PID (the
	// daemon was killed and started again by hand): the process in
	// network namespace NS (empty: any) whose command line is Args
	// (empty: none is looked for).
	NS   string
	Args []string
}

// Target is what a Monitor watches: besides the processes the job starts
// as children of the calling process (its ranks, and a peer's launcher,
// daemons and ranks, whose CPU the kernel adds to the caller's children
// once they are waited for), the testbed's daemons and its links.
type Target struct {
	Daemons []Daemon
	// NetDevNS are the namespaces holding the bridge side of a watched
	// link (the switch namespace, and each leaf's in a tree): their
	// net/dev hold the ports' counters, read together. Empty: no links
	// are watched.
	NetDevNS []string
	Links    []Link
}

// TargetOf returns the Target of a running testbed: its daemons, and
// both directions of every link between a bridge (the switch
// namespace's, or a leaf's) and a host, memory, storage or gateway node,
// and of every leaf's uplink to the spine.
func TargetOf(st *testbed.State) (Target, error) {
	var t Target
	switchNS := make(map[string]bool)
	for _, d := range st.Daemons {
		t.Daemons = append(t.Daemons, Daemon{Role: d.Role, PID: d.PID, Start: d.Start, NS: d.NS, Args: slices.Clone(d.Args)})
		if d.Role == "switch" {
			switchNS[d.NS] = true
		}
	}
	bridgeSide := func(ns string) error {
		if slices.Contains(t.NetDevNS, ns) {
			return nil
		}
		if !switchNS[ns] {
			return fmt.Errorf("fidelity: no switch daemon in namespace %s", ns)
		}
		t.NetDevNS = append(t.NetDevNS, ns)
		return nil
	}
	if err := bridgeSide(st.Switch.NS); err != nil {
		return Target{}, errors.New("fidelity: the testbed has no switch daemon")
	}
	add := func(nodes []testbed.Node, rate uint64) error {
		for _, n := range nodes {
			ns := st.Switch.NS
			if n.PortNS != "" {
				ns = n.PortNS
			}
			if err := bridgeSide(ns); err != nil {
				return err
			}
			t.Links = append(t.Links,
				Link{Name: "sw→" + n.Name, Port: n.Port, RateBits: rate, NS: ns, Dev: n.Port},
				Link{Name: n.Name + "→sw", Port: n.Port, Up: true, RateBits: rate, NS: n.NS, Dev: n.Iface})
		}
		return nil
	}
	hostRate := st.RateBits
	if st.HostRateBits > 0 {
		hostRate = st.HostRateBits
	}
	for _, l := range st.Leaves {
		t.Links = append(t.Links,
			Link{Name: "sw→" + l.Name, Port: l.Port, RateBits: st.UplinkRateBits, NS: st.Switch.NS, Dev: l.Port},
			Link{Name: l.Name + "→sw", Port: l.Port, Up: true, RateBits: st.UplinkRateBits, NS: l.NS, Dev: l.Iface})
	}
	err := errors.Join(add(st.Hosts, hostRate), add(st.MemNodes, st.RateBits), add(st.StorNodes, st.RateBits), add(st.Gateways, st.RateBits))
	if err != nil {
		return Target{}, err
	}
	return t, nil
}
