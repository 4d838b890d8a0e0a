package jepsen

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// stepClock is a clock that moves 1 ms at each reading.
func stepClock() func() time.Time {
	t := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	return func() time.Time {
		t = t.Add(time.Millisecond)
		return t
	}
}

var errTimeout = errors.New("timeout")

// write records a write of v to key by client that completes with out.
func write(h *History, client int, key string, v uint64, out Outcome) {
	c := h.Invoke(client, Write, key, v)
	switch out {
	case OK:
		c.OK(0)
	case Failed:
		c.Fail(errors.New("refused"))
	case Unknown:
		c.Unknown(errTimeout)
	}
}

// read records a read of key by client that returns v.
func read(h *History, client int, key string, v uint64) {
	h.Invoke(client, Read, key, 0).OK(v)
}

// checkIllegal checks that the history is found not linearizable on
// exactly the keys want, with an anomaly explained as containing what.
func checkIllegal(t *testing.T, h *History, want []string, what string) *Report {
	t.Helper()
	r := Check(h, CheckOptions{})
	if r.OK() || !slices.Equal(r.Illegal, want) || len(r.Undecided) != 0 {
		t.Fatalf("illegal %v, undecided %v, want illegal %v\n%v", r.Illegal, r.Undecided, want, r)
	}
	found := false
	for _, a := range r.Anomalies {
		found = found || strings.Contains(a.What, what)
	}
	if !found {
		t.Errorf("no anomaly says %q:\n%v", what, r)
	}
	return r
}

func checkLegal(t *testing.T, h *History) *Report {
	t.Helper()
	r := Check(h, CheckOptions{})
	if !r.OK() || r.Keys == 0 {
		t.Fatalf("not linearizable:\n%v", r)
	}
	return r
}

func TestCheckStaleRead(t *testing.T) {
	h := NewHistory(stepClock())
	write(h, 0, "x", 1, OK)
	write(h, 0, "x", 2, OK)
	read(h, 1, "x", 1) // 2 had replaced 1 before the read began
	read(h, 1, "y", 0)
	checkIllegal(t, h, []string{"x"}, "stale read")
}

func TestCheckLostWrite(t *testing.T) {
	h := NewHistory(stepClock())
	write(h, 0, "x", 1, OK)
	read(h, 1, "x", 0) // the acknowledged write is gone: the initial value
	checkIllegal(t, h, []string{"x"}, "stale read")
}

func TestCheckNeverWritten(t *testing.T) {
	h := NewHistory(stepClock())
	write(h, 0, "x", 1, OK)
	read(h, 1, "x", 7)
	checkIllegal(t, h, []string{"x"}, "never written")
}

// A write that failed definitely did not happen: reading its value is
// as wrong as reading a value never written.
func TestCheckFailedWriteSeen(t *testing.T) {
	h := NewHistory(stepClock())
	write(h, 0, "x", 5, Failed)
	read(h, 1, "x", 5)
	checkIllegal(t, h, []string{"x"}, "failed")
}

// A value seen cannot be unseen: once one read returned the new value,
// a later read must not return the old one, even while the write that
// wrote the new one is still in flight.
func TestCheckNewThenOld(t *testing.T) {
	h := NewHistory(stepClock())
	write(h, 0, "x", 1, OK)
	w := h.Invoke(0, Write, "x", 2)
	read(h, 1, "x", 2)
	read(h, 2, "x", 1)
	w.OK(0)
	checkIllegal(t, h, []string{"x"}, "was read")
}

// Overlapping operations may take effect in any order within their
// intervals, an unknown write at any time after its invocation or never,
// a failed write never and a failed read is no evidence.
func TestCheckConcurrentLinearizable(t *testing.T) {
	h := NewHistory(stepClock())
	w1 := h.Invoke(0, Write, "x", 1)
	r1 := h.Invoke(1, Read, "x", 0)
	w2 := h.Invoke(2, Write, "x", 2)
	r1.OK(2) // w2 took effect first...
	w1.OK(0) // ...and w1 after it, before returning
	w2.OK(0)
	read(h, 1, "x", 1)
	h.Invoke(1, Read, "x", 0).Fail(errTimeout)
	h.Invoke(1, Read, "x", 0).Unknown(errTimeout)
	write(h, 0, "x", 3, Unknown) // not seen yet
	read(h, 1, "x", 1)
	read(h, 2, "x", 3) // now it took effect
	read(h, 1, "x", 3)
	write(h, 0, "x", 4, Failed) // never seen
	h.Invoke(0, Write, "x", 5)  // pending: never seen
	read(h, 1, "x", 3)
	// Another key, and one never written.
	write(h, 2, "y", 9, OK)
	r := h.Invoke(1, Read, "y", 0)
	write(h, 2, "y", 10, OK)
	r.OK(9)
	read(h, 1, "z", 0)
	rep := checkLegal(t, h)
	if rep.Keys != 3 {
		t.Errorf("keys %d, want 3", rep.Keys)
	}
	if want := (Counts{OK: 8, Failed: 1, Unknown: 1}); rep.Reads != want {
		t.Errorf("reads %v, want %v", rep.Reads, want)
	}
	if want := (Counts{OK: 4, Failed: 1, Unknown: 2}); rep.Writes != want {
		t.Errorf("writes %v, want %v", rep.Writes, want)
	}
	// The same history with the unknown write's value unseen again is
	// not linearizable.
	read(h, 2, "x", 1)
	checkIllegal(t, h, []string{"x"}, "stale read")
}

// Only the first completion of an operation counts.
func TestCheckFirstCompletionCounts(t *testing.T) {
	h := NewHistory(stepClock())
	write(h, 0, "x", 1, OK)
	c := h.Invoke(1, Read, "x", 0)
	c.OK(1)
	c.OK(2)
	c.Fail(errTimeout)
	checkLegal(t, h)
}

func TestCheckVisualization(t *testing.T) {
	h := NewHistory(stepClock())
	write(h, 0, "ok", 1, OK)
	read(h, 1, "ok", 1)
	dir := t.TempDir()
	r := checkLegal(t, h)
	if path, err := r.WriteVisualization(dir); path != "" || err != nil {
		t.Errorf("visualization of a linearizable history: %q, %v", path, err)
	}
	write(h, 0, "bad", 1, OK)
	read(h, 1, "bad", 2)
	r = Check(h, CheckOptions{Describe: func(v uint64) string { return "value" + string(rune('A'+v)) }})
	path, err := r.WriteVisualization(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "read(bad) -\\u003e valueC") && !strings.Contains(string(b), "read(bad) -> valueC") {
		t.Errorf("the visualization does not show the bad read")
	}
	if strings.Contains(string(b), "read(ok)") {
		t.Errorf("the visualization shows a linearizable key")
	}
}

func TestCompareReplicas(t *testing.T) {
	a := Snapshot{Replica: "a", Keys: map[string][]byte{"0": {1}, "1": {2}, "2": {3}}}
	b := Snapshot{Replica: "b", Keys: map[string][]byte{"0": {1}, "1": {2}, "2": {3}}}
	if d := CompareReplicas([]Snapshot{a, b}); len(d) != 0 {
		t.Fatalf("equal replicas differ: %v", d)
	}
	c := Snapshot{Replica: "c", Keys: map[string][]byte{"0": {1}, "1": {9}}}
	d := CompareReplicas([]Snapshot{a, b, c})
	if len(d) != 2 || d[0].Key != "1" || d[1].Key != "2" {
		t.Fatalf("divergent %v, want keys 1 and 2", d)
	}
	if d[0].Digests["c"] == d[0].Digests["a"] || d[0].Digests["a"] != d[0].Digests["b"] || len(d[0].Missing) != 0 {
		t.Errorf("key 1: %v", d[0])
	}
	if !slices.Equal(d[1].Missing, []string{"c"}) {
		t.Errorf("key 2: %v, want missing on c", d[1])
	}
}

// A regular register lets two reads that overlap one write see its value
// and then the older one (which an atomic register forbids), but still
// catches a read older than a write completed before it began, a lost
// acknowledged write, and a value never written or from a failed write.
func TestCheckRegular(t *testing.T) {
	regular := func(h *History) *Report { return Check(h, CheckOptions{Regular: true}) }
	h := NewHistory(stepClock())
	write(h, 0, "x", 1, OK)
	w := h.Invoke(0, Write, "x", 2)
	read(h, 1, "x", 2)
	read(h, 2, "x", 1) // new, then old, while the write is in flight
	w.OK(0)
	read(h, 1, "x", 2)
	write(h, 0, "x", 3, Unknown) // may never take effect...
	read(h, 2, "x", 2)
	read(h, 1, "x", 3) // ...or be seen, and then not
	read(h, 2, "x", 2)
	if r := regular(h); !r.OK() {
		t.Fatalf("a regular history found bad:\n%v", r)
	}
	if r := Check(h, CheckOptions{}); r.OK() {
		t.Fatalf("new-then-old reads during a write found linearizable:\n%v", r)
	}
	for _, c := range []struct {
		name string
		bad  func(h *History)
	}{
		{"stale read", func(h *History) { write(h, 0, "x", 4, OK); read(h, 1, "x", 2) }},
		{"lost write", func(h *History) { write(h, 0, "y", 4, OK); read(h, 1, "y", 0) }},
		{"never written", func(h *History) { read(h, 1, "x", 77) }},
		{"failed write seen", func(h *History) { write(h, 0, "x", 5, Failed); read(h, 1, "x", 5) }},
	} {
		h := NewHistory(stepClock())
		write(h, 0, "x", 1, OK)
		write(h, 0, "x", 2, OK)
		c.bad(h)
		if r := regular(h); r.OK() {
			t.Errorf("%s: not caught by the regular check:\n%v", c.name, r)
		}
	}
}

// Two overlapping writes may take effect in either order in a regular
// register too: the one that completed first may be the value after both.
func TestCheckRegularOverlappingWrites(t *testing.T) {
	h := NewHistory(stepClock())
	w1 := h.Invoke(0, Write, "x", 1)
	w2 := h.Invoke(1, Write, "x", 2)
	w2.OK(0)
	w1.OK(0)
	read(h, 2, "x", 2)
	read(h, 2, "x", 2)
	if r := Check(h, CheckOptions{Regular: true}); !r.OK() {
		t.Fatalf("overlapping writes taking effect out of completion order found bad:\n%v", r)
	}
	read(h, 2, "x", 1) // after the value was 2 with no write pending: stale
	if r := Check(h, CheckOptions{Regular: true}); r.OK() {
		t.Fatalf("a read of the replaced value after both writes ended found good:\n%v", r)
	}
}
