package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/ndma/ndma/testbed"
)

// TestAgentEnds: an agent process that exits before its first message
// is reported with its exit status and log, and stopping it afterwards
// returns at once (it once waited for an exit already taken).
func TestAgentEnds(t *testing.T) {
	dir := t.TempDir()
	// sh runs "bench" as a script, which does not exist: it exits 127.
	a, err := startAgent[mqAgentMsg](t.Context(), &testbed.State{}, "/bin/sh", "mq-agent", "", dir, "producer", mqAgentSpec{Role: mqRoleProducer})
	if err != nil {
		t.Skipf("no /bin/sh: %v", err)
	}
	if _, err := a.next(t.Context(), 10*time.Second, nil); err == nil || !strings.Contains(err.Error(), "the producer ended: exit status") {
		t.Fatalf("next: %v", err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- a.stop() }()
	select {
	case err := <-stopped:
		if err == nil || !strings.Contains(err.Error(), "exit status") {
			t.Errorf("stop: %v, want the exit status", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stop did not return")
	}
}
