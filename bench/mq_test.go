package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestRunMQProcesses runs a bounded message queue benchmark against
// NDMA's queue, pulled and pushed (its processes started from the ndma
// binary built here)
// and, where installed, redis-server and nats-server: 2 producers of
// 150 records each over 2 partitions, 3 subscribers. One request in
// flight per producer keeps every queue's records in order, so each
// row must deliver every acknowledged record to every subscriber, in
// order, none wrong, with the latencies and every process's CPU.
func TestRunMQProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds ndma and starts its daemons")
	}
	bin := ndmaBinary(t)
	targets := []string{MQNative, MQPush, MQKafka}
	for _, p := range []struct{ target, server string }{{MQRedis, "redis-server"}, {MQNATS, "nats-server"}} {
		if _, err := exec.LookPath(p.server); err == nil {
			targets = append(targets, p.target)
		} else {
			t.Logf("%s is not installed: the %s row is not run", p.server, p.target)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const producers, records, subscribers = 2, 150, 3
	var rows []MQResult
	err := RunMQ(ctx, MQConfig{Binary: bin, Targets: targets, Producers: producers, Subscribers: subscribers, Partitions: 2,
		RecordSize: 200, Batch: 8, InFlight: 1, Records: records, Retain: 1 << 20}, func(r MQResult) error {
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
		if r.Target != targets[i] || r.Produced != producers*records || r.Delivered != r.Produced*subscribers ||
			r.Errors != 0 || r.OutOfOrder != 0 || r.Wrong != 0 {
			t.Errorf("row %d: counts %+v", i, r)
		}
		if r.ProducedPerSec <= 0 || r.DeliveredPerSec <= 0 || r.AckP50 <= 0 || r.AckP99 < r.AckP50 ||
			r.EndToEndP50 <= 0 || r.EndToEndP99 < r.EndToEndP50 || r.ClientCPU <= 0 || r.ServerCPU < 0 {
			t.Errorf("row %d: rates, latencies or CPU missing: %+v", i, r)
		}
		// /proc counts the servers' CPU in clock ticks (10 ms): in a run
		// this short a server may show none, but every one is there.
		want := []string{"switch", "memd0", "memd1"}
		switch r.Target {
		case MQKafka:
			want = append(want, "mq-serve")
		case MQRedis:
			want = []string{"redis-server"}
		case MQNATS:
			want = []string{"nats-server"}
		}
		for _, p := range want {
			if v, ok := r.Processes[p]; !ok || v < 0 {
				t.Errorf("row %d: no CPU of %s: %v", i, p, r.Processes)
			}
		}
		if len(r.Processes) != len(want) {
			t.Errorf("row %d: CPU of %v, want %v", i, r.Processes, want)
		}
	}
	if out, _ := exec.Command("pgrep", "-f", bin).Output(); len(out) > 0 {
		t.Fatalf("daemons left running: %s", out)
	}
}

// TestRunMQMissingServer: a peer's server that is not installed fails
// the run, naming the Debian package to install.
func TestRunMQMissingServer(t *testing.T) {
	for _, c := range []struct {
		cfg MQConfig
		pkg string
	}{
		{MQConfig{Targets: []string{MQRedis}, RedisServer: "/nonexistent/redis-server", Records: 1}, "redis-server"},
		{MQConfig{Targets: []string{MQNATS}, NATSServer: "/nonexistent/nats-server", Records: 1}, "nats-server"},
	} {
		err := RunMQ(t.Context(), c.cfg, func(MQResult) error { return errors.New("no row expected") })
		if !errors.Is(err, os.ErrNotExist) || !strings.Contains(fmt.Sprint(err), "install Debian's "+c.pkg+" package") {
			t.Errorf("%v: %v, want the package to install", c.cfg.Targets, err)
		}
	}
}

func TestMQConfigRefused(t *testing.T) {
	for _, c := range []MQConfig{
		{Binary: "ndma", Targets: []string{"kafka"}},
		{Targets: []string{MQKafka}},
		{Targets: []string{MQNative}},
		{Binary: "ndma", RecordSize: 99},
		{Binary: "ndma", RecordSize: 64<<10 + 1},
		{Binary: "ndma", Batch: 1000, RecordSize: 64 << 10},
		{Binary: "ndma", InFlight: -1},
		{Binary: "ndma", Linger: time.Millisecond},
		{Binary: "ndma", Rate: -1},
		{Binary: "ndma", Records: 10, Duration: time.Second},
		{Binary: "ndma", Duration: time.Millisecond},
		{Binary: "ndma", Partitions: 65},
		{Binary: "ndma", Retain: 1000},
	} {
		err := RunMQ(t.Context(), c, func(MQResult) error { return errors.New("no row expected") })
		if !errors.Is(err, ErrBadValue) {
			t.Errorf("%+v: %v, want ErrBadValue", c, err)
		}
	}
}
