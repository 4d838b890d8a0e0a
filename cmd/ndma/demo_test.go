package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestDemo runs the demo and checks that every row verified.
func TestDemo(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var buf bytes.Buffer
	if err := runDemo(context.Background(), &buf, false); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	out := buf.String()
	for _, s := range []string{"OPERATION", "vector max i64", "read, bad key", "checks passed",
		"switch on 127.0.0.1:", "multicast vs unicasts", "allreduce f32 sum vs gather",
		"anycast round-robin", "served 50/50", "anycast key-affinity", "100% on the owner",
		"sender bytes ", "root bytes ", "volume write+read", "for the 3 copies", "every datagram sealed", " 0 refused; 13 processes"} {
		if !strings.Contains(out, s) {
			t.Errorf("demo output lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "FAIL") {
		t.Errorf("demo reports a failure:\n%s", out)
	}
}

// TestDemoJSON checks that the --json output is JSON Lines of passing
// rows covering every operation.
func TestDemoJSON(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var buf bytes.Buffer
	if err := runDemo(context.Background(), &buf, true); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	ops := make(map[string]bool)
	compared := make(map[string]demoRow)
	var sec []demoRow
	for line := range strings.Lines(buf.String()) {
		var row demoRow
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&row); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if row.Op == "security" {
			sec = append(sec, row)
			continue
		}
		if !row.OK || row.Size <= 0 || row.Op == "" {
			t.Errorf("row %+v", row)
		}
		ops[strings.Fields(row.Op)[0]] = true
		if row.HostLatencyUS > 0 {
			compared[row.Op] = row
		}
	}
	for _, op := range []string{"write", "read", "cas", "fadd", "vector", "read,", "write,", "fadd,", "multicast", "allreduce", "anycast", "pool"} {
		if !ops[op] {
			t.Errorf("no %q row in %v", op, ops)
		}
	}
	// Every process of the demo seals every datagram: the security row
	// counts what the layers sealed and opened (every operation above
	// went through them), and refused nothing.
	switch {
	case len(sec) != 1:
		t.Errorf("%d security rows, want 1: %+v", len(sec), sec)
	case !sec[0].OK || sec[0].Refused != 0:
		t.Errorf("security row %+v: want ok, nothing refused", sec[0])
	case sec[0].Sealed < 1000 || sec[0].Opened < 1000:
		// The 1 MiB writes, reads and group operations alone are
		// thousands of datagrams.
		t.Errorf("security row %+v: want thousands of datagrams sealed and opened", sec[0])
	}
	// The group operations against their host-only counterparts: the
	// sender (or root) puts the payload on the wire once instead of once
	// per other member. Retransmissions (under -race, on a loaded machine)
	// may add to either count, never take away.
	for _, op := range []string{"multicast vs unicasts", "allreduce f32 sum vs gather"} {
		row, ok := compared[op]
		switch {
		case !ok:
			t.Errorf("no comparison row %q", op)
		case row.LatencyUS <= 0 || row.Speedup <= 0:
			t.Errorf("%s: times %+v", op, row)
		case row.SentBytes < 1<<20 || row.SentBytes >= 2<<20:
			t.Errorf("%s: NDMA sent %d bytes, want 1 MiB (once)", op, row.SentBytes)
		case row.HostSentBytes < 3<<20:
			t.Errorf("%s: host-only sent %d bytes, want at least 3 MiB (once per other member)", op, row.HostSentBytes)
		}
	}
}

// TestDemoCommand runs the demo through the command line.
func TestDemoCommand(t *testing.T) {
	var out bytes.Buffer
	rootCmd.SetOut(&out)
	rootCmd.SetArgs([]string{"demo", "--json"})
	t.Cleanup(func() { rootCmd.SetOut(nil); rootCmd.SetArgs(nil) })
	if err := rootCmd.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if n := strings.Count(out.String(), "\n"); n < 20 {
		t.Fatalf("%d rows:\n%s", n, out.String())
	}
}
