package bench

import (
	"context"
	"errors"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// TestRunKVProcesses runs the key-value benchmark against NDMA's store
// (its processes started from the ndma binary built here), its Redis
// and memcached front ends and, where installed, redis-server and
// memcached: every row has both
// operations' latencies and per-process CPU, no failed operation and no
// value of another key.
func TestRunKVProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds ndma and starts its daemons")
	}
	bin := ndmaBinary(t)
	targets := []string{KVNative, KVResp, KVMemc}
	for _, peer := range []struct{ bin, target string }{{"redis-server", KVRedis}, {"memcached", KVMemcached}} {
		if _, err := exec.LookPath(peer.bin); err == nil {
			targets = append(targets, peer.target)
		} else {
			t.Logf("%s is not installed: the %s row is not run", peer.bin, peer.target)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var rows []KVResult
	err := RunKV(ctx, KVConfig{Binary: bin, Targets: targets, Records: 300, ValueSize: 40, ReadRatio: 0.5,
		Clients: 4, Duration: 300 * time.Millisecond}, func(r KVResult) error {
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
		if r.Target != targets[i] || r.Ops == 0 || r.Errors != 0 || r.Wrong != 0 ||
			r.GetP50 <= 0 || r.GetP99 < r.GetP50 || r.SetP50 <= 0 || r.SetP99 < r.SetP50 || r.ServerCPU <= 0 {
			t.Errorf("row %d: %+v", i, r)
		}
		want := []string{"switch", "memd0", "memd1", "kvd0", "kvd1"}
		switch r.Target {
		case KVResp, KVMemc: // one front end, both protocols
			want = append(want, "kv-serve")
		case KVRedis:
			want = []string{"redis-server"}
		case KVMemcached:
			want = []string{"memcached"}
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
	if out, _ := exec.Command("pgrep", "-f", bin).Output(); len(out) > 0 {
		t.Fatalf("daemons left running: %s", out)
	}
}

func TestKVConfigRefused(t *testing.T) {
	for _, c := range []KVConfig{
		{Binary: "ndma", Targets: []string{"memcache"}},
		{Binary: "ndma", Zipf: 0.5},
		{Binary: "ndma", ReadRatio: 1.5},
		{Binary: "ndma", Records: -1},
		{Binary: "ndma", ValueSize: 1 << 20},
		{Binary: "ndma", Duration: time.Millisecond},
		{Targets: []string{KVNative}},
	} {
		err := RunKV(t.Context(), c, func(KVResult) error { return errors.New("no row expected") })
		if !errors.Is(err, ErrBadValue) {
			t.Errorf("%+v: %v, want ErrBadValue", c, err)
		}
	}
}

// TestKVValues checks a value names its key, and that a value of
// another key does not pass.
func TestKVValues(t *testing.T) {
	k, other := kvKey(7), kvKey(70)
	for _, size := range []int{1, 5, 40, 100} {
		v := kvValue(k, 3, size)
		if len(v) != size || !valueOf(v, k) {
			t.Errorf("size %d: %q does not name %q", size, v, k)
		}
		if size >= len(k)+1 && valueOf(v, other) {
			t.Errorf("size %d: %q passes for %q", size, v, other)
		}
	}
	if valueOf(nil, k) || !slices.Equal(kvKey(7), k) {
		t.Error("an empty value passes")
	}
}
