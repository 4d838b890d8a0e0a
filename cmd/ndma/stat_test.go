package main

import (
	"context"
	"errors"
	"math"
	"net"
	"net/netip"
	"regexp"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/wire/ctrl"
)

// TestStatReport checks the rates and balances ndma stat computes from
// two samples.
func TestStatReport(t *testing.T) {
	ap := netip.MustParseAddrPort("10.0.0.2:7470")
	a := endpoint.PoolState{Refused: 5, Nodes: []ctrl.PoolNodeInfo{
		{ID: 0, Addr: ap, Capacity: 100, Used: 30, Alive: true, Requests: 10, Bytes: 1000},
		{ID: 1, Addr: ap, Capacity: 100, Used: 10, Alive: true, Requests: 10, Bytes: 1000},
		{ID: 2, Addr: ap, Capacity: 100, Used: 0, Alive: false},
	}}
	b := a
	b.Refused = 9
	b.Nodes = []ctrl.PoolNodeInfo{
		{ID: 0, Addr: ap, Capacity: 100, Used: 30, Alive: true, Requests: 40, Bytes: 4000},
		{ID: 1, Addr: ap, Capacity: 100, Used: 10, Alive: true, Requests: 20, Bytes: 2000},
		{ID: 2, Addr: ap, Capacity: 100, Used: 0, Alive: false},
	}
	r := makeStatReport(a, b, 2*time.Second)
	near := func(x, y float64) bool { return math.Abs(x-y) < 1e-9 }
	if r.Alive != 2 || r.Used != 40 || r.Capacity != 300 || !near(r.ReqPerS, 20) || !near(r.BytesPS, 2000) || !near(r.RefusedPS, 2) {
		t.Errorf("totals %+v", r)
	}
	// Stripe balance over live nodes: 30 over a mean of 20; load 15 req/s
	// over a mean of 10.
	if !near(r.Balance, 1.5) || !near(r.LoadSpread, 1.5) {
		t.Errorf("balance %v, load %v; want 1.5 and 1.5", r.Balance, r.LoadSpread)
	}
	if !near(r.Nodes[0].Share, 0.75) || !near(r.Nodes[0].ReqPerS, 15) {
		t.Errorf("node 0: %+v", r.Nodes[0])
	}
	// One sample: no rates.
	if r := makeStatReport(b, b, 0); r.ReqPerS != 0 || r.RefusedPS != 0 || r.LoadSpread != 0 {
		t.Errorf("rates from one sample: %+v", r)
	}
}

func TestPoolHealth(t *testing.T) {
	for _, c := range []struct {
		p    ctrl.PoolSpec
		want string
	}{
		{ctrl.PoolSpec{Columns: 3, Replicas: 2}, "ok"},
		{ctrl.PoolSpec{Columns: 3, Replicas: 2, Lost: 1, Health: ctrl.HealthDegraded}, "degraded (1 lost of 3 columns)"},
		{ctrl.PoolSpec{Columns: 3, Replicas: 2, Lost: 1, Rebuilding: 1, Health: ctrl.HealthDegraded}, "degraded (1 rebuilding of 3 columns)"},
		{ctrl.PoolSpec{Columns: 3, Replicas: 2, Down: 2, Health: ctrl.HealthUnavailable}, "unavailable (2 on dead nodes of 3 columns)"},
		{ctrl.PoolSpec{Columns: 4, Replicas: 1, Lost: 1, Down: 1, Health: ctrl.HealthLost}, "lost (1 lost, 1 on dead nodes of 4 columns)"},
	} {
		if got := poolHealth(c.p); got != c.want {
			t.Errorf("%+v: %q, want %q", c.p, got, c.want)
		}
	}
}

// TestStatNoSwitch: ndma stat against an address where nothing answers
// fails after --timeout with a message naming the address and the wait
// (and that a sealed switch would need a credential).
func TestStatNoSwitch(t *testing.T) {
	// A socket that takes datagrams and never answers: no switch there.
	silent, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	addr := silent.LocalAddr().String()
	_, err = execute(t, "stat", "--switch", addr, "--insecure", "--token", "t", "--timeout", "1s", "--interval", "0")
	// The wait is the request's own, from its start to the deadline: 1s
	// less what the command spent before it (more on a loaded machine).
	want := regexp.MustCompile("^" + regexp.QuoteMeta("endpoint: pool stat: no switch answers at "+addr+" after ") +
		`(1s|[5-9][0-9]0ms)` + regexp.QuoteMeta(endpoint.UnsealedHint) + "$")
	if err == nil || !want.MatchString(err.Error()) {
		t.Fatalf("ndma stat:\n got %v\nwant %s", err, want)
	}
	if !errors.Is(err, endpoint.ErrNoSwitch) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%v does not match endpoint.ErrNoSwitch and context.DeadlineExceeded", err)
	}
}
