// Command report reads the JSON Lines the trainer (examples/train/train.py)
// writes, one file per backend, and prints a table per backend (samples/s,
// step time split into compute and communication, test accuracy per
// epoch, time to an accuracy) and draws loss-vs-time and
// accuracy-per-epoch plots (PNG).
//
//	go run ./examples/train/report --plots DIR gloo.jsonl ndma.jsonl ndma-ring.jsonl
//
// --json prints one JSON object per backend instead of the table.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// record is any line of the trainer's output; kind says which fields
// are set.
type record struct {
	Kind         string  `json:"kind"`
	Backend      string  `json:"backend"`
	Ranks        int     `json:"ranks"`
	Params       int     `json:"params"`
	Epoch        int     `json:"epoch"`
	Step         int     `json:"step"`
	T            float64 `json:"t"`
	Loss         float64 `json:"loss"`
	StepS        float64 `json:"step_s"`
	TestAcc      float64 `json:"test_acc"`
	SamplesPerS  float64 `json:"samples_per_s"`
	StepSMedian  float64 `json:"step_s_median"`
	ComputeS     float64 `json:"compute_s"`
	CommS        float64 `json:"comm_s"`
	ParamHash    string  `json:"param_hash"`
	RanksAgree   bool    `json:"ranks_agree"`
	TrainS       float64 `json:"train_s"`
	BatchPerRank int     `json:"batch_per_rank"`
	Optimizer    string  `json:"optimizer"`
	OptStateB    int64   `json:"optimizer_state_bytes"`
	PoolB        int64   `json:"pool_bytes"`
	MaxRSSB      int64   `json:"max_rss_bytes"`
}

// run is one backend's training.
type run struct {
	Backend     string    `json:"backend"`
	Ranks       int       `json:"ranks"`
	Params      int       `json:"params"`
	SamplesPerS float64   `json:"samples_per_s"`
	StepS       float64   `json:"step_s"`    // median step, last epoch
	ComputeS    float64   `json:"compute_s"` // forward + backward in a step, until the last gradient is computed
	CommS       float64   `json:"comm_s"`    // the rest of the step: waiting for the gradient exchange, the optimizer
	TestAcc     []float64 `json:"test_acc"`  // per epoch
	EpochT      []float64 `json:"epoch_t"`   // seconds from the start at each epoch's end
	RanksAgree  []bool    `json:"ranks_agree"`
	Hashes      []string  `json:"param_hashes"`
	TimeToAcc   float64   `json:"time_to_acc_s,omitempty"` // first epoch end at or above --target (0: never)
	Optimizer   string    `json:"optimizer,omitempty"`
	OptStateB   int64     `json:"optimizer_state_bytes"` // optimizer state each rank holds
	PoolB       int64     `json:"pool_bytes"`            // parameters and optimizer state in the memory pool
	MaxRSSB     int64     `json:"max_rss_bytes"`         // peak resident set, largest rank
	lossT       plotter.XYs
}

func main() {
	plots := flag.String("plots", "", "directory to write loss.png and accuracy.png to (none: no plots)")
	target := flag.Float64("target", 0.97, "test accuracy whose time to reach is reported")
	asJSON := flag.Bool("json", false, "print one JSON object per backend instead of the table")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "report: give the trainer's JSON Lines files")
		os.Exit(2)
	}
	var runs []*run
	for _, path := range flag.Args() {
		r, err := read(path, *target)
		if err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			os.Exit(1)
		}
		runs = append(runs, r)
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		for _, r := range runs {
			if err := enc.Encode(r); err != nil {
				fmt.Fprintln(os.Stderr, "report:", err)
				os.Exit(1)
			}
		}
	} else {
		table(os.Stdout, runs, *target)
	}
	if *plots != "" {
		if err := draw(*plots, runs, *target); err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			os.Exit(1)
		}
	}
}

func read(path string, target float64) (*run, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := &run{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	summary := false
	for n := 1; sc.Scan(); n++ {
		var rec record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		r.Backend, r.Ranks = rec.Backend, rec.Ranks
		switch rec.Kind {
		case "start":
			r.Params, r.Optimizer = rec.Params, rec.Optimizer
		case "step":
			r.lossT = append(r.lossT, plotter.XY{X: rec.T, Y: rec.Loss})
		case "epoch":
			r.TestAcc = append(r.TestAcc, rec.TestAcc)
			r.EpochT = append(r.EpochT, rec.T)
			r.RanksAgree = append(r.RanksAgree, rec.RanksAgree)
			r.Hashes = append(r.Hashes, rec.ParamHash)
			r.StepS, r.ComputeS, r.CommS = rec.StepSMedian, rec.ComputeS, rec.CommS
			if r.TimeToAcc == 0 && rec.TestAcc >= target {
				r.TimeToAcc = rec.T
			}
		case "summary":
			r.SamplesPerS, summary = rec.SamplesPerS, true
			r.OptStateB, r.PoolB, r.MaxRSSB = rec.OptStateB, rec.PoolB, rec.MaxRSSB
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if !summary {
		return nil, fmt.Errorf("%s: no summary record: the training did not finish", path)
	}
	if r.Backend == "" {
		return nil, errors.New(path + ": no backend named")
	}
	return r, nil
}

func table(w io.Writer, runs []*run, target float64) {
	base := runs[0]
	fmt.Fprintf(w, "| backend | optimizer | ranks | params | samples/s | vs %s | step (s) | compute (s) | communication (s) | test accuracy per epoch | time to %.0f%% (s) | ranks agree | optimizer state per rank (MiB) | in the pool (MiB) | peak RSS (MiB) |\n",
		base.Backend, target*100)
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, r := range runs {
		accs := make([]string, len(r.TestAcc))
		for i, a := range r.TestAcc {
			accs[i] = fmt.Sprintf("%.2f%%", a*100)
		}
		tta := "not reached"
		if r.TimeToAcc > 0 {
			tta = fmt.Sprintf("%.1f", r.TimeToAcc)
		}
		agree := "yes"
		for _, a := range r.RanksAgree {
			if !a {
				agree = "no"
			}
		}
		opt := r.Optimizer
		if opt == "" {
			opt = "sgd"
		}
		fmt.Fprintf(w, "| %s | %s | %d | %d | %.0f | %.2f× | %.3f | %.3f | %.3f | %s | %s | %s | %s | %s | %s |\n", r.Backend, opt, r.Ranks, r.Params,
			r.SamplesPerS, r.SamplesPerS/base.SamplesPerS, r.StepS, r.ComputeS, r.CommS, strings.Join(accs, ", "), tta, agree,
			mib(r.OptStateB), mib(r.PoolB), mib(r.MaxRSSB))
	}
}

func draw(dir string, runs []*run, target float64) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	lp := plot.New()
	lp.Title.Text = fmt.Sprintf("training loss (rank 0's batches), %d ranks", runs[0].Ranks)
	lp.X.Label.Text = "time (s)"
	lp.Y.Label.Text = "loss"
	ap := plot.New()
	ap.Title.Text = "test accuracy after each epoch"
	ap.X.Label.Text = "time (s)"
	ap.Y.Label.Text = "test accuracy"
	var lines, points []any
	for _, r := range runs {
		lines = append(lines, r.Backend, r.lossT)
		var acc plotter.XYs
		for i, a := range r.TestAcc {
			acc = append(acc, plotter.XY{X: r.EpochT[i], Y: a})
		}
		points = append(points, r.Backend, acc)
	}
	if err := plotutil.AddLines(lp, lines...); err != nil {
		return err
	}
	if err := plotutil.AddLinePoints(ap, points...); err != nil {
		return err
	}
	goal := plotter.NewFunction(func(float64) float64 { return target })
	goal.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	ap.Add(goal)
	for _, p := range []struct {
		p    *plot.Plot
		name string
	}{{lp, "loss.png"}, {ap, "accuracy.png"}} {
		if err := p.p.Save(16*vg.Centimeter, 11*vg.Centimeter, filepath.Join(dir, p.name)); err != nil {
			return err
		}
	}
	return nil
}

// mib prints n bytes in MiB, or "-" for none recorded.
func mib(n int64) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(n)/(1<<20))
}
