package coll

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
)

// blockSizes are the block sizes (bytes) the data-movement collectives are
// tested with; the last only for small communicators (see sizesFor).
var blockSizes = []int{0, 1, 7, 4099, 256<<10 + 5}

// rankCounts are the communicator sizes tested on host algorithms;
// in-network ones run on innetRankCounts (each needs a switch).
var (
	rankCounts      = []int{1, 2, 3, 5, 8}
	innetRankCounts = []int{2, 5}
)

// sizesFor returns the block sizes to test on n ranks.
func sizesFor(n int) []int {
	if n <= 5 {
		return blockSizes
	}
	return blockSizes[:len(blockSizes)-1]
}

// inPlaceFor returns whether to test out of place and in place for block
// size b: in-place handling does not depend on the size, so the largest
// runs out of place only (it dominates the runtime).
func inPlaceFor(b int) []bool {
	if b == blockSizes[len(blockSizes)-1] {
		return []bool{false}
	}
	return []bool{false, true}
}

// world is one communicator of every size under test, with or without a
// switch, made once per test.
type world struct {
	n     int
	innet bool
	comms []*Communicator
}

// worlds makes the communicators a test of op runs on: every rank count
// without a switch, and innetRankCounts with one when op has an
// in-network algorithm. The algorithms to run on a world are algosFor.
func worlds(t *testing.T, op Operation) []world {
	t.Helper()
	var ws []world
	for _, n := range rankCounts {
		ws = append(ws, world{n, false, udpComms(t, n, false)})
	}
	if Supported(op, AlgoInNet) {
		for _, n := range innetRankCounts {
			ws = append(ws, world{n, true, udpComms(t, n, true)})
		}
	}
	return ws
}

// algosFor lists op's algorithms to run on w: the in-network one only
// with a switch, host ones only without (they do not change with one).
func algosFor(op Operation, w world) []Algo {
	var as []Algo
	for _, a := range Algorithms[op] {
		if (a == AlgoInNet) == w.innet {
			as = append(as, a)
		}
	}
	return as
}

// pattern is rank's deterministic test data for one call: size bytes that
// differ between ranks, blocks and calls.
func pattern(rank, block, size, salt int) []byte {
	p := make([]byte, size)
	for i := range p {
		p[i] = byte(rank*131 + block*29 + i*7 + salt*17 + i>>8)
	}
	return p
}

// sameBytes fails the test naming the first differing byte.
func sameBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d bytes, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: byte %d is %#x, want %#x", what, i, got[i], want[i])
		}
	}
}

func TestAllgather(t *testing.T) {
	for _, w := range worlds(t, OpAllgather) {
		for _, algo := range algosFor(OpAllgather, w) {
			for _, b := range sizesFor(w.n) {
				for _, inPlace := range inPlaceFor(b) {
					name := fmt.Sprintf("%s/n=%d/b=%d/inplace=%v", algo, w.n, b, inPlace)
					t.Run(name, func(t *testing.T) {
						checkAllgather(t, w.comms, algo, b, inPlace)
					})
				}
			}
		}
	}
}

// checkAllgather runs one allgather and compares with the ranks' blocks
// in rank order.
func checkAllgather(t *testing.T, comms []*Communicator, algo Algo, b int, inPlace bool) {
	t.Helper()
	n := len(comms)
	var want []byte
	for r := range n {
		want = append(want, pattern(r, 0, b, 1)...)
	}
	recvs := make([][]byte, n)
	runAll(t, comms, func(ctx context.Context, c *Communicator) error {
		r := c.Rank()
		recv := make([]byte, n*b)
		recvs[r] = recv
		var send []byte
		if inPlace {
			for i := range recv {
				recv[i] = 0xee
			}
			copy(recv[r*b:], pattern(r, 0, b, 1))
		} else {
			send = pattern(r, 0, b, 1) // never nil, which would mean in place
		}
		return c.Allgather(ctx, send, recv, WithAlgo(algo))
	})
	for r, got := range recvs {
		sameBytes(t, fmt.Sprintf("rank %d", r), got, want)
	}
}

func TestAllgatherArgs(t *testing.T) {
	comms := udpComms(t, 3, false)
	c := comms[0]
	ctx := context.Background()
	if err := c.Allgather(ctx, make([]byte, 4), make([]byte, 11)); !errors.Is(err, ErrArg) {
		t.Errorf("recv too short: %v, want ErrArg", err)
	}
	if err := c.Allgather(ctx, nil, make([]byte, 10)); !errors.Is(err, ErrArg) {
		t.Errorf("in place, not a multiple: %v, want ErrArg", err)
	}
	if err := c.Iallgather(ctx, make([]byte, 4), make([]byte, 13)).Wait(ctx); !errors.Is(err, ErrArg) {
		t.Errorf("non-blocking, recv too long: %v, want ErrArg", err)
	}
	if err := c.Allgather(ctx, nil, nil, WithAlgo(AlgoInNet)); !errors.Is(err, ErrNoSwitch) {
		t.Errorf("innet without a switch: %v, want ErrNoSwitch", err)
	}
}

func TestBlockRuns(t *testing.T) {
	for n := 1; n <= 9; n++ {
		for start := range n {
			for cnt := 0; cnt <= n; cnt++ {
				var got []int
				for _, run := range blockRuns(n, start, cnt) {
					if run.start < 0 || run.start+run.n > n {
						t.Fatalf("n=%d start=%d cnt=%d: run %+v outside [0,%d)", n, start, cnt, run, n)
					}
					for i := range run.n {
						got = append(got, run.start+i)
					}
				}
				if len(got) != cnt {
					t.Fatalf("n=%d start=%d cnt=%d: %d blocks", n, start, cnt, len(got))
				}
				for i, blk := range got {
					if blk != (start+i)%n {
						t.Fatalf("n=%d start=%d cnt=%d: blocks %v", n, start, cnt, got)
					}
				}
			}
		}
	}
}
