package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if ndmaDir != "" {
		os.RemoveAll(ndmaDir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

var (
	ndmaOnce sync.Once
	ndmaDir  string // holds the binary ndmaBinary built; removed by TestMain
	ndmaBin  string
	ndmaErr  error
)

// ndmaBinary builds the ndma command once for the package's tests and
// returns its path.
func ndmaBinary(t *testing.T) string {
	t.Helper()
	ndmaOnce.Do(func() {
		if ndmaDir, ndmaErr = os.MkdirTemp("", "ndma-bench-test"); ndmaErr != nil {
			return
		}
		ndmaBin = filepath.Join(ndmaDir, "ndma")
		out, err := exec.Command("go", "build", "-o", ndmaBin, "github.com/ndma/ndma/cmd/ndma").CombinedOutput()
		if err != nil {
			ndmaErr = fmt.Errorf("building ndma: %v\n%s", err, out)
		}
	})
	if ndmaErr != nil {
		t.Fatal(ndmaErr)
	}
	return ndmaBin
}

func TestParseSizes(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []int
	}{
		{"8", []int{8}},
		{"8:64", []int{8, 16, 32, 64}},
		{"8:64K", PowersOfTwo(8, 64<<10)},
		{"4K,1M", []int{4096, 1 << 20}},
		{"1m", []int{1 << 20}},
		{"6:20", []int{6, 8, 16}},
		{"64KiB, 2MB", []int{64 << 10, 2 << 20}},
		{"8,8:16", []int{8, 16}},
	} {
		got, err := ParseSizes(c.in)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("ParseSizes(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "0", "-8", "8:4", "x", "4Q", "8:", "3G", "1,,2"} {
		if _, err := ParseSizes(bad); !errors.Is(err, ErrBadValue) {
			t.Errorf("ParseSizes(%q): got %v, want ErrBadValue", bad, err)
		}
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]float64{
		"10gbit": 10e9, "100mbit": 100e6, "2.5G": 2.5e9, "1e9": 1e9, "40Gbps": 40e9, "800kbit": 800e3,
	} {
		if got, err := ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0", "-1gbit", "fast", "gbit", "NaN"} {
		if _, err := ParseRate(bad); !errors.Is(err, ErrBadValue) {
			t.Errorf("ParseRate(%q): got %v, want ErrBadValue", bad, err)
		}
	}
	if got := FormatRate(10e9); got != "10gbit" {
		t.Errorf("FormatRate(10e9) = %q", got)
	}
}

func TestParseKeyAndTests(t *testing.T) {
	if k, err := ParseKey("0xDEADbeef"); err != nil || k != 0xdeadbeef {
		t.Errorf("ParseKey: %x %v", k, err)
	}
	for _, bad := range []string{"", "0", "xyz", "0x"} {
		if _, err := ParseKey(bad); !errors.Is(err, ErrBadValue) {
			t.Errorf("ParseKey(%q): %v", bad, err)
		}
	}
	if ts, err := ParseTests("lat,bw"); err != nil || ts != TestAll {
		t.Errorf("ParseTests: %v %v", ts, err)
	}
	if _, err := ParseTests("latency,speed"); !errors.Is(err, ErrBadValue) {
		t.Errorf("ParseTests(speed): %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	for name, cfg := range map[string]Config{
		"key without server": {Key: 1},
		"server without key": {Server: "127.0.0.1:1"},
		"window":             {Window: MaxWindow + 1},
		"mtu":                {MTU: 100},
		"size over region":   {RegionSize: 4096, Sizes: []int{8192}},
		"negative iters":     {Iters: -1},
	} {
		err := Run(context.Background(), cfg, func(Result) error { return nil })
		if !errors.Is(err, ErrConfig) {
			t.Errorf("%s: got %v, want ErrConfig", name, err)
		}
	}
	for name, cfg := range map[string]SimConfig{
		"loss":    {Loss: 1},
		"latency": {Latency: -time.Second},
		"rate":    {Rate: -1},
	} {
		err := RunSim(context.Background(), cfg, func(Result) error { return nil })
		if !errors.Is(err, ErrConfig) {
			t.Errorf("sim %s: got %v, want ErrConfig", name, err)
		}
	}
}

// decodeLines parses JSON Lines into maps.
func decodeLines(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(string(b)) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func positive(m map[string]any, key string) bool {
	v, ok := m[key].(float64)
	return ok && v > 0
}

// TestRunTiny runs every loopback measurement at two sizes and checks the
// JSON rows.
func TestRunTiny(t *testing.T) {
	var buf bytes.Buffer
	jw := NewJSONWriter(&buf)
	var progress []int
	cfg := Config{Sizes: []int{8, 4096}, Iters: 20, Warmup: 2, Window: 4, RegionSize: 1 << 20,
		Progress: func(done, total int) { progress = append(progress, done, total) }}
	if err := Run(context.Background(), cfg, jw.Write); err != nil {
		t.Fatal(err)
	}
	rows := decodeLines(t, buf.Bytes())
	count := make(map[string]int)
	for _, m := range rows {
		op, _ := m["op"].(string)
		count[op]++
		if !positive(m, "size") || m["iters"] != float64(20) {
			t.Errorf("row %v: bad size or iters", m)
		}
		var keys []string
		switch op {
		case OpRead, OpWrite, OpCAS, OpFetchAdd, OpUDPPingPong, OpTCPStream:
		default:
			t.Errorf("row %v: unknown op", m)
		}
		if _, lat := m["p50_us"]; lat {
			keys = []string{"p50_us", "p99_us"}
			if _, ok := m["gbps"]; ok {
				t.Errorf("row %v has both latency and bandwidth keys", m)
			}
		} else {
			keys = []string{"gbps"}
		}
		if op != OpUDPPingPong && op != OpTCPStream {
			keys = append(keys, "ratio")
			if b, _ := m["baseline"].(string); b != OpUDPPingPong && b != OpTCPStream {
				t.Errorf("row %v: baseline %q", m, b)
			}
		}
		for _, k := range keys {
			if !positive(m, k) {
				t.Errorf("row %v: %s not positive", m, k)
			}
		}
	}
	// Latency: UDP, READ and WRITE at 2 sizes, CAS, FADD; bandwidth: TCP,
	// WRITE and READ at 2 sizes.
	want := map[string]int{OpUDPPingPong: 2, OpRead: 4, OpWrite: 4, OpCAS: 1, OpFetchAdd: 1, OpTCPStream: 2}
	for op, n := range want {
		if count[op] != n {
			t.Errorf("%d %s rows, want %d (all: %v)", count[op], op, n, count)
		}
	}
	if len(progress) != 2*len(rows) || progress[len(progress)-1] != len(rows) || progress[len(progress)-2] != len(rows) {
		t.Errorf("progress %v for %d rows", progress, len(rows))
	}
}

// TestRunTable checks the table's section headers.
func TestRunTable(t *testing.T) {
	var buf bytes.Buffer
	tw := NewTableWriter(&buf, "test")
	cfg := Config{Sizes: []int{64}, Iters: 10, Window: 2, Tests: TestLatency, RegionSize: 4096}
	if err := Run(context.Background(), cfg, tw.Write); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, s := range []string{"# UDP ping-pong latency", "# NDMA READ latency (test)", "# NDMA WRITE latency", "# NDMA CAS latency", "# NDMA FETCH-ADD latency", "  64 "} {
		if !strings.Contains(out, s) {
			t.Errorf("table lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "bandwidth") {
		t.Errorf("latency-only run printed bandwidth:\n%s", out)
	}
}

// TestRunCanceled checks that a canceled context stops a run.
func TestRunCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	err := Run(ctx, Config{Sizes: []int{8}, Iters: 5, RegionSize: 4096}, func(Result) error {
		n++
		cancel()
		return nil
	})
	if !errors.Is(err, context.Canceled) || n != 1 {
		t.Fatalf("got %v after %d rows", err, n)
	}
}

// TestRunSimDeterministic runs the simulated WRITE goodput twice with one
// seed and checks the results agree exactly, and that loss costs goodput.
func TestRunSimDeterministic(t *testing.T) {
	cfg := SimConfig{Sizes: []int{64 << 10, 1 << 20}, Iters: 24, Loss: 0.02, Seed: 7}
	run := func() []Result {
		var rs []Result
		if err := RunSim(context.Background(), cfg, func(r Result) error { rs = append(rs, r); return nil }); err != nil {
			t.Fatalf("seed %d: %v", cfg.Seed, err)
		}
		return rs
	}
	a, b := run(), run()
	if len(a) != 4 {
		t.Fatalf("%d rows, want 4 (2 sizes, lossless and lossy)", len(a))
	}
	if !slices.Equal(a, b) {
		t.Fatalf("seed %d: runs differ:\n%+v\n%+v", cfg.Seed, a, b)
	}
	for _, r := range a {
		if !r.Sim || r.Gbps <= 0 || r.Gbps > 10 || r.Virtual <= 0 {
			t.Errorf("row %+v", r)
		}
		if r.Loss > 0 && (r.Baseline != "lossless" || r.Ratio <= 0 || r.Ratio > 1.01) {
			t.Errorf("lossy row %+v: want a ratio to the lossless run", r)
		}
	}
	var buf bytes.Buffer
	for _, r := range a {
		if err := NewJSONWriter(&buf).Write(r); err != nil {
			t.Fatal(err)
		}
	}
	rows := decodeLines(t, buf.Bytes())
	if rows[3]["op"] != "write" || rows[3]["loss"] != 0.02 || !positive(rows[3], "gbps") || !positive(rows[3], "ratio") {
		t.Errorf("json row %v", rows[3])
	}
	if _, ok := rows[0]["loss"]; !ok {
		t.Errorf("lossless sim row lacks loss: %v", rows[0])
	}
}

func TestPercentiles(t *testing.T) {
	var s []time.Duration
	for i := 100; i >= 1; i-- {
		s = append(s, time.Duration(i))
	}
	if p50, p99 := percentiles(s); p50 != 50 || p99 != 99 {
		t.Fatalf("p50 %v p99 %v", p50, p99)
	}
	if p50, p99 := percentiles([]time.Duration{7}); p50 != 7 || p99 != 7 {
		t.Fatalf("single: %v %v", p50, p99)
	}
}

// BenchmarkRead64 measures 64-byte READs against an in-process node.
func BenchmarkRead64(b *testing.B) {
	node, err := StartNode(1<<20, DefaultMTU)
	if err != nil {
		b.Fatal(err)
	}
	defer node.Close()
	cli, err := StartNode(8, DefaultMTU)
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	remote, err := cli.EP.Dial(ctx, node.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 64)
	b.SetBytes(64)
	for b.Loop() {
		if err := remote.Read(ctx, node.Key, 0, buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSimWrite1M measures how fast the simulator runs 1 MiB WRITEs
// (wall time per simulated operation).
func BenchmarkSimWrite1M(b *testing.B) {
	cfg := SimConfig{Sizes: []int{1 << 20}, Iters: 16}
	cfg.setDefaults()
	b.SetBytes(16 << 20)
	for b.Loop() {
		if _, err := simWrite(cfg, 1<<20, 0.01); err != nil {
			b.Fatal(err)
		}
	}
}
