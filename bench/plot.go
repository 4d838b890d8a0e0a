package bench

import (
	"fmt"
	"image/color"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Size of each plot image.
const plotWidth, plotHeight = 16 * vg.Centimeter, 11 * vg.Centimeter

// WriteSuitePlots writes two PNG plots per operation of rows into dir and
// returns their paths: <op>-latency.png, average latency against message
// size per algorithm on log-log axes with the S/B bound drawn dashed, and
// <op>-cpu.png, CPU per call (SuiteRow.CPUPerCallUS) against size per
// algorithm. An operation without sizes (Barrier) gets bar charts, one bar
// per algorithm, instead. Points that are zero (CPU below one clock tick)
// cannot be drawn on a log axis and are left out.
func WriteSuitePlots(dir string, rows []SuiteRow) ([]string, error) {
	var ops []string
	byOp := map[string][]SuiteRow{}
	for _, r := range rows {
		if _, ok := byOp[r.Op]; !ok {
			ops = append(ops, r.Op)
		}
		byOp[r.Op] = append(byOp[r.Op], r)
	}
	var files []string
	for _, op := range ops {
		rs := byOp[op]
		sized := false
		for _, r := range rs {
			if r.Size > 0 && op != string(OpDDP) {
				sized = true
			}
		}
		lat := func(r SuiteRow) float64 { return r.AvgUS }
		cpu := func(r SuiteRow) float64 { return r.CPUPerCallUS }
		if op == string(OpDDP) { // steps of seconds: in milliseconds
			lat = func(r SuiteRow) float64 { return r.AvgUS / 1e3 }
			cpu = func(r SuiteRow) float64 { return r.CPUPerCallUS / 1e3 }
		}
		var pl, pc *plot.Plot
		var err error
		if sized {
			if pl, err = sizePlot(rs, lat, true); err == nil {
				pc, err = sizePlot(rs, cpu, false)
			}
		} else {
			if pl, err = barPlot(rs, lat); err == nil {
				pc, err = barPlot(rs, cpu)
			}
		}
		if err != nil {
			return files, fmt.Errorf("bench: plotting %s: %w", op, err)
		}
		n := rs[0].Ranks
		pl.Title.Text = fmt.Sprintf("%s latency, %d ranks", op, n)
		pl.Y.Label.Text = "average latency (µs)"
		pc.Title.Text = fmt.Sprintf("%s CPU per call, ranks + switch, %d ranks", op, n)
		pc.Y.Label.Text = "CPU per call (µs)"
		if op == string(OpDDP) {
			pl.Title.Text = fmt.Sprintf("DDP training step, %d ranks", n)
			pl.Y.Label.Text = "average step (ms)"
			pc.Title.Text = fmt.Sprintf("DDP CPU per step, ranks (training loop) + switch, %d ranks", n)
			pc.Y.Label.Text = "CPU per step (ms)"
		}
		for _, p := range []struct {
			plot *plot.Plot
			name string
		}{{pl, op + "-latency.png"}, {pc, op + "-cpu.png"}} {
			path := filepath.Join(dir, p.name)
			if err := p.plot.Save(plotWidth, plotHeight, path); err != nil {
				return files, fmt.Errorf("bench: %w", err)
			}
			files = append(files, path)
		}
	}
	return files, nil
}

// sizePlot plots y(row) against size, a line per algorithm, on log-log
// axes; with bound, also the S/B bound.
func sizePlot(rows []SuiteRow, y func(SuiteRow) float64, bound bool) (*plot.Plot, error) {
	p := plot.New()
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	p.X.Label.Text = "message size per rank (bytes)"
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	var algos []string
	byAlgo := map[string]plotter.XYs{}
	var bxy plotter.XYs
	seen := map[int]bool{}
	for _, r := range rows {
		if r.Size <= 0 {
			continue
		}
		if _, ok := byAlgo[r.Algo]; !ok {
			algos = append(algos, r.Algo)
			byAlgo[r.Algo] = plotter.XYs{}
		}
		if v := y(r); v > 0 {
			byAlgo[r.Algo] = append(byAlgo[r.Algo], plotter.XY{X: float64(r.Size), Y: v})
		}
		if bound && r.BoundUS > 0 && !seen[r.Size] {
			seen[r.Size] = true
			bxy = append(bxy, plotter.XY{X: float64(r.Size), Y: r.BoundUS})
		}
	}
	var vs []any
	for _, a := range algos {
		if len(byAlgo[a]) > 0 {
			vs = append(vs, a, byAlgo[a])
		}
	}
	if err := plotutil.AddLinePoints(p, vs...); err != nil {
		return nil, err
	}
	if len(bxy) > 0 {
		l, err := plotter.NewLine(bxy)
		if err != nil {
			return nil, err
		}
		l.Color = color.Gray{Y: 80}
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(l)
		p.Legend.Add("S/B bound", l)
	}
	return p, nil
}

// barPlot draws y(row) as one bar per algorithm.
func barPlot(rows []SuiteRow, y func(SuiteRow) float64) (*plot.Plot, error) {
	p := plot.New()
	vals := make(plotter.Values, len(rows))
	names := make([]string, len(rows))
	for i, r := range rows {
		vals[i], names[i] = y(r), r.Algo
	}
	b, err := plotter.NewBarChart(vals, vg.Points(30))
	if err != nil {
		return nil, err
	}
	b.Color = plotutil.Color(0)
	p.Add(plotter.NewGrid(), b)
	p.NominalX(names...)
	p.X.Label.Text = "algorithm"
	return p, nil
}
