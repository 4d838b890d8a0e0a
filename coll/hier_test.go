package coll

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/wire"
)

// TestHierarchyFromLaunch: ranks started from a launch with
// NDMA_HIERARCHY=auto and two NDMA_HOST_IDs, on loopback UDP with a
// switch and in real time, find their hosts and get the right results
// from two-level collectives; Close unmaps, and no segment is left.
func TestHierarchyFromLaunch(t *testing.T) {
	needShm(t)
	const n = 4
	conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := fabric.New(fabric.Config{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	srv := fabric.NewServer(conn, s, nil)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	comms := make([]*Communicator, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer ep.Close()
		env := map[string]string{"NDMA_RANK": fmt.Sprint(r), "NDMA_SIZE": fmt.Sprint(n), "NDMA_SWITCH": srv.Addr().String(),
			"NDMA_JOB": t.Name(), "NDMA_TOKEN": string(testToken), "NDMA_INSECURE": "1",
			"NDMA_HIERARCHY": "auto", "NDMA_HOST_ID": fmt.Sprintf("host %d", r/2)}
		l, err := ParseEnv(envOf(env))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { comms[r], errs[r] = l.Communicator(ctx, ep) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	defer closeComms(t, comms)
	for r, c := range comms {
		if c.Hosts() != 2 || len(c.LocalRanks()) != 2 {
			t.Fatalf("rank %d: %d hosts, local ranks %v; want 2 hosts of 2", r, c.Hosts(), c.LocalRanks())
		}
	}
	const size = 70000 // elements: chunks of the segment
	want := hierReference(wire.DtypeI32, Sum, n, size)
	got := make([][]byte, n)
	runAll(t, comms, func(ctx context.Context, c *Communicator) error {
		for range 3 {
			got[c.Rank()] = rankInput(wire.DtypeI32, c.Rank(), size)
			if err := c.AllreduceBytes(ctx, nil, got[c.Rank()], wire.DtypeI32, Sum); err != nil {
				return err
			}
			if err := c.Barrier(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	for r := range n {
		if !bytes.Equal(got[r], want) {
			t.Fatalf("rank %d: wrong sum", r)
		}
	}
	if left := segmentsLeft(t); len(left) > 0 {
		t.Fatalf("segments left: %v", left)
	}
}

// TestSegmentName: a segment name another rank sends is opened only if it
// is one createSegment makes: never a path, never another file.
func TestSegmentName(t *testing.T) {
	for name, ok := range map[string]bool{
		"ndma-1234-0123456789abcdef":      true,
		"ndma-1-ff":                       true,
		"ndma-../../etc/passwd":           false,
		"ndma-12/34":                      false,
		"other-1234-00":                   false,
		"ndma-1234-0123456789ABCDEF":      false,
		"ndma-" + strings.Repeat("a", 64): false,
	} {
		if validSegmentName(name) != ok {
			t.Errorf("%q: valid %v, want %v", name, !ok, ok)
		}
	}
}
