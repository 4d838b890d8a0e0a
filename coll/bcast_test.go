package coll

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"
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
