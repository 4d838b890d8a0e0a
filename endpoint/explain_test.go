package endpoint

import (
	"errors"
	"strings"
	"testing"

	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/wire"
)

// TestJoinBusyExplained: a JOIN the switch refuses as busy says why and
// what to do, from the reason in Operand1; an unknown reason is the bare
// status.
func TestJoinBusyExplained(t *testing.T) {
	req := &fabric.CtrlMsg{Type: fabric.CtrlJoin, Job: "train", Size: 4, Rank: 1, MTU: 1500}
	for _, c := range []struct {
		operand uint64
		want    string
	}{
		{fabric.JoinBusyFormed, `job "train": a job of that name is running already`},
		{fabric.JoinBusyFull, "as many groups and rendezvous as it may"},
		{fabric.JoinBusyNoRank, "every rank of the job is taken"},
		{fabric.JoinBusyExpired, "dropped the rendezvous: start every rank within it"},
	} {
		err := explainRefusal(req, wire.StatusBusy, c.operand)
		if !errors.Is(err, wire.StatusBusy) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("operand %d: %v, want busy saying %q", c.operand, err, c.want)
		}
	}
	if err := explainRefusal(req, wire.StatusBusy, 99); err != wire.StatusBusy {
		t.Errorf("unknown reason: %v, want the bare status", err)
	}
}
