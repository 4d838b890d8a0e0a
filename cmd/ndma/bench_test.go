package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// benchRW runs a fresh ndma bench rw command with args.
func benchRW(args ...string) (string, error) {
	cmd := newBenchRWCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestBenchRWJSON(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	out, err := benchRW("--sizes", "8,4K", "--iters", "10", "--window", "4", "--region-size", "1M", "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	ops := make(map[string]int)
	for line := range strings.Lines(out) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		for _, k := range []string{"op", "size", "iters"} {
			if _, ok := m[k]; !ok {
				t.Errorf("row %v lacks %q", m, k)
			}
		}
		_, lat := m["p50_us"]
		_, bw := m["gbps"]
		if lat == bw {
			t.Errorf("row %v: want exactly one of p50_us and gbps", m)
		}
		ops[m["op"].(string)]++
	}
	for _, op := range []string{"read", "write", "cas", "fadd", "udp_pingpong", "tcp_stream"} {
		if ops[op] == 0 {
			t.Errorf("no %s rows: %v", op, ops)
		}
	}
}

func TestBenchRWSim(t *testing.T) {
	out, err := benchRW("--sim", "--loss", "0.01", "--sizes", "64K", "--iters", "16", "--link-rate", "1gbit")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, s := range []string{"simnet, loss 0 ", "simnet, loss 0.01", "1gbit links", "x\n"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
}

// TestBenchRWBadFlags checks that bad and conflicting flags fail clearly.
func TestBenchRWBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--sizes", "0"}, "must be positive"},
		{[]string{"--sizes", "64:8"}, "upper bound"},
		{[]string{"--window", "0"}, "--window"},
		{[]string{"--busy-poll", "-1us"}, "--busy-poll"},
		{[]string{"--busy-poll", "1s"}, "--busy-poll"},
		{[]string{"--sim", "--busy-poll", "50us"}, "--busy-poll cannot be used with --sim"},
		{[]string{"--loss", "0.01"}, "--loss cannot be used without --sim"},
		{[]string{"--sim", "--server", "127.0.0.1:1"}, "--server cannot be used with --sim"},
		{[]string{"--sim", "--loss", "1.5"}, "--loss"},
		{[]string{"--sim", "--link-rate", "fast"}, "rate"},
		{[]string{"--server", "127.0.0.1:1"}, "--key"},
		{[]string{"--key", "abc"}, "--server"},
		{[]string{"--server", "127.0.0.1:1", "--key", "zz"}, "key"},
		{[]string{"--tests", "speed"}, "test"},
		{[]string{"--region-size", "lots"}, "region-size"},
		{[]string{"--mtu", "50", "--sizes", "8"}, "MTU"},
		{[]string{"--bogus"}, "unknown flag"},
		{[]string{"extra"}, "unknown command"},
	} {
		out, err := benchRW(c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v (output %q), want an error containing %q", c.args, err, out, c.want)
		}
	}
}
