package switchd

import (
	"bytes"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ndma/ndma/daemon/memd"
	"github.com/ndma/ndma/endpoint"
)

// logBuffer is a slog destination the test reads while the switch writes.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// waitLog waits (up to the test context's deadline) for an info line
// holding every one of parts.
func waitLog(t *testing.T, l *logBuffer, parts ...string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		for line := range strings.SplitSeq(l.String(), "\n") {
			ok := strings.Contains(line, "level=INFO")
			for _, p := range parts {
				ok = ok && strings.Contains(line, p)
			}
			if ok {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no info line with %q in the switch's log:\n%s", parts, l.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLogsJobsAndPool: the switch logs at info level a job's completed
// rendezvous (name, group, size), a dead member (group, rank, address),
// and a memory node joining, leaving as it stops, and joining again.
func TestLogsJobsAndPool(t *testing.T) {
	var logs logBuffer
	srv := start(t, Config{Token: testToken, HeartbeatTimeout: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx := testCtx(t)

	eps := []*endpoint.Endpoint{listen(t), listen(t)}
	gs := make([]*endpoint.Group, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, ep := range eps {
		wg.Go(func() {
			gs[i], errs[i] = ep.JoinJob(ctx, srv.Addr().String(), "logjob", 2, i, endpoint.FabricOptions{Token: testToken})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d join: %v", i, err)
		}
	}
	waitLog(t, &logs, "job joined", "job=logjob", "size=2", "group="+strconv.FormatUint(uint64(gs[0].ID()), 10))
	dead := eps[1].LocalAddr().String()
	eps[1].Close() // stops its heartbeats
	waitLog(t, &logs, "member dead", "job=logjob", "rank=1", "addr="+dead)

	node, err := memd.Start(memd.Config{Listen: "127.0.0.1:0", Size: 1 << 20, Switch: srv.Addr().String(), Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	addr := node.Addr().String()
	waitLog(t, &logs, "memory node joined", "addr="+addr, "bytes=1048576")
	if err := node.Close(); err != nil {
		t.Fatal(err)
	}
	// A node that stops says so: it holds no copies, so the switch
	// forgets it, and it joins again as new.
	waitLog(t, &logs, "memory node left the pool", "addr="+addr, "forgotten=true")
	node, err = memd.Start(memd.Config{Listen: addr, Size: 1 << 20, Switch: srv.Addr().String(), Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	for deadline := time.Now().Add(10 * time.Second); strings.Count(logs.String(), "memory node joined the pool") < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the node that left did not join again:\n%s", logs.String())
		}
	}
}
