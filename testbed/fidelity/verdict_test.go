package fidelity

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// replay feeds a recording of testdata (see testdata/README.md) to a
// Recorder the way a Monitor does, for a 2-host testbed whose links run
// at rate bits per second; maxSamples bounds the Recorder.
func replay(t *testing.T, name string, rate uint64, maxSamples int) *Recorder {
	t.Helper()
	dir := filepath.Join("testdata", name)
	var links []Link
	for _, h := range []string{"h0", "h1"} {
		links = append(links,
			Link{Name: "sw→" + h, Port: h, RateBits: rate, NS: "fidcap-sw", Dev: h},
			Link{Name: h + "→sw", Port: h, Up: true, RateBits: rate, NS: "fidcap-" + h, Dev: "eth0"})
	}
	r := NewRecorder(links, maxSamples)
	read := func(f string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if err := r.Qdiscs(false, "fidcap-sw", read("tc-start.json")); err != nil {
		t.Fatal(err)
	}
	for _, rec := range strings.Split(string(read("samples.txt")), "# at ")[1:] {
		head, body, _ := strings.Cut(rec, "\n")
		us, err := strconv.ParseInt(strings.TrimSuffix(head, "us"), 10, 64)
		if err != nil {
			t.Fatalf("%s: sample %q: %v", name, head, err)
		}
		stat, netdev, ok := strings.Cut(strings.TrimPrefix(body, "== stat\n"), "== net/dev\n")
		if !ok {
			t.Fatalf("%s: sample at %s: no net/dev", name, head)
		}
		if err := r.Sample(time.Duration(us)*time.Microsecond, []byte(stat), []byte(netdev)); err != nil {
			t.Fatalf("%s: sample at %s: %v", name, head, err)
		}
	}
	cpu := func(f string, children bool) float64 {
		s, c, err := ParseProcStat(read(f))
		if err != nil {
			t.Fatal(err)
		}
		if children {
			return float64(c) / ClockTicks
		}
		return float64(s) / ClockTicks
	}
	r.ProcessCPU("ranks", cpu("self-end.stat", true)-cpu("self-start.stat", true))
	r.ProcessCPU("switch", cpu("switch-end.stat", false)-cpu("switch-start.stat", false))
	if err := r.Qdiscs(true, "fidcap-sw", read("tc-end.json")); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestJudgeRecorded: the recorded faithful job is accepted and the
// CPU-bound ones are recognised, each for the reason its evidence gives.
func TestJudgeRecorded(t *testing.T) {
	for _, c := range []struct {
		name   string
		rate   uint64
		class  Class
		judged bool // the link
	}{
		{"faithful", 20e6, Faithful, true},
		{"cpubound", 4e9, CPUBound, false},
		{"bulkcpu", 1e9, CPUBound, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, err := replay(t, c.name, c.rate, 0).Judge(Rule{})
			if err != nil {
				t.Fatal(err)
			}
			if v.Class != c.class || v.Faithful != (c.class == Faithful) {
				t.Errorf("class %s (faithful %v), want %s: %s", v.Class, v.Faithful, c.class, v.Reason)
			}
			checkVerdict(t, v)
			if l := v.Link; l == nil || l.Judged != c.judged || l.Bytes == 0 {
				t.Errorf("link %+v, want one judged %v", l, c.judged)
			}
			if d := v.Details(); !strings.Contains(d, "ranks ") || !strings.Contains(d, "switch ") || !strings.Contains(d, "bottleneck link "+v.Link.Name) {
				t.Errorf("details %q lack the roles or the link", d)
			}
			if c.class == CPUBound && !strings.Contains(v.Reason, "of the machine's CPU (limit 60%)") {
				t.Errorf("reason %q does not give the CPU share against the limit", v.Reason)
			}
		})
	}
}

// checkVerdict checks that v's figures add up.
func checkVerdict(t *testing.T, v Verdict) {
	t.Helper()
	sum := v.SoftirqS
	for _, s := range v.ProcessS {
		sum += s
	}
	if math.Abs(sum-v.TestbedS) > 1e-9 || v.MachineS <= 0 || math.Abs(v.CPUShare-v.TestbedS/v.MachineS) > 1e-9 {
		t.Errorf("testbed %v s (processes and softirq: %v s), machine %v s, share %v: do not add up", v.TestbedS, sum, v.MachineS, v.CPUShare)
	}
	// The machine had at most its 2 CPUs for the wall time, to a tick
	// of each at either end.
	if v.MachineS > 2*v.WallS+4.0/ClockTicks || v.BusyS > v.MachineS+*v.StealS {
		t.Errorf("machine %v s, busy %v s over %v s of wall time on 2 CPUs", v.MachineS, v.BusyS, v.WallS)
	}
	if l := v.Link; l != nil && (l.TransferS > v.WallS+1e-9 || l.Busy < 0) {
		t.Errorf("link transfer %v s in a job of %v s, busy %v", l.TransferS, v.WallS, l.Busy)
	}
}

// TestJudgeRule: the rule's limits decide on the same recordings: a
// limit under the faithful job's share makes it CPU-bound, and with the
// CPU allowed all the machine the bulk job is still not faithful, for
// its idle link.
func TestJudgeRule(t *testing.T) {
	faithful := replay(t, "faithful", 20e6, 0)
	v, err := faithful.Judge(Rule{})
	if err != nil {
		t.Fatal(err)
	}
	tight, err := faithful.Judge(Rule{MaxCPUShare: v.CPUShare * 0.9})
	if err != nil || tight.Class != CPUBound {
		t.Errorf("limit under the share %.3f: %s, %v", v.CPUShare, tight.Class, err)
	}
	strict, err := faithful.Judge(Rule{MinBusy: 1})
	if err != nil || strict.Class != LinkIdle || v.Link.Busy >= 1 {
		t.Errorf("link busy %.3f, with MinBusy 1: %s, %v", v.Link.Busy, strict.Class, err)
	}
	bulk, err := replay(t, "bulkcpu", 1e9, 0).Judge(Rule{MaxCPUShare: 1})
	if err != nil {
		t.Fatal(err)
	}
	if bulk.CPUShare <= 1 && (bulk.Class != LinkIdle || !strings.Contains(bulk.Reason, "busy")) {
		t.Errorf("bulk job, CPU allowed: %s: %s", bulk.Class, bulk.Reason)
	}
	for _, bad := range []Rule{{MaxCPUShare: -0.1}, {MinBusy: 1.5}, {ActiveShare: 2}, {MinTransfer: -time.Second}} {
		if _, err := faithful.Judge(bad); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

// TestRecorderBound: a Recorder bounded to a few samples gives the same
// totals as one that kept every sample.
func TestRecorderBound(t *testing.T) {
	all, err := replay(t, "faithful", 20e6, 0).Judge(Rule{})
	if err != nil {
		t.Fatal(err)
	}
	r := replay(t, "faithful", 20e6, 5)
	if len(r.samples) > 5 {
		t.Fatalf("%d samples kept, bound 5", len(r.samples))
	}
	few, err := r.Judge(Rule{})
	if err != nil {
		t.Fatal(err)
	}
	if few.WallS != all.WallS || few.MachineS != all.MachineS || few.CPUShare != all.CPUShare ||
		few.MaxRunQueue != all.MaxRunQueue || few.Link.Bytes != all.Link.Bytes || few.Link.Name != all.Link.Name {
		t.Errorf("bounded %+v, want the totals of %+v", few, all)
	}
}

// TestJudgeArithmetic: a job made up by hand, every figure computed
// here from the readings.
func TestJudgeArithmetic(t *testing.T) {
	stat := func(user, system, idle, softirq, steal, running int) []byte {
		return fmt.Appendf(nil, "cpu  %d 0 %d %d 0 0 %d %d 0 0\ncpu0 0 0 0 0 0 0 0 0 0 0\ncpu1 0 0 0 0 0 0 0 0 0 0\nprocs_running %d\n",
			user, system, idle, softirq, steal, running)
	}
	netdev := func(tx uint64) []byte {
		return fmt.Appendf(nil, "Inter-|\n face |\n    h0: 0 0 0 0 0 0 0 0 %d 0 0 0 0 0 0 0\n", tx)
	}
	// 8 Mbit/s: 1 MB a second. The link carries 1 MB, then 0.5 MB, then
	// 20 kB (2% of its rate: not part of the transfer).
	r := NewRecorder([]Link{{Name: "sw→h0", Port: "h0", RateBits: 8e6}}, 0)
	for i, s := range []struct {
		user, system, idle, softirq, steal, running int
		tx                                          uint64
	}{{0, 0, 0, 0, 0, 1, 0}, {50, 20, 120, 5, 5, 5, 1e6}, {80, 40, 250, 10, 20, 2, 1.5e6}, {100, 50, 400, 20, 30, 1, 1.52e6}} {
		if err := r.Sample(time.Duration(i)*time.Second, stat(s.user, s.system, s.idle, s.softirq, s.steal, s.running), netdev(s.tx)); err != nil {
			t.Fatal(err)
		}
	}
	r.ProcessCPU("ranks", 1)
	r.ProcessCPU("switch", 0.5)
	r.SwitchCPU(0.5)
	v, err := r.Judge(Rule{})
	if err != nil {
		t.Fatal(err)
	}
	if v.SwitchS != nil {
		t.Errorf("one switch process: SwitchS %v, want none", v.SwitchS)
	}
	// Machine: 600 ticks, 30 stolen: 5.7 s; testbed 1.5 s + 0.2 s softirq.
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if !near(v.MachineS, 5.7) || !near(v.TestbedS, 1.7) || !near(v.CPUShare, 1.7/5.7) || !near(*v.StealS, 0.3) ||
		!near(v.BusyS, 1.7) || !near(v.WallS, 3) || v.MaxRunQueue != 2 {
		t.Errorf("CPU: %+v", v)
	}
	l := v.Link
	if l.Bytes != 1.52e6 || !near(l.LineS, 1.52) || !near(l.TransferS, 2) || !near(l.Busy, 0.75) || !l.Judged {
		t.Errorf("link: %+v", l)
	}
	if v.Class != LinkIdle || v.Faithful {
		t.Errorf("busy 75%%: %s", v.Class)
	}
	if err := r.Sample(time.Second, stat(0, 0, 0, 0, 0, 1), netdev(0)); err == nil {
		t.Error("a sample out of time order: no error")
	}
	if err := r.Sample(4*time.Second, stat(0, 0, 0, 0, 0, 1), []byte("h\nh\n  h1: 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n")); err == nil {
		t.Error("no counters of the link's port: no error")
	}
	if _, err := NewRecorder(nil, 0).Judge(Rule{}); err == nil {
		t.Error("no samples: no error")
	}
	// Two switch processes: each one's CPU, in order.
	r.SwitchCPU(0.25)
	if v, err := r.Judge(Rule{}); err != nil || len(v.SwitchS) != 2 || v.SwitchS[0] != 0.5 || v.SwitchS[1] != 0.25 {
		t.Errorf("two switch processes: SwitchS %v, %v; want [0.5 0.25]", v.SwitchS, err)
	}
}
