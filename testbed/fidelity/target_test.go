package fidelity

import (
	"slices"
	"testing"

	"github.com/ndma/ndma/testbed"
)

func TestTargetOf(t *testing.T) {
	st := &testbed.State{
		RateBits: 100e6, HostRateBits: 50e6,
		Switch:   testbed.Node{Name: "sw", NS: "p-sw"},
		Hosts:    []testbed.Node{{Name: "h0", NS: "p-h0", Iface: "eth0", Port: "h0"}},
		MemNodes: []testbed.Node{{Name: "m0", NS: "p-m0", Iface: "eth0", Port: "m0"}},
		Daemons:  []testbed.Daemon{{Role: "switch", NS: "p-sw", PID: 10}, {Role: "memd", NS: "p-m0", PID: 11}},
	}
	tg, err := TargetOf(st)
	if err != nil {
		t.Fatal(err)
	}
	want := []Link{
		{Name: "sw→h0", Port: "h0", RateBits: 50e6, NS: "p-sw", Dev: "h0"},
		{Name: "h0→sw", Port: "h0", Up: true, RateBits: 50e6, NS: "p-h0", Dev: "eth0"},
		{Name: "sw→m0", Port: "m0", RateBits: 100e6, NS: "p-sw", Dev: "m0"},
		{Name: "m0→sw", Port: "m0", Up: true, RateBits: 100e6, NS: "p-m0", Dev: "eth0"},
	}
	if !slices.Equal(tg.Links, want) || !slices.Equal(tg.NetDevPIDs, []int{10}) || len(tg.Daemons) != 2 || tg.Daemons[1] != (Daemon{"memd", 11}) {
		t.Errorf("TargetOf = %+v, want links %+v, net/dev of pid 10, both daemons", tg, want)
	}
	st.Daemons = st.Daemons[1:]
	if _, err := TargetOf(st); err == nil {
		t.Error("no switch daemon: no error")
	}
}

// TestTargetOfLeaves: in a tree, a host's link is watched at its leaf's
// bridge, the uplinks at the spine's, and the ports' counters come from
// the spine's and every leaf's switch daemon.
func TestTargetOfLeaves(t *testing.T) {
	st := &testbed.State{
		RateBits: 100e6, UplinkRateBits: 200e6,
		Switch: testbed.Node{Name: "sw", NS: "p-sw"},
		Leaves: []testbed.Node{{Name: "l0", NS: "p-l0", Iface: "uplink", Port: "l0"}, {Name: "l1", NS: "p-l1", Iface: "uplink", Port: "l1"}},
		Hosts: []testbed.Node{{Name: "h0", NS: "p-h0", Iface: "eth0", Port: "h0", PortNS: "p-l0"},
			{Name: "h1", NS: "p-h1", Iface: "eth0", Port: "h1", PortNS: "p-l1"}},
		Daemons: []testbed.Daemon{{Role: "switch", NS: "p-sw", PID: 10}, {Role: "switch", NS: "p-l0", PID: 20}, {Role: "switch", NS: "p-l1", PID: 21}},
	}
	tg, err := TargetOf(st)
	if err != nil {
		t.Fatal(err)
	}
	want := []Link{
		{Name: "sw→l0", Port: "l0", RateBits: 200e6, NS: "p-sw", Dev: "l0"},
		{Name: "l0→sw", Port: "l0", Up: true, RateBits: 200e6, NS: "p-l0", Dev: "uplink"},
		{Name: "sw→l1", Port: "l1", RateBits: 200e6, NS: "p-sw", Dev: "l1"},
		{Name: "l1→sw", Port: "l1", Up: true, RateBits: 200e6, NS: "p-l1", Dev: "uplink"},
		{Name: "sw→h0", Port: "h0", RateBits: 100e6, NS: "p-l0", Dev: "h0"},
		{Name: "h0→sw", Port: "h0", Up: true, RateBits: 100e6, NS: "p-h0", Dev: "eth0"},
		{Name: "sw→h1", Port: "h1", RateBits: 100e6, NS: "p-l1", Dev: "h1"},
		{Name: "h1→sw", Port: "h1", Up: true, RateBits: 100e6, NS: "p-h1", Dev: "eth0"},
	}
	if !slices.Equal(tg.Links, want) || !slices.Equal(tg.NetDevPIDs, []int{10, 20, 21}) {
		t.Errorf("TargetOf = links %+v, net/dev pids %v; want %+v, [10 20 21]", tg.Links, tg.NetDevPIDs, want)
	}
	st.Daemons = st.Daemons[:2] // leaf l1's switch gone
	if _, err := TargetOf(st); err == nil {
		t.Error("a leaf without its switch daemon: no error")
	}
}
