package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ndma/ndma/bench"
)

// TestBenchColl runs a tiny ndma bench coll and checks the JSON rows.
func TestBenchColl(t *testing.T) {
	var out bytes.Buffer
	rootCmd.SetOut(&out)
	rootCmd.SetArgs([]string{"bench", "coll", "--op", "allreduce", "--algo", "innet,ring", "--ranks", "3", "--sizes", "8,4K", "--iters", "3", "--json"})
	defer rootCmd.SetArgs(nil)
	if err := rootCmd.Execute(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d rows:\n%s", len(lines), out.String())
	}
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"op", "algo", "ranks", "size", "avg_us", "min_us", "max_us", "iters"} {
			if _, ok := m[k]; !ok {
				t.Fatalf("row lacks %q: %s", k, l)
			}
		}
		if m["op"] != "allreduce" || m["ranks"].(float64) != 3 || m["avg_us"].(float64) <= 0 || m["min_us"].(float64) > m["max_us"].(float64) {
			t.Fatalf("bad row %s", l)
		}
	}
	rootCmd.SetArgs([]string{"bench", "coll", "--op", "gather", "--algo", "innet"})
	if err := rootCmd.Execute(); err == nil || !strings.Contains(err.Error(), "--algo") {
		t.Fatalf("gather has no innet: %v", err)
	}
}

// TestBenchCollSim runs ndma bench coll --sim and checks the virtual
// times against the link model: a 64 KiB in-network Bcast at 100 Mbit/s
// takes at least S/B (5.24 ms) and not much more; binomial, which sends
// the message once per tree level, takes longer.
func TestBenchCollSim(t *testing.T) {
	out, err := execute(t, "bench", "coll", "--sim", "--op", "bcast", "--algo", "innet,binomial", "--ranks", "4", "--sizes", "64K", "--iters", "3", "--json")
	if err != nil {
		t.Fatal(err)
	}
	avg := map[string]float64{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var r struct {
			Algo  string  `json:"algo"`
			Size  int     `json:"size"`
			AvgUS float64 `json:"avg_us"`
			Iters int     `json:"iters"`
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%v: %q", err, l)
		}
		if r.Size != 64<<10 || r.Iters != 3 {
			t.Fatalf("bad row %s", l)
		}
		avg[r.Algo] = r.AvgUS
	}
	const sOverBUS = 64 << 10 * 8 / 100e6 * 1e6
	if a := avg["innet"]; a < sOverBUS || a > 1.2*sOverBUS {
		t.Errorf("innet 64 KiB bcast %.0f us, want S/B %.0f us to 1.2x", a, sOverBUS)
	}
	if avg["binomial"] < 2*sOverBUS {
		t.Errorf("binomial 64 KiB bcast on 4 ranks %.0f us, want at least two S/B (%.0f us)", avg["binomial"], 2*sOverBUS)
	}

	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--sim", "--listen", ":0"}, "--listen cannot be used with --sim"},
		{[]string{"--loss", "0.1"}, "--loss cannot be used without --sim"},
		{[]string{"--sim", "--loss", "1"}, "--loss 1"},
		{[]string{"--sim", "--seed", "0"}, "--seed 0"},
		{[]string{"--sim", "--link-rate", "fast"}, "--link-rate"},
		{[]string{"--sim", "--switches", "0"}, "--switches: 0"},
		{[]string{"--switches", "17"}, "--switches: 17"},
	} {
		_, err := execute(t, append([]string{"bench", "coll", "--op", "bcast", "--sizes", "8", "--iters", "1"}, bad.args...)...)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: error %v, want one with %q", bad.args, err, bad.want)
		}
	}
}

// TestBenchCollSwitches: with --switches 2 each row ends with both
// switches' datagram counts, in the table and in JSON.
func TestBenchCollSwitches(t *testing.T) {
	out, err := execute(t, "bench", "coll", "--sim", "--op", "allreduce", "--algo", "innet", "--ranks", "3", "--sizes", "64K", "--iters", "2", "--switches", "2", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		SwitchPackets []uint64 `json:"switch_packets"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); err != nil || len(r.SwitchPackets) != 2 || r.SwitchPackets[0] == 0 || r.SwitchPackets[1] == 0 {
		t.Fatalf("%q (%v): want one row with two switches' packets", out, err)
	}
	out, err = execute(t, "bench", "coll", "--op", "bcast", "--algo", "innet", "--ranks", "2", "--sizes", "8K", "--iters", "2", "--switches", "2")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "over 2 switches") || !strings.Contains(out, "Pkts in per switch") {
		t.Fatalf("table without the switches' column:\n%s", out)
	}
}

// TestBenchCollCPUProfile: --cpuprofile writes a profile (gzip-compressed
// protobuf) when the run ends, and reports a path it cannot create.
func TestBenchCollCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.prof")
	if _, err := execute(t, "bench", "coll", "--op", "bcast", "--algo", "binomial", "--ranks", "2", "--sizes", "8", "--iters", "2", "--cpuprofile", path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("profile of %d bytes is not gzip", len(b))
	}
	if _, err := execute(t, "bench", "coll", "--op", "bcast", "--ranks", "2", "--sizes", "8", "--iters", "1", "--cpuprofile", filepath.Join(t.TempDir(), "no", "such", "dir")); err == nil || !strings.Contains(err.Error(), "--cpuprofile") {
		t.Fatalf("bad path: %v", err)
	}
}

// TestBenchSuiteFrom: --from merges earlier runs' rows (a later row of the
// same op, algorithm and size replaces an earlier one) and writes the
// Markdown and plots without a testbed.
func TestBenchSuiteFrom(t *testing.T) {
	dir := t.TempDir()
	row := func(algo string, size int, avg float64) string {
		return fmt.Sprintf(`{"op":"bcast","algo":%q,"ranks":8,"size":%d,"avg_us":%g,"min_us":1,"max_us":%g,"iters":10,"warmup":2,"rate_bits":100000000,"bound_us":%g,"cpu_ranks_s":1,"cpu_switch_s":0.5,"cpu_s":1.5,"cpu_per_call_us":125000}`,
			algo, size, avg, avg+1, float64(size)*8/100)
	}
	a := filepath.Join(dir, "a.jsonl")
	b := filepath.Join(dir, "b.jsonl")
	if err := os.WriteFile(a, []byte(row("innet", 8, 10)+"\n"+row("chain", 8, 30)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, []byte(row("chain", 8, 20)+"\n"+row("mpi", 8, 40)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	md, err := execute(t, "bench", "suite", "--from", a+","+b, "--out", out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md, "| chain | 8 | 20.0 |") || strings.Contains(md, "| chain | 8 | 30.0 |") || !strings.Contains(md, "| mpi | 8 | 40.0 |") {
		t.Errorf("merged Markdown:\n%s", md)
	}
	for _, f := range []string{"suite.jsonl", "suite.md", "bcast-latency.png", "bcast-cpu.png"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	c := filepath.Join(dir, "c.jsonl")
	if err := os.WriteFile(c, []byte(strings.Replace(row("chain", 8, 20), `"ranks":8`, `"ranks":4`, 1)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := execute(t, "bench", "suite", "--from", a+","+c, "--out", out); err == nil || !strings.Contains(err.Error(), "8 ranks on 100mbit links and of 4 ranks") {
		t.Errorf("--from with 8- and 4-rank rows: %v, want an error naming both setups", err)
	}
	// Links with a peak rate are another setup.
	if err := os.WriteFile(c, []byte(strings.Replace(row("chain", 8, 20), `"ranks":8`, `"ranks":8,"peak_rate_bits":200000000`, 1)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := execute(t, "bench", "suite", "--from", a+","+c, "--out", out); err == nil || !strings.Contains(err.Error(), "of 8 ranks on 100mbit links, peak 200mbit") {
		t.Errorf("--from with rows with and without a peak rate: %v, want an error naming both setups", err)
	}
	if _, err := execute(t, "bench", "suite", "--from", a, "--hosts", "4", "--out", out); err == nil {
		t.Error("--hosts with --from: no error")
	}
	if _, err := execute(t, "bench", "suite", "--from", a, "--repeat", "3", "--out", out); err == nil {
		t.Error("--repeat with --from: no error")
	}
	// Every flag of a measurement is refused with --from, never ignored.
	for _, fl := range [][]string{{"--leaves", "2"}, {"--uplink-rate", "10mbit"}, {"--ppn", "2"}, {"--priority-queues"}, {"--sync-algo", "innet"}} {
		if _, err := execute(t, append([]string{"bench", "suite", "--from", a, "--out", out}, fl...)...); err == nil || !strings.Contains(err.Error(), fl[0]) {
			t.Errorf("%s with --from: %v, want an error naming it", fl[0], err)
		}
	}
	if _, err := execute(t, "bench", "suite", "--repeat", "0", "--out", out); err == nil || !strings.Contains(err.Error(), "--repeat") {
		t.Errorf("--repeat 0: %v, want an error naming --repeat", err)
	}
	if _, err := execute(t, "bench", "suite", "--from", a, "--fidelity-cpu", "0.5", "--out", out); err == nil {
		t.Error("--fidelity-cpu with --from: no error")
	}
	// The training rows' flags: refused before any testbed is built,
	// each error naming the flag.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--ops", "ddp"}, "--ddp DIR"},
		{[]string{"--ddp-steps", "5"}, "--ddp-steps"},
		{[]string{"--ddp-algos", "ring"}, "--ddp-algos"},
		{[]string{"--ddp", "mnist", "--ddp-algos", "mpi"}, "--ddp-algos"},
		{[]string{"--ddp", "mnist", "--ddp-steps", "0"}, "--ddp-steps"},
		{[]string{"--from", a, "--ddp", "mnist"}, "--ddp"},
	} {
		if _, err := execute(t, append([]string{"bench", "suite", "--out", out}, c.args...)...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error naming %s", c.args, err, c.want)
		}
	}
	// A share of the machine above 0, at most 1, for the suite and for
	// testbed run (refused before it looks for a testbed).
	for _, args := range [][]string{
		{"bench", "suite", "--fidelity-cpu", "0", "--out", out},
		{"bench", "suite", "--fidelity-cpu", "1.5", "--out", out},
		{"testbed", "run", "--prefix", "nosuchtb", "--fidelity-cpu", "-0.1", "--", "true"},
	} {
		if _, err := execute(t, args...); err == nil || !strings.Contains(err.Error(), "--fidelity-cpu") {
			t.Errorf("%v: %v, want an error naming --fidelity-cpu", args, err)
		}
	}
	// --rate auto sets every link's rate: a peak or host rate beside it
	// is refused before any testbed is built.
	for _, args := range [][]string{
		{"bench", "suite", "--rate", "auto", "--peak-rate", "2gbit", "--out", out},
		{"testbed", "up", "--prefix", "nosuchtb", "--rate", "auto", "--host-rate", "1gbit"},
	} {
		if _, err := execute(t, args...); err == nil || !strings.Contains(err.Error(), "--rate auto") {
			t.Errorf("%v: %v, want an error naming --rate auto", args, err)
		}
	}
	// Ranks per host from 1 to 64 (refused before it looks for a testbed).
	for _, ppn := range []string{"0", "65"} {
		for _, cmd := range []string{"run", "mpirun"} {
			if _, err := execute(t, "testbed", cmd, "--prefix", "nosuchtb", "--ppn", ppn, "--", "true"); err == nil || !strings.Contains(err.Error(), "--ppn "+ppn) {
				t.Errorf("testbed %s --ppn %s: %v, want an error naming --ppn", cmd, ppn, err)
			}
		}
		if _, err := execute(t, "bench", "suite", "--ppn", ppn, "--out", out); err == nil || !strings.Contains(err.Error(), "--ppn") {
			t.Errorf("bench suite --ppn %s: %v, want an error naming --ppn", ppn, err)
		}
	}
}

// TestBenchCollSync: --sync-algo picks the barrier before every call and
// every row names it (recursive doubling by default; auto resolves to
// the communicator's choice, in-network with the in-process switch);
// an algorithm Barrier lacks, or an unknown one, is refused.
func TestBenchCollSync(t *testing.T) {
	for _, c := range []struct{ flag, want string }{
		{"", "recursive_doubling"},
		{"innet", "innet"},
		{"auto", "innet"},
	} {
		args := []string{"bench", "coll", "--op", "bcast", "--algo", "innet", "--ranks", "3", "--sizes", "8", "--iters", "3", "--json"}
		if c.flag != "" {
			args = append(args, "--sync-algo", c.flag)
		}
		out, err := execute(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Sync string `json:"sync"`
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); err != nil || r.Sync != c.want {
			t.Fatalf("--sync-algo %q: row %s (err %v), want sync %q", c.flag, out, err, c.want)
		}
	}
	for _, bad := range []string{"ring", "bogus"} {
		if _, err := execute(t, "bench", "coll", "--op", "bcast", "--ranks", "2", "--sizes", "8", "--iters", "1", "--sync-algo", bad); err == nil || !strings.Contains(err.Error(), "--sync-algo") {
			t.Fatalf("--sync-algo %s: %v", bad, err)
		}
		// bench suite refuses it before building a testbed.
		if _, err := execute(t, "bench", "suite", "--sync-algo", bad, "--out", t.TempDir()); err == nil || !strings.Contains(err.Error(), "--sync-algo") {
			t.Fatalf("bench suite --sync-algo %s: %v", bad, err)
		}
	}
}

// TestCollEmitterHosts: a table of rows measured in two levels says so
// (and how to opt out); one over the network does not.
func TestCollEmitterHosts(t *testing.T) {
	for _, hosts := range []int{0, 3} {
		var out bytes.Buffer
		emit, flush := collEmitter(&out, false, "one process per rank")
		emit(bench.CollResult{Op: "allreduce", Algo: "ring", Ranks: 6, Size: 8, AvgUS: 1, MinUS: 1, MaxUS: 1, Iters: 2, Hosts: hosts})
		flush()
		says := strings.Contains(out.String(), "two levels: shared memory in each of 3 hosts")
		if says != (hosts > 0) {
			t.Errorf("hosts %d: the heading says two levels: %v\n%s", hosts, says, out.String())
		}
	}
}
