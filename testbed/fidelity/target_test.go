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
		Daemons:  []testbed.Daemon{{Role: "switch", PID: 10}, {Role: "memd", PID: 11}},
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
	if !slices.Equal(tg.Links, want) || tg.NetDevPID != 10 || len(tg.Daemons) != 2 || tg.Daemons[1] != (Daemon{"memd", 11}) {
		t.Errorf("TargetOf = %+v, want links %+v, net/dev of pid 10, both daemons", tg, want)
	}
	st.Daemons = st.Daemons[1:]
	if _, err := TargetOf(st); err == nil {
		t.Error("no switch daemon: no error")
	}
}
