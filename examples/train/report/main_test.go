package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sample = `{"kind": "start", "params": 1000, "optimizer": "adam", "backend": "gloo", "ranks": 2}
{"kind": "step", "epoch": 0, "step": 1, "t": 1.0, "loss": 2.0, "step_s": 1.0, "backend": "gloo", "ranks": 2}
{"kind": "step", "epoch": 0, "step": 2, "t": 2.0, "loss": 1.0, "step_s": 1.0, "backend": "gloo", "ranks": 2}
{"kind": "epoch", "epoch": 0, "t": 2.0, "test_acc": 0.9, "step_s_median": 1.0, "compute_s": 0.25, "comm_s": 0.75, "param_hash": "ab", "ranks_agree": true, "backend": "gloo", "ranks": 2}
{"kind": "epoch", "epoch": 1, "t": 4.0, "test_acc": 0.975, "step_s_median": 1.0, "compute_s": 0.25, "comm_s": 0.75, "param_hash": "cd", "ranks_agree": true, "backend": "gloo", "ranks": 2}
{"kind": "summary", "train_s": 4.0, "steps": 4, "samples_per_s": 100, "optimizer_state_bytes": 8388608, "pool_bytes": 0, "max_rss_bytes": 209715200, "backend": "gloo", "ranks": 2}
`

// TestReport reads a trainer's JSON Lines, tabulates them against
// themselves, finds the time to the target accuracy, and draws the plots.
func TestReport(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gloo.jsonl")
	if err := os.WriteFile(path, []byte(sample), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := read(path, 0.97)
	if err != nil {
		t.Fatal(err)
	}
	if r.Backend != "gloo" || r.Ranks != 2 || r.Params != 1000 || r.SamplesPerS != 100 || len(r.TestAcc) != 2 || r.TimeToAcc != 4 || len(r.lossT) != 2 {
		t.Fatalf("read %+v", r)
	}
	var b bytes.Buffer
	table(&b, []*run{r}, 0.97)
	for _, want := range []string{"| gloo | adam | 2 | 1000 | 100 | 1.00× |", "90.00%, 97.50%", "| 4.0 | yes | 8.0 | - | 200.0 |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	if err := draw(dir, []*run{r}, 0.97); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"loss.png", "accuracy.png"} {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A run that did not finish has no summary: an error, not a row.
	cut := filepath.Join(dir, "cut.jsonl")
	if err := os.WriteFile(cut, []byte(strings.Join(strings.Split(sample, "\n")[:3], "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := read(cut, 0.97); err == nil || !strings.Contains(err.Error(), "did not finish") {
		t.Fatalf("unfinished run: %v", err)
	}
}
