package bench

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ndma/ndma/netio"
)

// TestUDPLoop: the raw loop sends each datagram to the receivers in turn,
// or to every receiver with all.
func TestUDPLoop(t *testing.T) {
	for _, all := range []bool{false, true} {
		loop, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
		if err != nil {
			t.Fatal(err)
		}
		var sinks []*netio.UDPConn
		var to []netip.AddrPort
		for range 3 {
			c, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
			if err != nil {
				t.Fatal(err)
			}
			sinks = append(sinks, c)
			to = append(to, c.LocalAddr())
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := UDPLoop(loop, to, all); err != nil {
				t.Errorf("UDPLoop: %v", err)
			}
		})
		src, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
		if err != nil {
			t.Fatal(err)
		}
		const n = 6
		for i := range n {
			if err := src.WriteBatch([]netio.Datagram{{Addr: loop.LocalAddr(), Buf: []byte{byte(i)}}}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond) // one datagram per batch: in turn across batches too
		}
		want := n / len(sinks)
		if all {
			want = n
		}
		for i, c := range sinks {
			ds := make([]netio.Datagram, 16)
			for j := range ds {
				ds[j].Buf = make([]byte, netio.MaxDatagram)
			}
			got := 0
			deadline := time.Now().Add(5 * time.Second)
			for got < want && time.Now().Before(deadline) {
				k, err := c.ReadBatch(ds[:min(len(ds), want-got)])
				if err != nil {
					t.Fatal(err)
				}
				for j := range k {
					if b := ds[j].Buf; len(b) != 1 || !all && int(b[0])%len(sinks) != i {
						t.Errorf("all=%v: receiver %d got %v", all, i, b)
					}
					ds[j].Buf = ds[j].Buf[:cap(ds[j].Buf)]
				}
				got += k
			}
			if got != want {
				t.Errorf("all=%v: receiver %d got %d datagrams, want %d", all, i, got, want)
			}
		}
		loop.Close()
		wg.Wait()
		src.Close()
		for _, c := range sinks {
			c.Close()
		}
	}
	if err := UDPLoop(nil, nil, false); err == nil {
		t.Error("UDPLoop with no address: no error")
	}
}

// TestRunSwitch runs the switch benchmark briefly on small settings: a
// memcpy row, then per test the loop's row and the switch's rows with one
// and two cores, each with a figure and its ratios. Each point lasts a
// second: CPU time comes from /proc in clock ticks, which a 200 ms point
// of a light load sometimes read as none.
func TestRunSwitch(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds ndma and starts a switch process")
	}
	bin := ndmaBinary(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var rows []SwitchResult
	progress := 0
	cfg := SwitchConfig{Binary: bin, Members: 3, Size: 64 << 10, Window: 2, Duration: time.Second,
		Cores: []int{1, 2}, Progress: func(done, total int) { progress = done }}
	if err := RunSwitch(ctx, cfg, func(r SwitchResult) error { rows = append(rows, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 7 || progress != 7 {
		t.Fatalf("%d rows, progress %d: %+v", len(rows), progress, rows)
	}
	if r := rows[0]; r.Test != SwitchMemcpy || r.Gbps <= 0 || r.GbpsPerCore <= 0 {
		t.Errorf("memcpy row %+v", r)
	}
	for i, test := range []string{SwitchReduce, SwitchReplicate} {
		loop, one, two := rows[1+3*i], rows[2+3*i], rows[3+3*i]
		if loop.Test != test || loop.Process != ProcUDPLoop || loop.Bytes == 0 || loop.CPU <= 0 || loop.GbpsPerCore <= 0 {
			t.Errorf("%s: loop row %+v", test, loop)
		}
		for _, r := range []SwitchResult{one, two} {
			if r.Test != test || r.Process != ProcSwitch || r.Ops == 0 || r.Gbps <= 0 || r.CPU <= 0 || r.VsLoop <= 0 {
				t.Errorf("%s: switch row %+v", test, r)
			}
		}
		perOp := uint64(3 * 64 << 10)
		if test == SwitchReplicate {
			perOp = 2 * 64 << 10
		}
		if one.Bytes != one.Ops*perOp {
			t.Errorf("%s: %d bytes for %d operations", test, one.Bytes, one.Ops)
		}
		if one.Cores != 1 || one.VsOneCore != 0 || two.Cores != 2 || two.VsOneCore <= 0 {
			t.Errorf("%s: cores and ratios: %+v, %+v", test, one, two)
		}
	}
	var out strings.Builder
	tbl := NewSwitchTable(&out)
	for _, r := range rows {
		_ = tbl.Write(r)
	}
	if err := tbl.Flush(); err != nil || strings.Count(out.String(), "\n") != 8 || !strings.Contains(out.String(), "vs UDP loop") {
		t.Errorf("table (%v):\n%s", err, out.String())
	}
}

func TestSwitchConfigRefused(t *testing.T) {
	for _, c := range []SwitchConfig{
		{},
		{Binary: "x", Members: 1},
		{Binary: "x", Size: 6},
		{Binary: "x", Window: 65},
		{Binary: "x", Cores: []int{0}},
		{Binary: "x", Tests: []string{"bcast"}},
		{Binary: "x", MTU: 100},
		{Binary: "x", Duration: -time.Second},
	} {
		if err := RunSwitch(t.Context(), c, func(SwitchResult) error { return nil }); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}
