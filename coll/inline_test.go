package coll

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/wire"
)

// TestInline: under Inline the non-blocking forms run the call before
// they return: the request is complete, with the blocking form's result,
// for in-network and host algorithms alike, and an argument error is
// reported the same way.
func TestInline(t *testing.T) {
	for _, innet := range []bool{true, false} {
		simWorld(t, 4, innet, simnet.LinkConfig{Rate: 10e9, Latency: 5 * time.Microsecond}, 91, func(t *testing.T, _ *simnet.Network, comms []*Communicator) {
			simRun(t, comms, func(ctx context.Context, c *Communicator) error {
				ictx := Inline(ctx)
				buf := make([]byte, 1000)
				if c.Rank() == 1 {
					for i := range buf {
						buf[i] = byte(i)
					}
				}
				reqs := []*Request{
					c.Ibcast(ictx, buf, 1),
					c.Ibarrier(ictx),
				}
				send := f32bytes([]float32{float32(c.Rank()), 1})
				recv := make([]byte, len(send))
				reqs = append(reqs, c.IallreduceBytes(ictx, send, recv, wire.DtypeF32, Sum))
				all := make([]byte, 4*len(comms))
				reqs = append(reqs, c.Iallgather(ictx, []byte{byte(c.Rank()), 0, 0, 7}, all))
				for _, r := range reqs {
					done, err := r.Test()
					if !done {
						return errors.New("an inline call returned before it completed")
					}
					if err != nil {
						return err
					}
				}
				for i := range buf {
					if buf[i] != byte(i) {
						return errors.New("bcast: wrong data")
					}
				}
				if !bytes.Equal(recv, f32bytes([]float32{6, 4})) {
					return errors.New("allreduce: wrong sum")
				}
				for r := range comms {
					if all[4*r] != byte(r) || all[4*r+3] != 7 {
						return errors.New("allgather: wrong blocks")
					}
				}
				bad := c.Ibcast(ictx, buf, len(comms))
				if done, err := bad.Test(); !done || !errors.Is(err, ErrArg) {
					return errors.New("a bad root was not refused at once")
				}
				return nil
			})
		})
	}
}

func f32bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// TestRequestEndpoint: a non-blocking in-network call is one endpoint
// operation (Request.Endpoint), completed with no goroutine of its own:
// it gives the right result, and when its context ends first it fails
// with the context's error once the switch operation is cancelled. A
// host algorithm's request runs in a goroutine and says so.
func TestRequestEndpoint(t *testing.T) {
	simWorld(t, 3, true, simnet.LinkConfig{Rate: 10e9, Latency: 5 * time.Microsecond}, 92, func(t *testing.T, _ *simnet.Network, comms []*Communicator) {
		simRun(t, comms, func(ctx context.Context, c *Communicator) error {
			send := f32bytes([]float32{float32(c.Rank()), 1})
			recv := make([]byte, len(send))
			r := c.IallreduceBytes(ctx, send, recv, wire.DtypeF32, Sum, WithAlgo(AlgoInNet))
			if !r.Endpoint() {
				return errors.New("an in-network allreduce is not an endpoint request")
			}
			if err := r.Wait(ctx); err != nil {
				return err
			}
			if !bytes.Equal(recv, f32bytes([]float32{3, 3})) {
				return errors.New("allreduce: wrong sum")
			}
			h := c.IallreduceBytes(ctx, send, recv, wire.DtypeF32, Sum, WithAlgo(AlgoRing))
			if h.Endpoint() {
				return errors.New("a ring allreduce claims to be one endpoint operation")
			}
			return h.Wait(ctx)
		})
		// Rank 0 alone: its aggregation waits for the others until its
		// context ends.
		cctx, cancel := context.WithCancel(context.Background())
		send := f32bytes([]float32{1})
		r := comms[0].IallreduceBytes(cctx, send, make([]byte, 4), wire.DtypeF32, Sum, WithAlgo(AlgoInNet))
		if done, _ := r.Test(); done {
			t.Fatal("an allreduce completed with one rank of three")
		}
		cancel()
		wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer wcancel()
		select {
		case <-r.Done():
		case <-wctx.Done():
			t.Fatal("the cancelled allreduce did not complete")
		}
		if _, err := r.Test(); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled allreduce: %v, want context.Canceled", err)
		}
	})
}
