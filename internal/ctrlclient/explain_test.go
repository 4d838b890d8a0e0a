package ctrlclient

import (
	"errors"
	"strings"
	"testing"

	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// TestJoinBusyExplained: a JOIN the switch refuses as busy says why and
// what to do, from the reason in Operand1; an unknown reason is the bare
// status.
func TestJoinBusyExplained(t *testing.T) {
	req := &ctrl.Msg{Type: ctrl.Join, Job: "train", Size: 4, Rank: 1, MTU: 1500}
	for _, c := range []struct {
		operand uint64
		want    string
	}{
		{ctrl.JoinBusyFormed, `job "train": a job of that name is running already`},
		{ctrl.JoinBusyFull, "as many groups and rendezvous as it may"},
		{ctrl.JoinBusyNoRank, "every rank of the job is taken"},
		{ctrl.JoinBusyExpired, "dropped the rendezvous: start every rank within it"},
	} {
		err := Explain(req, wire.StatusBusy, c.operand)
		if !errors.Is(err, wire.StatusBusy) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("operand %d: %v, want busy saying %q", c.operand, err, c.want)
		}
	}
	if err := Explain(req, wire.StatusBusy, 99); err != wire.StatusBusy {
		t.Errorf("unknown reason: %v, want the bare status", err)
	}
}
