package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ndma/ndma/testbed"
)

// TestRunMQTestbed runs the message queue benchmark across a testbed of
// network namespaces: a producer in the first host and a subscriber in
// each of two more, against NDMA's queue (pushed and pulled, on the
// testbed's switch and memory node, sealed under credentials the run
// issues) and, where installed, Redis and NATS on the first host. With
// one request in flight every row must deliver every acknowledged
// record to both subscribers, in order, and carry the fidelity
// monitor's verdict and each server's CPU; nothing the run started may
// be left running.
func TestRunMQTestbed(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a testbed of network namespaces and runs the queue's processes on it")
	}
	prefix := fmt.Sprintf("ndmamq%d", os.Getpid()%100000)
	if err := testbed.Check(t.Context(), prefix); err != nil {
		t.Skipf("no testbed here: %v", err)
	}
	bin := ndmaBinary(t)
	targets := []string{MQPush, MQNative}
	for _, p := range []struct{ target, server string }{{MQRedis, "redis-server"}, {MQNATS, "nats-server"}} {
		if _, err := exec.LookPath(p.server); err == nil {
			targets = append(targets, p.target)
		} else {
			t.Logf("%s is not installed: the %s row is not run", p.server, p.target)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	st, err := testbed.Up(ctx, testbed.Config{Prefix: prefix, Hosts: 3, MemNodes: 1, Rate: "100mbit", MTU: 9000,
		StateDir: filepath.Join(t.TempDir(), "state"), Binary: bin})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := testbed.DownAt(context.Background(), filepath.Dir(st.Dir), prefix); err != nil {
			t.Error(err)
		}
	}()
	if st.Secret == "" {
		t.Fatal("the testbed runs without credentials: the run would not be sealed")
	}
	const records, subscribers = 400, 2
	var rows []MQResult
	progress := 0
	err = RunMQ(ctx, MQConfig{Binary: bin, Testbed: st, Targets: targets, Subscribers: subscribers, RecordSize: 1000,
		Batch: 8, InFlight: 1, Records: records, Retain: 1 << 20, Progress: func(done, _ int) { progress = max(progress, done) }},
		func(r MQResult) error {
			rows = append(rows, r)
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(targets) {
		t.Fatalf("%d rows for %d targets", len(rows), len(targets))
	}
	for i, r := range rows {
		t.Logf("%+v", r)
		if r.Target != targets[i] || r.Produced != records || r.Delivered != r.Produced*subscribers ||
			r.Errors != 0 || r.OutOfOrder != 0 || r.Wrong != 0 {
			t.Errorf("row %d: counts %+v", i, r)
		}
		if r.ProducedPerSec <= 0 || r.DeliveredPerSec <= 0 || r.AckP50 <= 0 || r.EndToEndP50 <= 0 || r.ClientCPU <= 0 {
			t.Errorf("row %d: rates, latencies or CPU missing: %+v", i, r)
		}
		if r.Hosts != 3 || r.RateBits != 100e6 || r.Fidelity == nil || r.Fidelity.Class == "" || r.Fidelity.Window == nil {
			t.Errorf("row %d: testbed or verdict missing: %+v", i, r)
		}
		want := []string{"memd", "switch"}
		switch r.Target {
		case MQRedis:
			want = []string{"redis-server"}
		case MQNATS:
			want = []string{"nats-server"}
		}
		for _, p := range want {
			if _, ok := r.Processes[p]; !ok {
				t.Errorf("row %d: no CPU of %s: %v", i, p, r.Processes)
			}
		}
		if len(r.Processes) != len(want) {
			t.Errorf("row %d: CPU of %v, want %v", i, r.Processes, want)
		}
	}
	if progress == 0 {
		t.Error("no progress reported")
	}
	for _, pat := range []string{"mq-agent", "redis-server --port", "nats-server --addr"} {
		if out, _ := exec.Command("pgrep", "-af", pat).Output(); strings.Contains(string(out), prefix) || strings.Contains(string(out), "10.77.") {
			t.Errorf("left running: %s", out)
		}
	}
}

// TestRunMQTestbedRefusals: a testbed too small for the run, or without
// memory nodes for NDMA's queue, and the Kafka front end are refused
// before anything starts.
func TestRunMQTestbedRefusals(t *testing.T) {
	st := &testbed.State{Prefix: "x", Hosts: make([]testbed.Node, 3)}
	for _, c := range []struct {
		cfg  MQConfig
		want string
	}{
		{MQConfig{Binary: "ndma", Testbed: st, Targets: []string{MQRedis}, Subscribers: 3}, "3 subscribers need 4 hosts"},
		{MQConfig{Binary: "ndma", Testbed: st, Targets: []string{MQPush}, Subscribers: 2}, "memory nodes"},
		{MQConfig{Binary: "ndma", Testbed: st, Targets: []string{MQKafka}}, "loopback only"},
		{MQConfig{Testbed: st, Targets: []string{MQRedis}}, "no ndma binary"},
		{MQConfig{Binary: "ndma", Testbed: st, Targets: []string{MQRedis}, Subscribers: 2, BrokerApart: true}, "a broker apart need 4 hosts"},
		{MQConfig{Binary: "ndma", Targets: []string{MQRedis}, BrokerApart: true}, "a broker apart is for a testbed run"},
		{MQConfig{Binary: "ndma", Testbed: st, Targets: []string{MQNative}, Copies: 3}, "3 copies"},
	} {
		err := RunMQ(t.Context(), c.cfg, func(MQResult) error { t.Fatal("a row"); return nil })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg.Targets, err, c.want)
		}
	}
}

// TestMQAgentSpec: an agent refuses a missing or malformed spec, and a
// role it does not know, with an error.
func TestMQAgentSpec(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "no spec"},
		{"{not json\n", "spec"},
		{`{"role":"judge","target":"redis","config":{"Binary":"x"},"addr":"127.0.0.1:1"}` + "\n", `role "judge"`},
		{`{"role":"producer","target":"kafka","config":{"Binary":"x"}}` + "\n", "target"},
		{`{"role":"producer","target":"redis","config":{"Binary":"x","RecordSize":1}}` + "\n", "records of 1 bytes"},
	} {
		err := RunMQAgent(t.Context(), strings.NewReader(c.in), &strings.Builder{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.in, err, c.want)
		}
	}
}
