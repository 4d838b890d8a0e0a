package coll

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
)

func TestBcast(t *testing.T) {
	for _, n := range testRanks {
		comms := udpComms(t, n, false)
		for _, algo := range Algorithms[OpBcast] {
			if algo == AlgoInNet {
				continue
			}
			sizes := []int{0, 1, 7, 4099}
			if n == bigRanks {
				sizes = append(sizes, 1<<20+4099)
			}
			for i, size := range sizes {
				root := (i + n/2) % n
				opts := []CallOption{WithAlgo(algo)}
				if size == 4099 {
					opts = append(opts, WithSegment(1000)) // several chain segments
				}
				if err := bcastCase(comms, size, root, opts...); err != nil {
					t.Fatalf("n%d/%s/%d/root%d: %v", n, algo, size, root, err)
				}
			}
		}
	}
}

// bcastCase broadcasts size bytes from root and checks every rank's copy.
func bcastCase(comms []*Communicator, size, root int, opts ...CallOption) error {
	want := make([]byte, size)
	for i := range want {
		want[i] = byte(i*131 + size + root)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n := len(comms)
	errs := make(chan error, n)
	for r, c := range comms {
		go func() {
			buf := make([]byte, size)
			if r == root {
				copy(buf, want)
			}
			err := c.Bcast(ctx, buf, root, opts...)
			if err == nil && !bytes.Equal(buf, want) {
				err = fmt.Errorf("rank %d: wrong data", r)
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

// TestBcastLengthMismatch: a receiver whose buffer is longer than the
// root's message fails with endpoint.ErrShortRead saying both lengths
// (not that the message was longer).
// Both ways a message meets its receive are checked: the receive posted
// first, and the receive posted after the message arrived (held as
// unexpected).
func TestBcastLengthMismatch(t *testing.T) {
	for _, late := range []bool{false, true} {
		t.Run(fmt.Sprintf("late=%v", late), func(t *testing.T) { bcastLengthMismatch(t, late) })
	}
}

func bcastLengthMismatch(t *testing.T, late bool) {
	comms := udpComms(t, 2, true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	for r, c := range comms {
		go func() {
			if late && r == 1 {
				time.Sleep(300 * time.Millisecond)
			}
			buf := make([]byte, 1000*(r+1)) // root 1000 bytes, rank 1 2000
			errs <- c.Bcast(ctx, buf, 0, WithAlgo(AlgoInNet))
		}()
	}
	var got []error
	for range 2 {
		if err := <-errs; err != nil {
			got = append(got, err)
		}
	}
	if len(got) == 0 {
		t.Fatal("a Bcast whose ranks' lengths differ succeeded")
	}
	for _, err := range got {
		if errors.Is(err, endpoint.ErrShortRead) && !strings.Contains(err.Error(), "of 1000 bytes for a 2000-byte buffer") {
			t.Errorf("the receiver's error: %v, want both lengths", err)
		}
	}
	if !slices.ContainsFunc(got, func(err error) bool { return errors.Is(err, endpoint.ErrShortRead) }) {
		t.Errorf("errors %v, want the receiver's ErrShortRead", got)
	}
}
