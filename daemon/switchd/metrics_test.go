package switchd

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ndma/ndma/daemon/memd"
	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/internal/daemon/daemontest"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/wire"
)

// scrape fetches /metrics from srv and returns the samples by series
// ("name" or "name{labels}").
func scrape(t *testing.T, srv *Server) map[string]float64 {
	return daemontest.Scrape(t, srv.MetricsAddr())
}

// TestMetrics scrapes /metrics over HTTP and checks that the switch's
// series are there and that counters and gauges move with traffic.
func TestMetrics(t *testing.T) {
	srv := start(t, Config{Token: testToken, PoolSlots: 64, MetricsAddr: "127.0.0.1:0",
		Fault: faults})
	ctx := testCtx(t)

	m0 := scrape(t, srv)
	for _, name := range []string{
		`ndma_switch_packets_in_total{mode="unicast"}`,
		`ndma_switch_packets_in_total{mode="multicast"}`,
		`ndma_switch_packets_in_total{mode="aggregate"}`,
		`ndma_switch_packets_in_total{mode="anycast"}`,
		`ndma_switch_packets_out_total{mode="multicast"}`,
		`ndma_switch_fault_injections_total{kind="drop"}`,
		`ndma_switch_fault_injections_total{kind="corrupt"}`,
		"ndma_switch_merged_acks_total",
		"ndma_switch_control_requests_total",
		"ndma_switch_control_refusals_total",
		"ndma_switch_auth_failures_total",
		"ndma_switch_role_refusals_total",
		"ndma_switch_name_refusals_total",
		"ndma_switch_spoofed_total",
		"ndma_switch_malformed_total",
		"ndma_switch_no_group_total",
		"ndma_switch_forward_drops_total",
		"ndma_switch_members_dead_total",
		"ndma_switch_anycast_refused_total",
		"ndma_switch_anycast_expired_total",
		"ndma_switch_anycast_held_total",
		"ndma_switch_anycast_stale_total",
		"ndma_switch_anycast_pending",
		"ndma_switch_pool_slots_in_use",
		"ndma_switch_pool_completions_total",
		"ndma_switch_pool_no_slot_total",
		"ndma_switch_transport_retransmits_total",
		"ndma_switch_transport_timeouts_total",
		"ndma_switch_udp_datagrams_received_total",
		"ndma_switch_groups",
		"ndma_switch_members",
		"go_goroutines",
	} {
		if _, ok := m0[name]; !ok {
			t.Errorf("no series %s", name)
		}
	}
	if got := m0["ndma_switch_pool_slots"]; got != 64 {
		t.Errorf("ndma_switch_pool_slots = %v, want 64", got)
	}
	if got := m0["ndma_switch_anycast_pending"]; got != 0 {
		t.Errorf("ndma_switch_anycast_pending = %v before any request", got)
	}
	if got := m0["ndma_switch_groups"]; got != 0 {
		t.Errorf("ndma_switch_groups = %v before any join", got)
	}

	// One refused join, then a job of 3 that allreduces.
	bad := listen(t)
	if _, err := bad.JoinJob(ctx, srv.Addr().String(), "nope", 1, 0, endpoint.FabricOptions{Token: []byte("bad")}); !errors.Is(err, wire.StatusAuth) {
		t.Fatalf("join with a bad token: %v", err)
	}
	const n = 3
	gs := joinAll(t, ctx, srv, "metrics-job", n)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			v := make([]byte, 4*1000)
			errs <- gs[i].Allreduce(ctx, v, make([]byte, len(v)), wire.DtypeI32, wire.AluAdd, endpoint.ReduceOptions{})
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}

	m1 := scrape(t, srv)
	for _, name := range []string{
		"ndma_switch_auth_failures_total",
		"ndma_switch_control_refusals_total",
		"ndma_switch_control_requests_total",
		`ndma_switch_packets_in_total{mode="aggregate"}`,
		`ndma_switch_packets_out_total{mode="aggregate"}`,
		"ndma_switch_pool_contributions_total",
		"ndma_switch_pool_completions_total",
		"ndma_switch_udp_datagrams_received_total",
		"ndma_switch_udp_datagrams_sent_total",
		"ndma_switch_transport_packets_received_total",
	} {
		if m1[name] <= m0[name] {
			t.Errorf("%s did not rise: %v -> %v", name, m0[name], m1[name])
		}
	}
	if got := m1["ndma_switch_groups"]; got != 1 {
		t.Errorf("ndma_switch_groups = %v, want 1", got)
	}
	if got := m1["ndma_switch_members"]; got != n {
		t.Errorf("ndma_switch_members = %v, want %d", got, n)
	}
	series := `ndma_switch_group_members_alive{group="1",kind="job",name="metrics-job"}`
	if got, ok := m1[series]; !ok || got != n {
		t.Errorf("%s = %v (present %v), want %d", series, got, ok, n)
	}
}

// TestNoMetrics checks that without MetricsAddr there is no listener.
func TestNoMetrics(t *testing.T) {
	srv := start(t, Config{Token: testToken})
	if a := srv.MetricsAddr(); a != "" {
		t.Errorf("MetricsAddr() = %q without a metrics listener", a)
	}
}

// TestRun checks that Run returns nil and releases everything when its
// context is cancelled.
func TestRun(t *testing.T) {
	srv, err := Start(Config{Listen: "127.0.0.1:0", Token: testToken, MetricsAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := srv.Close(); err != nil {
		t.Errorf("Close after Run: %v", err)
	}
}

// TestPoolMetrics checks the memory pool's series on the switch and on a
// memory node (memd) that lends to it, as a pool client writes, reads and
// makes a refused request.
func TestPoolMetrics(t *testing.T) {
	srv := start(t, Config{Token: testToken, MetricsAddr: "127.0.0.1:0"})
	node, err := memd.Start(memd.Config{Listen: "127.0.0.1:0", Size: 1 << 20, Perm: wire.PermAll,
		Switch: srv.Addr().String(), Token: testToken, MetricsAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	ctx := testCtx(t)
	nodeSeries := func(name string) string {
		return fmt.Sprintf(`ndma_switch_memory_pool_node_%s{addr="%v",node="0"}`, name, node.Addr())
	}
	for deadline := time.Now().Add(10 * time.Second); scrape(t, srv)[nodeSeries("alive")] != 1; {
		if time.Now().After(deadline) {
			t.Fatal("the memory node did not join the pool")
		}
		time.Sleep(10 * time.Millisecond)
	}
	ep := listen(t)
	c, err := pool.New(ep, srv.Addr().String(), pool.Options{Fabric: endpoint.FabricOptions{Token: testToken}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Alloc(ctx, 256<<10, pool.AllocOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m0, n0 := scrape(t, srv), daemontest.Scrape(t, node.MetricsAddr())
	if _, err := r.WriteAt(make([]byte, 100<<10), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadAt(make([]byte, 100<<10), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := r.FetchAdd(ctx, 1<<30, 1); !errors.Is(err, wire.StatusOutOfBounds) {
		t.Fatalf("fetch-add past the end: %v", err)
	}
	if err := c.Free(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadAt(make([]byte, 8), 0); !errors.Is(err, wire.StatusBadKey) {
		t.Fatalf("read of a freed region: %v", err)
	}
	m1, n1 := scrape(t, srv), daemontest.Scrape(t, node.MetricsAddr())
	if got := m1[nodeSeries("capacity_bytes")]; got != 1<<20 {
		t.Errorf("capacity %v, want 1 MiB", got)
	}
	if m0[nodeSeries("used_bytes")] < 256<<10 || m1[nodeSeries("used_bytes")] != 0 {
		t.Errorf("used: %v while the region lived, %v after free", m0[nodeSeries("used_bytes")], m1[nodeSeries("used_bytes")])
	}
	if m0["ndma_switch_memory_pool_regions"] != 1 || m1["ndma_switch_memory_pool_regions"] != 0 {
		t.Errorf("regions: %v then %v", m0["ndma_switch_memory_pool_regions"], m1["ndma_switch_memory_pool_regions"])
	}
	for _, name := range []string{nodeSeries("requests_total"), nodeSeries("request_bytes_total"),
		`ndma_switch_memory_pool_requests_total{result="received"}`, `ndma_switch_memory_pool_requests_total{result="refused"}`,
		"ndma_switch_memory_pool_forwarded_total"} {
		if m1[name] <= m0[name] {
			t.Errorf("%s did not rise: %v -> %v", name, m0[name], m1[name])
		}
	}
	for _, name := range []string{`ndma_memd_pool_requests_total{result="served"}`, "ndma_memd_pool_revokes_total"} {
		if n1[name] <= n0[name] {
			t.Errorf("%s did not rise: %v -> %v", name, n0[name], n1[name])
		}
	}
	if n0["ndma_memd_pool_grants"] != 1 || n1["ndma_memd_pool_grants"] != 0 {
		t.Errorf("memd grants held: %v then %v", n0["ndma_memd_pool_grants"], n1["ndma_memd_pool_grants"])
	}
}
