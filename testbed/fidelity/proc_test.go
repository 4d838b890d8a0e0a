package fidelity

import (
	"os"
	"strings"
	"testing"
)

func TestParseStat(t *testing.T) {
	b, err := os.ReadFile("testdata/proc-stat.txt")
	if err != nil {
		t.Fatal(err)
	}
	st, err := ParseStat(b)
	if err != nil {
		t.Fatal(err)
	}
	// The recorded file's "cpu" line, field by field.
	want := CPUTimes{User: 2118447, System: 624866, Idle: 2666177, IOWait: 178501, SoftIRQ: 48568, Steal: 2049}
	if st.CPU != want || !st.HasSteal || st.CPUs != 2 || st.ProcsRunning != 4 {
		t.Errorf("ParseStat = %+v, want %+v with steal, 2 CPUs, 4 running", st, want)
	}
	if got := st.CPU.Total(); got != 2118447+624866+2666177+178501+48568+2049 {
		t.Errorf("Total = %d", got)
	}
	// A kernel without the steal field (before 2.6.11) and bad input.
	old, err := ParseStat([]byte("cpu 1 2 3 4 5 6 7\ncpu0 1 2 3 4 5 6 7\nprocs_running 3\n"))
	if err != nil || old.HasSteal || old.CPU.SoftIRQ != 7 || old.ProcsRunning != 3 {
		t.Errorf("seven fields: %+v, %v", old, err)
	}
	for _, bad := range []string{"", "cpu 1 2 3\ncpu0 1 2 3\n", "cpu 1 2 3 4 5 6 x 8\ncpu0 1\n", "cpu 1 2 3 4 5 6 7 8\n"} {
		if _, err := ParseStat([]byte(bad)); err == nil {
			t.Errorf("ParseStat(%q): no error", bad)
		}
	}
}

func TestParseProcStat(t *testing.T) {
	for _, c := range []struct {
		in             string
		self, children uint64
	}{
		{"1 (sh) S 0 1 1 0 -1 0 0 0 0 0 7 3 40 2 20 0", 10, 42},
		{"1 (a (b) c) R 0 1 1 0 -1 0 0 0 0 0 1 1 0 0 20 0", 2, 0}, // parentheses in the name
	} {
		s, ch, err := ParseProcStat([]byte(c.in))
		if err != nil || s != c.self || ch != c.children {
			t.Errorf("ParseProcStat(%q) = %d, %d, %v; want %d, %d", c.in, s, ch, err, c.self, c.children)
		}
	}
	b, err := os.ReadFile("testdata/faithful/self-end.stat")
	if err != nil {
		t.Fatal(err)
	}
	if s, ch, err := ParseProcStat(b); err != nil || s != 0 || ch != 103 {
		t.Errorf("recorded: %d, %d, %v; want 0, 60+43", s, ch, err)
	}
	for _, bad := range []string{"1 sh S", "1 (sh) S 0 1", "1 (sh) S 0 1 1 0 -1 0 0 0 0 0 x 3 4 2 20"} {
		if _, _, err := ParseProcStat([]byte(bad)); err == nil {
			t.Errorf("ParseProcStat(%q): no error", bad)
		}
	}
}

func TestParseNetDev(t *testing.T) {
	b, err := os.ReadFile("testdata/faithful/samples.txt")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(b), "== net/dev\n")
	dev, _, _ := strings.Cut(rest, "# at")
	ifs, err := ParseNetDev([]byte(dev))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"lo", "br0", "h0", "h1"} {
		if _, ok := ifs[name]; !ok {
			t.Errorf("no %s in %v", name, ifs)
		}
	}
	// Two namespaces' net/dev read one after the other (a tree's spine
	// and a leaf): the second's header lines are skipped, its ports kept.
	leaf := strings.ReplaceAll(strings.ReplaceAll(dev, " h0:", " h9:"), " h1:", " l0:")
	both, err := ParseNetDev([]byte(dev + leaf))
	if err != nil {
		t.Fatal(err)
	}
	if both["h9"] != ifs["h0"] || both["l0"] != ifs["h1"] || both["h0"] != ifs["h0"] {
		t.Errorf("two net/dev together: %v", both)
	}
	if _, err := ParseNetDev([]byte("h\nh\n  h0: 1 2 3\n")); err == nil {
		t.Error("short line: no error")
	}
}

func TestParseQdiscs(t *testing.T) {
	b, err := os.ReadFile("testdata/faithful/tc-end.json")
	if err != nil {
		t.Fatal(err)
	}
	qs, err := ParseQdiscs(b)
	if err != nil {
		t.Fatal(err)
	}
	q, ok := rootQdisc(qs, "h1")
	if !ok || q.Kind != "tbf" || q.Bytes != 8543523 || q.Overlimits != 20 || q.Drops != 0 {
		t.Errorf("h1: %+v, %v", q, ok)
	}
	if _, err := ParseQdiscs([]byte("Error: Cannot find device")); err == nil {
		t.Error("not JSON: no error")
	}
}
