package coll

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDeadRank: a rank that dies makes the others' collectives fail —
// in-network ones with a MemberError naming it within the switch's
// heartbeat timeout, host ones by their deadline — instead of hanging.
func TestDeadRank(t *testing.T) {
	comms := udpComms(t, 3, true)
	// Rank 2 crashes: its endpoint goes away without leaving the group.
	comms[2].ep.Close()
	for _, algo := range []Algo{AlgoInNet, AlgoRing} {
		start := time.Now()
		errs := make(chan error, 2)
		for _, c := range comms[:2] {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				buf := make([]float32, 1000)
				errs <- Allreduce(ctx, c, nil, buf, Sum, WithAlgo(algo))
			}()
		}
		for range 2 {
			err := <-errs
			if err == nil {
				t.Fatalf("%s: allreduce with a dead rank succeeded", algo)
			}
			if algo == AlgoInNet {
				var me *endpoint.MemberError
				if !errors.As(err, &me) || me.Member != 2 || !errors.Is(err, wire.StatusMemberDead) {
					t.Fatalf("%s: %v, want a MemberError naming rank 2", algo, err)
				}
			}
		}
		if took := time.Since(start); took > 4*time.Second {
			t.Fatalf("%s: errors after %v", algo, took)
		}
	}
}
