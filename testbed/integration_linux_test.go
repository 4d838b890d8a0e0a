package testbed

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndma/ndma/coll"
	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// The integration testbed and what each rank runs on it. Sizes keep the
// whole test a few seconds at 100 Mbit/s, under -race too.
const (
	integrationHosts = 4
	integrationRate  = "100mbit"
	integrationMTU   = 9000 // every interface, in bytes

	// rankDeadline bounds a rank's whole program.
	rankDeadline = 60 * time.Second

	bcastBytes     = 1 << 20   // per Bcast
	allreduceElems = 256 << 10 // int64s per Allreduce

	stormServers  = 2   // ranks 0 and 1 serve the anycast service
	stormRequests = 500 // per client rank (2 and 3)
	stormWindow   = 16  // a client's requests in flight at most

	integrationMemNodes = 2         // memd namespaces lending to the switch's pool
	poolSlice           = 256 << 10 // bytes each rank writes into the shared pool region
)

// TestIntegration runs real rank processes — this test binary, re-executed
// as the "integration" helper (integrationRank) — on a 4-host testbed at 100 Mbit/s with MTU 9000
// and two memory nodes: in-network and host-based Bcast and Allreduce, an
// anycast request storm through `ndma switch`, and a replicated pool region
// over the memd namespaces that every rank writes a slice of and reads
// whole, each rank verifying every byte it gets; then it takes the testbed
// down and checks that nothing is left.
func TestIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a testbed of network namespaces and runs rank processes on it")
	}
	st := upTestbed(t, Config{Hosts: integrationHosts, MemNodes: integrationMemNodes, Rate: integrationRate, MTU: integrationMTU})
	root := filepath.Dir(st.Dir)
	if want := integrationMTU - udpIPHeaders; st.DatagramMTU != want {
		t.Fatalf("testbed datagram MTU %d, the ranks assume %d", st.DatagramMTU, want)
	}
	cmd := helperCmd(t, "integration", st)

	// Longer than a rank's own deadline, so that a stuck rank reports
	// itself before Run kills it.
	ctx, cancel := context.WithTimeout(t.Context(), rankDeadline+15*time.Second)
	defer cancel()
	var out lockedBuilder
	start := time.Now()
	err := Run(ctx, st, cmd, &out)
	t.Logf("ranks ran %v:\n%s", time.Since(start).Round(time.Millisecond), out.String())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}

	// Every rank's summary, and the storm's accounting: what the servers
	// say they served is what the clients got back from each.
	var served, got [stormServers]int
	for _, line := range strings.Split(out.String(), "\n") {
		var r, n, from0, from1 int
		if _, err := fmt.Sscanf(line, "[rank %d] anycast served %d", &r, &n); err == nil && r < stormServers {
			served[r] = n
		}
		if _, err := fmt.Sscanf(line, "[rank %d] anycast replies %d: %d from rank 0, %d from rank 1", &r, &n, &from0, &from1); err == nil {
			got[0] += from0
			got[1] += from1
		}
	}
	for r := range integrationHosts {
		if want := fmt.Sprintf("[rank %d] integration ok: rank %d of %d, ", r, r, integrationHosts); !strings.Contains(out.String(), want) {
			t.Errorf("no summary %q from rank %d", want, r)
		}
	}
	clients := integrationHosts - stormServers
	if served != got || served[0]+served[1] != clients*stormRequests || served[0] == 0 || served[1] == 0 {
		t.Errorf("anycast: servers served %v, clients got replies from them %v; want %d in all, from both",
			served, got, clients*stormRequests)
	}

	// Torn down: no namespace, daemon or state left.
	dctx, dcancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer dcancel()
	if err := DownAt(dctx, root, st.Prefix); err != nil {
		t.Fatal(err)
	}
	checkGone(t, st, root)
}

// integrationRank is the rank program of TestIntegration (helperMain's
// "integration" mode), run in each host namespace with the bootstrap
// environment of Run: it joins the job at the switch, runs the
// collectives, the anycast storm and the pool share, verifying every
// byte, and prints its summary; it fails on any mismatch.
func integrationRank(ctx context.Context) (err error) {
	launch, err := coll.ParseEnv(os.LookupEnv)
	if err != nil {
		return err
	}
	fopts := endpoint.FabricOptions{Token: []byte(launch.Token)}
	// The largest datagram one 9000-byte frame carries, as the testbed
	// gives its daemons.
	opts, err := launch.EndpointOptions() // the member credential of NDMA_CREDENTIAL
	if err != nil {
		return err
	}
	ep, err := endpoint.Listen(":0", endpoint.Config{Transport: transport.Config{MTU: integrationMTU - udpIPHeaders}}, opts)
	if err != nil {
		return err
	}
	defer ep.Close()
	c, err := coll.FromEnv(ctx, ep)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := c.Close(ctx); err == nil {
			err = cerr
		}
	}()
	if c.Size() != integrationHosts || !c.InNetwork() {
		return fmt.Errorf("communicator: rank %d of %d, in-network %v; want %d ranks with the switch", c.Rank(), c.Size(), c.InNetwork(), integrationHosts)
	}

	var summary []string
	for _, algo := range []coll.Algo{coll.AlgoInNet, coll.AlgoBinomial} {
		d, err := checkBcast(ctx, c, algo)
		if err != nil {
			return err
		}
		summary = append(summary, fmt.Sprintf("bcast %s %v", algo, d.Round(time.Millisecond)))
	}
	for _, algo := range []coll.Algo{coll.AlgoInNet, coll.AlgoRing} {
		d, err := checkAllreduce(ctx, c, algo)
		if err != nil {
			return err
		}
		summary = append(summary, fmt.Sprintf("allreduce %s %v", algo, d.Round(time.Millisecond)))
	}
	if err := checkRankBound(ctx, c, ep, launch, fopts); err != nil {
		return err
	}
	summary = append(summary, "rank bound")
	s, err := anycastStorm(ctx, c, ep, launch, fopts)
	if err != nil {
		return err
	}
	summary = append(summary, s)
	if s, err = poolShare(ctx, c, ep, launch, fopts); err != nil {
		return err
	}
	summary = append(summary, s)
	fmt.Printf("integration ok: rank %d of %d, %s\n", c.Rank(), c.Size(), strings.Join(summary, ", "))
	return nil
}

// checkRankBound checks that the rank's credential binds it to its rank
// of the run's job: a join of the job as the next rank is refused
// (AUTH), and a group of the job's own (JOB.SUFFIX) may be joined as any
// rank; here every rank joins one of size 1 as rank 0.
func checkRankBound(ctx context.Context, c *coll.Communicator, ep *endpoint.Endpoint, launch coll.Launch, fopts endpoint.FabricOptions) error {
	other := (c.Rank() + 1) % c.Size()
	jctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if g, err := ep.JoinJob(jctx, launch.Switch, launch.Job, c.Size(), other, fopts); !errors.Is(err, wire.StatusAuth) {
		if g != nil {
			g.Leave(jctx)
		}
		return fmt.Errorf("rank %d joining job %s as rank %d: %v, want it refused (AUTH)", c.Rank(), launch.Job, other, err)
	}
	sub := fmt.Sprintf("%s.bound.%d", launch.Job, c.Rank())
	g, err := ep.JoinJob(jctx, launch.Switch, sub, 1, 0, fopts)
	if err != nil {
		return fmt.Errorf("rank %d joining its job's group %s as rank 0: %w", c.Rank(), sub, err)
	}
	return g.Leave(jctx)
}

// bcastPattern is byte i of the Bcast with algo.
func bcastPattern(algo coll.Algo, i int) byte { return byte(i*131 + i>>8 + len(algo)) }

// checkBcast broadcasts bcastBytes from rank 0 with algo and verifies
// them on every rank.
func checkBcast(ctx context.Context, c *coll.Communicator, algo coll.Algo) (time.Duration, error) {
	buf := make([]byte, bcastBytes)
	for i := range buf {
		if c.Rank() == 0 {
			buf[i] = bcastPattern(algo, i)
		} else {
			buf[i] = ^bcastPattern(algo, i)
		}
	}
	start := time.Now()
	if err := c.Bcast(ctx, buf, 0, coll.WithAlgo(algo)); err != nil {
		return 0, fmt.Errorf("bcast %s: %w", algo, err)
	}
	d := time.Since(start)
	for i, b := range buf {
		if want := bcastPattern(algo, i); b != want {
			return 0, fmt.Errorf("bcast %s: byte %d is %#x, want %#x", algo, i, b, want)
		}
	}
	return d, nil
}

// allreduceValue is element i of rank r's contribution: large enough to
// need 64 bits, negative for some ranks.
func allreduceValue(r, i int) int64 { return int64(r+1)*int64(i)<<24 - int64(r)<<40 + int64(i%7) }

// checkAllreduce sums allreduceElems int64s over all ranks with algo and
// verifies every sum.
func checkAllreduce(ctx context.Context, c *coll.Communicator, algo coll.Algo) (time.Duration, error) {
	send := make([]int64, allreduceElems)
	recv := make([]int64, allreduceElems)
	for i := range send {
		send[i] = allreduceValue(c.Rank(), i)
		recv[i] = -1
	}
	start := time.Now()
	if err := coll.Allreduce(ctx, c, send, recv, coll.Sum, coll.WithAlgo(algo)); err != nil {
		return 0, fmt.Errorf("allreduce %s: %w", algo, err)
	}
	d := time.Since(start)
	for i, v := range recv {
		var want int64
		for r := range c.Size() {
			want += allreduceValue(r, i)
		}
		if v != want {
			return 0, fmt.Errorf("allreduce %s: element %d is %d, want %d", algo, i, v, want)
		}
	}
	return d, nil
}

// stormRequest is request i of client rank r: 32 to 1280 bytes.
func stormRequest(r, i int) []byte {
	req := make([]byte, 32+i%97*13)
	for j := range req {
		req[j] = byte(r*31 + i*7 + j)
	}
	return req
}

// stormReply is what server rank s answers to req: req reversed and
// complemented, then s.
func stormReply(s int, req []byte) []byte {
	reply := make([]byte, len(req)+1)
	for j, b := range req {
		reply[len(req)-1-j] = ^b
	}
	reply[len(req)] = byte(s)
	return reply
}

// anycastStorm registers ranks below stormServers as members of a
// round-robin service and has the other ranks send it stormRequests
// requests each, stormWindow at a time, verifying every reply. It returns
// the rank's part of the summary; servers print how many they served,
// clients how many replies came from each server.
func anycastStorm(ctx context.Context, c *coll.Communicator, ep *endpoint.Endpoint, launch coll.Launch, fopts endpoint.FabricOptions) (string, error) {
	// A service of the job's own: a sealed switch lets a rank's
	// credential (JOB/RANK) serve only services JOB and JOB.SUFFIX.
	name := launch.Job + ".storm"
	rank := c.Rank()
	var served atomic.Int64
	if rank < stormServers {
		h := func(_ uint64, _ endpoint.Caller, req []byte) ([]byte, error) {
			served.Add(1)
			return stormReply(rank, req), nil
		}
		sc := endpoint.ServiceConfig{Name: name, Size: stormServers, Policy: ctrl.PolicyRoundRobin}
		if _, err := ep.RegisterService(ctx, launch.Switch, sc, rank, h, fopts); err != nil {
			return "", fmt.Errorf("anycast: %w", err)
		}
	}
	// Every server is registered before any client sends.
	if err := c.Barrier(ctx); err != nil {
		return "", fmt.Errorf("anycast: barrier after registration: %w", err)
	}
	start := time.Now()
	var from [stormServers]int
	if rank >= stormServers {
		var err error
		if from, err = stormClient(ctx, ep, launch.Switch, name, rank, fopts); err != nil {
			return "", err
		}
	}
	d := time.Since(start)
	// Servers stay up until every client is done.
	if err := c.Barrier(ctx); err != nil {
		return "", fmt.Errorf("anycast: final barrier: %w", err)
	}
	if rank < stormServers {
		fmt.Printf("anycast served %d\n", served.Load())
		return fmt.Sprintf("anycast served %d", served.Load()), nil
	}
	fmt.Printf("anycast replies %d: %d from rank 0, %d from rank 1\n", from[0]+from[1], from[0], from[1])
	return fmt.Sprintf("anycast %d requests %v", stormRequests, d.Round(time.Millisecond)), nil
}

// stormClient sends stormRequests requests to the service, at most
// stormWindow in flight, verifies each reply, and counts the replies from
// each server.
func stormClient(ctx context.Context, ep *endpoint.Endpoint, sw, name string, rank int, fopts endpoint.FabricOptions) (from [stormServers]int, err error) {
	notify := make(chan *endpoint.Op, stormWindow) // room for every op in flight
	pending := make(map[*endpoint.Op]int, stormWindow)
	defer func() {
		// On failure, abandon what is still in flight.
		for op := range pending {
			ep.Cancel(op)
		}
		for range pending {
			<-notify
		}
	}()
	next := 0
	for done := 0; done < stormRequests; done++ {
		for next < stormRequests && len(pending) < stormWindow {
			op, err := ep.StartAnycast(ctx, sw, name, uint64(next), stormRequest(rank, next), fopts, notify)
			if err != nil {
				return from, fmt.Errorf("anycast: request %d: %w", next, err)
			}
			pending[op] = next
			next++
		}
		var op *endpoint.Op
		select {
		case op = <-notify:
		case <-ctx.Done():
			return from, fmt.Errorf("anycast: %d of %d replies: %w", done, stormRequests, ctx.Err())
		}
		i := pending[op]
		delete(pending, op)
		if op.Err != nil {
			return from, fmt.Errorf("anycast: request %d: %w", i, op.Err)
		}
		req := stormRequest(rank, i)
		if len(op.Resp) != len(req)+1 {
			return from, fmt.Errorf("anycast: request %d: reply of %d bytes, want %d", i, len(op.Resp), len(req)+1)
		}
		s := int(op.Resp[len(req)])
		if s >= stormServers {
			return from, fmt.Errorf("anycast: request %d: reply names server %d", i, s)
		}
		if want := stormReply(s, req); string(op.Resp) != string(want) {
			return from, fmt.Errorf("anycast: request %d: reply does not match the request", i)
		}
		from[s]++
	}
	return from, nil
}

// poolSlicePattern is byte i of rank r's slice of the pool region.
func poolSlicePattern(r, i int) byte { return byte(r*89 + i*7 + i>>9) }

// poolShare has rank 0 create a pool region with two copies over the
// testbed's memory nodes and pass its id and key to the others (Bcast);
// every rank writes its slice, and after a barrier reads the whole region
// back and checks every rank's bytes; rank 0 frees it at the end.
func poolShare(ctx context.Context, c *coll.Communicator, ep *endpoint.Endpoint, launch coll.Launch, fopts endpoint.FabricOptions) (string, error) {
	pc, err := pool.New(ep, launch.Switch, pool.Options{Fabric: fopts})
	if err != nil {
		return "", err
	}
	n := c.Size()
	idKey := make([]byte, 12)
	var r *pool.Region
	if c.Rank() == 0 {
		// The memory nodes join the pool within a second or so of the
		// testbed's start: until both have, the switch answers BUSY.
		for deadline := time.Now().Add(10 * time.Second); ; {
			r, err = pc.Alloc(ctx, uint64(n*poolSlice), pool.AllocOptions{Stripe: 16 << 10, Replicas: 2})
			if err == nil || !errors.Is(err, wire.StatusBusy) || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			return "", fmt.Errorf("pool alloc: %w", err)
		}
		binary.LittleEndian.PutUint32(idKey, r.ID())
		binary.LittleEndian.PutUint64(idKey[4:], r.Key())
	}
	if err := c.Bcast(ctx, idKey, 0); err != nil {
		return "", err
	}
	if c.Rank() != 0 {
		if r, err = pc.Open(ctx, binary.LittleEndian.Uint32(idKey), binary.LittleEndian.Uint64(idKey[4:])); err != nil {
			return "", fmt.Errorf("pool open: %w", err)
		}
	}
	if r.Spec().Columns != integrationMemNodes {
		return "", fmt.Errorf("pool region over %d memory nodes, want %d", r.Spec().Columns, integrationMemNodes)
	}
	mine := make([]byte, poolSlice)
	for i := range mine {
		mine[i] = poolSlicePattern(c.Rank(), i)
	}
	start := time.Now()
	if _, err := r.WriteAtContext(ctx, mine, int64(c.Rank()*poolSlice)); err != nil {
		return "", fmt.Errorf("pool write: %w", err)
	}
	if err := c.Barrier(ctx); err != nil {
		return "", err
	}
	all := make([]byte, n*poolSlice)
	if _, err := r.ReadAtContext(ctx, all, 0); err != nil {
		return "", fmt.Errorf("pool read: %w", err)
	}
	d := time.Since(start)
	for i, b := range all {
		if want := poolSlicePattern(i/poolSlice, i%poolSlice); b != want {
			return "", fmt.Errorf("pool: byte %d (rank %d's slice) is %#x, want %#x", i, i/poolSlice, b, want)
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return "", err
	}
	if c.Rank() == 0 {
		if err := pc.Free(ctx, r); err != nil {
			return "", fmt.Errorf("pool free: %w", err)
		}
	}
	return fmt.Sprintf("pool %v", d.Round(time.Millisecond)), nil
}
