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
		Daemons: []testbed.Daemon{{Role: "switch", NS: "p-sw", PID: 10, Start: 7, Args: []string{"ndma", "switch"}},
			{Role: "memd", NS: "p-m0", PID: 11, Start: 8, Args: []string{"ndma", "memd", "--listen", "10.0.0.2:7472"}}},
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
	if !slices.Equal(tg.Links, want) || !slices.Equal(tg.NetDevNS, []string{"p-sw"}) || len(tg.Daemons) != 2 {
		t.Errorf("TargetOf = %+v, want links %+v, net/dev of p-sw, both daemons", tg, want)
	}
	// What finds a daemon's process again if it is started anew.
	if d := tg.Daemons[1]; d.Role != "memd" || d.PID != 11 || d.Start != 8 || d.NS != "p-m0" || !slices.Equal(d.Args, st.Daemons[1].Args) {
		t.Errorf("memory node's daemon %+v, want that of %+v", d, st.Daemons[1])
	}
	st.Daemons = st.Daemons[1:]
	if _, err := TargetOf(st); err == nil {
		t.Error("no switch daemon: no error")
	}
}

// TestTargetOfLeaves: in a tree, a host's link is watched at its leaf's
// bridge, the uplinks at the spine's, and the ports' counters come from
// the spine's and every leaf's namespace.
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
	if nss := []string{"p-sw", "p-l0", "p-l1"}; !slices.Equal(tg.Links, want) || !slices.Equal(tg.NetDevNS, nss) {
		t.Errorf("TargetOf = links %+v, net/dev of %v; want %+v, %v", tg.Links, tg.NetDevNS, want, nss)
	}
	st.Daemons = st.Daemons[:2] // leaf l1's switch gone
	if _, err := TargetOf(st); err == nil {
		t.Error("a leaf without its switch daemon: no error")
	}
}
