package coll

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
)

// TestSplitSealed: on a switch that binds names, ranks whose credentials
// bind each to its rank of the job (JOB/RANK) split the communicator, and
// the sub-communicators (groups of the job's own, in which a rank takes
// whatever rank the split gives it) join and reduce in the network; a
// rank of another job is refused the world's ranks.
func TestSplitSealed(t *testing.T) {
	a, err := secure.NewAuthority([]byte("fabric secret of the sealed split test"))
	if err != nil {
		t.Fatal(err)
	}
	issue := func(role secure.Role, name string) *secure.Identity {
		id, err := a.Issue(role, name, rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	sopts := secure.Options{}
	conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := fabric.New(fabric.Config{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := fabric.NewServerWith(conn, sw, fabric.ServerOptions{Security: issue(secure.RoleSwitch, "sw0"), SecurityOptions: sopts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })

	const n, job = 4, "split-job"
	listen := func(name string) *endpoint.Endpoint {
		ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{OpTimeout: 5 * time.Second},
			endpoint.Options{Security: issue(secure.RoleMember, name), SecurityOptions: sopts})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ep.Close() })
		return ep
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// A rank of job split-job-2 (whose name the job's prefixes) is
	// refused every rank of split-job.
	other := listen(job + "-2/0")
	if _, err := New(ctx, Config{Endpoint: other, Rank: 0, Size: n, Switch: srv.Addr().String(), Job: job, Token: testToken}); err == nil {
		t.Fatalf("%s-2/0 joined %s as rank 0", job, job)
	}
	comms := make([]*Communicator, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		ep := listen(fmt.Sprintf("%s/%d", job, i))
		wg.Go(func() {
			comms[i], errs[i] = New(ctx, Config{Endpoint: ep, Rank: i, Size: n, Switch: srv.Addr().String(), Job: job, Token: testToken})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", i, err)
		}
	}
	subs := make([]*Communicator, n)
	runAll(t, comms, func(ctx context.Context, c *Communicator) error {
		s, err := c.Split(ctx, c.Rank()%2, -c.Rank()) // reverse order: the sub ranks are not the world's
		subs[c.Rank()] = s
		return err
	})
	runAll(t, comms, func(ctx context.Context, c *Communicator) error {
		s := subs[c.Rank()]
		if !s.InNetwork() || s.Rank() != 1-c.Rank()/2 {
			return fmt.Errorf("sub rank %d (in network %v), want %d in network", s.Rank(), s.InNetwork(), 1-c.Rank()/2)
		}
		buf := []int64{int64(c.Rank())}
		if err := Allreduce(ctx, s, nil, buf, Sum); err != nil {
			return err
		}
		if want := int64(2 + 2*(c.Rank()%2)); buf[0] != want { // 0+2 or 1+3
			return fmt.Errorf("sub allreduce %d, want %d", buf[0], want)
		}
		return nil
	})
	if st := srv.Stats(); st.NameRefused != 1 {
		t.Errorf("%d joins refused for the credential's name, want 1 (the other job's rank)", st.NameRefused)
	}
}
