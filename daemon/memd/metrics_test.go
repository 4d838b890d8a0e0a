package memd

import (
	"testing"

	"github.com/ndma/ndma/internal/daemon/daemontest"
)

// scrape fetches /metrics from srv and returns the samples by series
// ("name" or "name{labels}").
func scrape(t *testing.T, srv *Server) map[string]float64 {
	return daemontest.Scrape(t, srv.MetricsAddr())
}

// TestMetrics scrapes /metrics over HTTP and checks that the node's
// series are there and that counters move with traffic.
func TestMetrics(t *testing.T) {
	const size = 1 << 20
	srv := start(t, Config{Size: size, MetricsAddr: "127.0.0.1:0"})
	key := srv.Regions()[0].Key
	ctx := testCtx(t)

	m0 := scrape(t, srv)
	for _, name := range []string{
		`ndma_memd_requests_total{result="served"}`,
		`ndma_memd_requests_total{result="refused"}`,
		"ndma_memd_packets_sent_total",
		"ndma_memd_packets_received_total",
		"ndma_memd_packets_retransmitted_total",
		"ndma_memd_malformed_total",
		"ndma_memd_duplicates_total",
		"ndma_memd_peers_dead_total",
		"ndma_memd_udp_datagrams_received_total",
		"ndma_memd_region_bytes",
		"go_goroutines",
	} {
		if _, ok := m0[name]; !ok {
			t.Errorf("no series %s", name)
		}
	}
	if got := m0["ndma_memd_region_bytes"]; got != size {
		t.Errorf("ndma_memd_region_bytes = %v, want %d", got, size)
	}
	if got := m0["ndma_memd_regions"]; got != 1 {
		t.Errorf("ndma_memd_regions = %v, want 1", got)
	}

	r := dial(t, ctx, srv) // the dial's no-op is one request served
	const writes = 10
	for i := range writes {
		if err := r.Write(ctx, key, uint64(i)*8, []byte("8 bytes!")); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Read(ctx, key^1, 0, make([]byte, 8)); err == nil {
		t.Fatal("read with a bad key succeeded")
	}
	m1 := scrape(t, srv)
	if d := m1[`ndma_memd_requests_total{result="served"}`] - m0[`ndma_memd_requests_total{result="served"}`]; d != writes+1 {
		t.Errorf("served requests rose by %v, want %d", d, writes+1)
	}
	if d := m1[`ndma_memd_requests_total{result="refused"}`] - m0[`ndma_memd_requests_total{result="refused"}`]; d != 1 {
		t.Errorf("refused requests rose by %v, want 1", d)
	}
	if m1["ndma_memd_packets_received_total"] <= m0["ndma_memd_packets_received_total"] {
		t.Errorf("packets received did not rise: %v -> %v", m0["ndma_memd_packets_received_total"], m1["ndma_memd_packets_received_total"])
	}
	if m1["ndma_memd_payload_bytes_received_total"]-m0["ndma_memd_payload_bytes_received_total"] < writes*8 {
		t.Errorf("payload bytes received rose by less than %d", writes*8)
	}
}

// TestNoMetrics checks that without MetricsAddr there is no listener.
func TestNoMetrics(t *testing.T) {
	srv := start(t, Config{Size: 4096})
	if a := srv.MetricsAddr(); a != "" {
		t.Errorf("MetricsAddr() = %q without a metrics listener", a)
	}
}
