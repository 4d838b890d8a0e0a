package coll

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ndma/ndma/wire"
)

func TestReduce(t *testing.T) {
	for _, n := range testRanks {
		comms := udpComms(t, n, false)
		for _, dt := range testDtypes {
			for _, op := range testOps {
				for i, elems := range testElems(dt, op, n) {
					root := (i + n/2) % n
					name := fmt.Sprintf("n%d/%v/%v/%d/root%d", n, dt, op, elems, root)
					if err := reduceCase(comms, elems, dt, op, root, WithAlgo(AlgoBinomial)); err != nil {
						t.Fatalf("%s: %v", name, err)
					}
				}
			}
		}
	}
}

// reduceCase runs one reduce twice (separate buffers, then in place at
// the root, with nil recv elsewhere) and checks the root's result
// against the reference, send buffers unchanged, and both runs bitwise
// equal.
func reduceCase(comms []*Communicator, elems int, dt wire.Dtype, op ReduceOp, root int, opts ...CallOption) error {
	n := len(comms)
	ins := make([][]byte, n)
	for r := range ins {
		ins[r] = input(dt, elems, r, elems+1)
	}
	want := reference(dt, op, ins)
	var outs [2][]byte
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for run := range 2 {
		errs := make(chan error, n)
		for r, c := range comms {
			go func() {
				send := append([]byte(nil), ins[r]...)
				var recv []byte
				if r == root {
					recv = make([]byte, len(send))
					if run == 1 {
						copy(recv, send)
						send = nil
					}
				}
				err := c.ReduceBytes(ctx, send, recv, dt, op, root, opts...)
				if err == nil && send != nil && !bytes.Equal(send, ins[r]) {
					err = errors.New("send buffer modified")
				}
				if r == root {
					outs[run] = recv
				}
				errs <- err
			}()
		}
		for range n {
			if err := <-errs; err != nil {
				return err
			}
		}
	}
	if err := checkResult(dt, op, outs[0], want, n); err != nil {
		return err
	}
	if !bytes.Equal(outs[0], outs[1]) {
		return errors.New("in-place run differs bitwise from the first")
	}
	return nil
}
