package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Op names, as they appear in Result.Op and in the JSON output.
const (
	OpRead        = "read"
	OpWrite       = "write"
	OpCAS         = "cas"
	OpFetchAdd    = "fadd"
	OpUDPPingPong = "udp_pingpong" // baseline for latency rows
	OpTCPStream   = "tcp_stream"   // baseline for bandwidth rows
)

// Kind says what a Result measured.
type Kind uint8

// Result kinds.
const (
	Latency   Kind = iota + 1 // one operation in flight; P50 and P99 are set
	Bandwidth                 // a window of operations in flight; Gbps is set
)

// Result is one measurement: one operation at one size.
type Result struct {
	Kind  Kind
	Op    string // OpRead, OpWrite, OpCAS, OpFetchAdd, OpUDPPingPong or OpTCPStream
	Size  int    // payload bytes per operation (per datagram for OpUDPPingPong, per write call for OpTCPStream)
	Iters int    // operations measured, warm-up excluded

	// Latency rows.
	P50, P99 time.Duration
	// CPU is the process's CPU time (user and system, every thread) per
	// measured operation of a latency row: the client's, plus the
	// in-process memory node's or echo's when the row runs one. Zero
	// where it was not measured.
	CPU time.Duration
	// P99Ratio is P99 over the baseline's P99 (latency rows with a
	// baseline).
	P99Ratio float64

	// Bandwidth rows: goodput in Gbit/s (payload bits per second, 10^9).
	Gbps float64
	// Window is the number of operations kept in flight (bandwidth rows
	// of NDMA operations; zero for baselines).
	Window int

	// Ratio is this row's figure over its baseline's: P50 over the
	// baseline's P50 for latency rows, Gbps over the baseline's Gbps for
	// bandwidth rows. Zero means no baseline.
	Ratio float64
	// Baseline names the row the ratio is against ("udp_pingpong",
	// "tcp_stream", "lossless"); empty without a ratio.
	Baseline string
	// BaselineValue is the baseline's P50 in µs (latency) or Gbit/s
	// (bandwidth), for the table; zero without a baseline.
	BaselineValue float64

	// Sim is set for rows measured on netio/simnet: goodput is in virtual
	// time, and Loss is the links' random loss probability.
	Sim  bool
	Loss float64
	// Virtual is the virtual time the simulated transfer took.
	Virtual time.Duration
	// Nodes is, for pool rows, the memory nodes the region spans.
	Nodes int
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// round keeps digits significant digits so the JSON stays readable.
func round(v float64, digits int) float64 {
	r, err := strconv.ParseFloat(strconv.FormatFloat(v, 'g', digits, 64), 64)
	if err != nil {
		return v
	}
	return r
}

type latencyJSON struct {
	Op       string  `json:"op"`
	Size     int     `json:"size"`
	Iters    int     `json:"iters"`
	P50      float64 `json:"p50_us"`
	P99      float64 `json:"p99_us"`
	CPU      float64 `json:"cpu_us,omitempty"`
	Ratio    float64 `json:"ratio,omitempty"`
	P99Ratio float64 `json:"p99_ratio,omitempty"`
	Baseline string  `json:"baseline,omitempty"`
}

type bandwidthJSON struct {
	Op       string   `json:"op"`
	Size     int      `json:"size"`
	Iters    int      `json:"iters"`
	Gbps     float64  `json:"gbps"`
	Ratio    float64  `json:"ratio,omitempty"`
	Baseline string   `json:"baseline,omitempty"`
	Sim      bool     `json:"sim,omitempty"`
	Loss     *float64 `json:"loss,omitempty"`
	Nodes    int      `json:"nodes,omitempty"`
}

// MarshalJSON writes the row with the keys op, size and iters, then
// p50_us, p99_us and cpu_us (latency) or gbps (bandwidth), then ratio
// (and p99_ratio) and baseline
// when there is a baseline, and sim and loss for simulated rows.
func (r Result) MarshalJSON() ([]byte, error) {
	if r.Kind == Latency {
		return json.Marshal(latencyJSON{
			Op: r.Op, Size: r.Size, Iters: r.Iters,
			P50: round(us(r.P50), 5), P99: round(us(r.P99), 5), CPU: round(us(r.CPU), 4),
			Ratio: round(r.Ratio, 4), P99Ratio: round(r.P99Ratio, 4), Baseline: r.Baseline,
		})
	}
	j := bandwidthJSON{
		Op: r.Op, Size: r.Size, Iters: r.Iters, Gbps: round(r.Gbps, 5),
		Ratio: round(r.Ratio, 4), Baseline: r.Baseline, Sim: r.Sim, Nodes: r.Nodes,
	}
	if r.Sim {
		loss := r.Loss
		j.Loss = &loss
	}
	return json.Marshal(j)
}

// JSONWriter writes Results as JSON Lines, one object per Result.
type JSONWriter struct {
	enc *json.Encoder
}

// NewJSONWriter returns a JSONWriter writing to w.
func NewJSONWriter(w io.Writer) *JSONWriter { return &JSONWriter{enc: json.NewEncoder(w)} }

// Write writes one line.
func (j *JSONWriter) Write(r Result) error { return j.enc.Encode(r) }

// TableWriter writes Results as OSU-style tables: a "# NDMA READ latency"
// header whenever the operation or kind changes, then one aligned line per
// size.
type TableWriter struct {
	w       io.Writer
	context string // appended to each section title, e.g. "loopback, MTU 65000"
	lastOp  string
	lastK   Kind
	lastSim bool
	lastL   float64
	lastN   int
	err     error
}

// NewTableWriter returns a TableWriter writing to w. context, if not
// empty, is printed after each section title in parentheses.
func NewTableWriter(w io.Writer, context string) *TableWriter {
	return &TableWriter{w: w, context: context}
}

func (t *TableWriter) printf(format string, a ...any) {
	if t.err == nil {
		_, t.err = fmt.Fprintf(t.w, format, a...)
	}
}

func title(r Result) string {
	switch r.Op {
	case OpUDPPingPong:
		return "UDP ping-pong latency (baseline, loopback)"
	case OpTCPStream:
		return "TCP stream bandwidth (baseline, loopback, one connection)"
	}
	name := strings.ToUpper(r.Op)
	switch r.Op {
	case OpFetchAdd:
		name = "FETCH-ADD"
	case OpPoolRead:
		name = "pool READ"
	case OpPoolWrite:
		name = "pool WRITE"
	}
	if r.Nodes > 0 {
		return fmt.Sprintf("NDMA %s bandwidth, sequential, region over %d memory node%s", name, r.Nodes, map[bool]string{true: "", false: "s"}[r.Nodes == 1])
	}
	if r.Kind == Latency {
		return "NDMA " + name + " latency"
	}
	s := "NDMA " + name + " bandwidth"
	if r.Window > 0 {
		s += fmt.Sprintf(", window %d", r.Window)
	}
	if r.Sim {
		s += fmt.Sprintf(", simnet, loss %g", r.Loss)
	}
	return s
}

// Write prints r, preceded by a section header if it starts a new section.
// It returns the first write error.
func (t *TableWriter) Write(r Result) error {
	if r.Op != t.lastOp || r.Kind != t.lastK || r.Sim != t.lastSim || r.Loss != t.lastL || r.Nodes != t.lastN {
		if t.lastOp != "" {
			t.printf("\n")
		}
		t.lastOp, t.lastK, t.lastSim, t.lastL, t.lastN = r.Op, r.Kind, r.Sim, r.Loss, r.Nodes
		ctx := ""
		if t.context != "" && r.Op != OpUDPPingPong && r.Op != OpTCPStream {
			ctx = " (" + t.context + ")"
		}
		t.printf("# %s%s\n", title(r), ctx)
		switch {
		case r.Kind == Latency:
			t.printf("# %-10s %8s %12s %12s %12s %14s %8s %10s\n", "Size", "Iters", "p50 (us)", "p99 (us)", "CPU/op (us)", "base p50 (us)", "ratio", "p99 ratio")
		case r.Sim:
			t.printf("# %-10s %8s %12s %14s %14s %8s\n", "Size", "Iters", "Gbit/s", "virtual time", "base Gbit/s", "ratio")
		default:
			t.printf("# %-10s %8s %12s %14s %8s\n", "Size", "Iters", "Gbit/s", "base Gbit/s", "ratio")
		}
	}
	base, ratio, p99ratio, cpu := "-", "-", "-", "-"
	if r.CPU > 0 {
		cpu = fmt.Sprintf("%.2f", us(r.CPU))
	}
	if r.P99Ratio > 0 {
		p99ratio = fmt.Sprintf("%.2fx", r.P99Ratio)
	}
	if r.Baseline != "" {
		base = fmt.Sprintf("%.3f", r.BaselineValue)
		if r.Kind == Latency {
			base = fmt.Sprintf("%.2f", r.BaselineValue)
		}
		ratio = fmt.Sprintf("%.2fx", r.Ratio)
	}
	switch {
	case r.Kind == Latency:
		t.printf("  %-10s %8d %12.2f %12.2f %12s %14s %8s %10s\n", FormatSize(r.Size), r.Iters, us(r.P50), us(r.P99), cpu, base, ratio, p99ratio)
	case r.Sim:
		t.printf("  %-10s %8d %12.3f %14v %14s %8s\n", FormatSize(r.Size), r.Iters, r.Gbps, r.Virtual.Round(time.Microsecond), base, ratio)
	default:
		t.printf("  %-10s %8d %12.3f %14s %8s\n", FormatSize(r.Size), r.Iters, r.Gbps, base, ratio)
	}
	return t.err
}
