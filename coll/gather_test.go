package coll

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
)

// rootsFor lists the roots to test on n ranks: 0 and the last rank (whose
// relative numbering wraps around).
func rootsFor(n int) []int {
	if n == 1 {
		return []int{0}
	}
	return []int{0, n - 1}
}

func TestGather(t *testing.T) {
	for _, w := range worlds(t, OpGather) {
		for _, algo := range algosFor(OpGather, w) {
			for _, b := range sizesFor(w.n) {
				for _, root := range rootsFor(w.n) {
					for _, inPlace := range inPlaceFor(b) {
						t.Run(fmt.Sprintf("%s/n=%d/b=%d/root=%d/inplace=%v", algo, w.n, b, root, inPlace), func(t *testing.T) {
							checkGather(t, w.comms, algo, b, root, inPlace)
						})
					}
				}
			}
		}
	}
}

// checkGather runs one gather and compares the root's buffer with the
// ranks' blocks in rank order.
func checkGather(t *testing.T, comms []*Communicator, algo Algo, b, root int, inPlace bool) {
	t.Helper()
	n := len(comms)
	var want []byte
	for r := range n {
		want = append(want, pattern(r, 0, b, 2)...)
	}
	var got []byte
	runAll(t, comms, func(ctx context.Context, c *Communicator) error {
		r := c.Rank()
		send := pattern(r, 0, b, 2)
		if r != root {
			return c.Gather(ctx, send, nil, root, WithAlgo(algo))
		}
		got = make([]byte, n*b)
		for i := range got {
			got[i] = 0xee
		}
		if inPlace {
			copy(got[r*b:], send)
			send = nil
		}
		return c.Gather(ctx, send, got, root, WithAlgo(algo))
	})
	sameBytes(t, "root", got, want)
}

func TestScatter(t *testing.T) {
	for _, w := range worlds(t, OpScatter) {
		for _, algo := range algosFor(OpScatter, w) {
			for _, b := range sizesFor(w.n) {
				for _, root := range rootsFor(w.n) {
					for _, inPlace := range inPlaceFor(b) {
						t.Run(fmt.Sprintf("%s/n=%d/b=%d/root=%d/inplace=%v", algo, w.n, b, root, inPlace), func(t *testing.T) {
							checkScatter(t, w.comms, algo, b, root, inPlace)
						})
					}
				}
			}
		}
	}
}

// checkScatter runs one scatter and compares every rank's block with its
// block of the root's buffer.
func checkScatter(t *testing.T, comms []*Communicator, algo Algo, b, root int, inPlace bool) {
	t.Helper()
	n := len(comms)
	var data []byte
	for r := range n {
		data = append(data, pattern(r, 1, b, 3)...)
	}
	recvs := make([][]byte, n)
	runAll(t, comms, func(ctx context.Context, c *Communicator) error {
		r := c.Rank()
		recvs[r] = make([]byte, b)
		if r != root {
			return c.Scatter(ctx, nil, recvs[r], root, WithAlgo(algo))
		}
		send := append([]byte(nil), data...)
		if inPlace {
			recvs[r] = nil
		}
		if err := c.Scatter(ctx, send, recvs[r], root, WithAlgo(algo)); err != nil {
			return err
		}
		if inPlace {
			recvs[r] = send[r*b : (r+1)*b]
		}
		if !bytes.Equal(send, data) {
			return errors.New("scatter changed the root's send buffer")
		}
		return nil
	})
	for r, got := range recvs {
		sameBytes(t, fmt.Sprintf("rank %d", r), got, data[r*b:(r+1)*b])
	}
}

func TestGatherScatterArgs(t *testing.T) {
	comms := udpComms(t, 3, false)
	c := comms[0] // rank 0
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"gather root -1", c.Gather(ctx, nil, nil, -1)},
		{"gather root 3", c.Gather(ctx, nil, nil, 3)},
		{"gather recv short", c.Gather(ctx, make([]byte, 4), make([]byte, 11), 0)},
		{"gather in place, not a multiple", c.Gather(ctx, nil, make([]byte, 10), 0)},
		{"igather root 3", c.Igather(ctx, nil, nil, 3).Wait(ctx)},
		{"scatter root 3", c.Scatter(ctx, nil, nil, 3)},
		{"scatter send long", c.Scatter(ctx, make([]byte, 13), make([]byte, 4), 0)},
		{"scatter in place, not a multiple", c.Scatter(ctx, make([]byte, 10), nil, 0)},
		{"iscatter root -1", c.Iscatter(ctx, nil, nil, -1).Wait(ctx)},
	} {
		if !errors.Is(tc.err, ErrArg) {
			t.Errorf("%s: %v, want ErrArg", tc.name, tc.err)
		}
	}
}
