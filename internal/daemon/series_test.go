package daemon

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ndma/ndma/internal/metricsrv"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
)

func TestSeries(t *testing.T) {
	type snap struct {
		udp netio.UDPStats
		sec secure.LayerStats
		own uint64
	}
	x := snap{udp: netio.UDPStats{DatagramsSent: 3, GSOEnabled: true}, own: 7}
	own := []metricsrv.Metric[snap]{metricsrv.Counter("x_own_total", "Own.", nil, func(s *snap) uint64 { return s.own })}
	tab := &metricsrv.Table[snap]{
		Metrics:  Series("x_", own, func(s *snap) *netio.UDPStats { return &s.udp }, func(s *snap) *secure.LayerStats { return &s.sec }),
		Snapshot: func() snap { return x },
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(tab); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP x_own_total Own.
# TYPE x_own_total counter
x_own_total 7
# HELP x_udp_datagrams_sent_total UDP datagrams the kernel accepted for sending.
# TYPE x_udp_datagrams_sent_total counter
x_udp_datagrams_sent_total 3
# HELP x_udp_gso_enabled 1 if sends use UDP GSO, else 0.
# TYPE x_udp_gso_enabled gauge
x_udp_gso_enabled 1
# HELP x_udp_gro_enabled 1 if the socket receives with UDP GRO, else 0.
# TYPE x_udp_gro_enabled gauge
x_udp_gro_enabled 0
# HELP x_security_sealed_total Datagrams sealed.
# TYPE x_security_sealed_total counter
x_security_sealed_total 0
`
	names := []string{"x_own_total", "x_udp_datagrams_sent_total", "x_udp_gso_enabled", "x_udp_gro_enabled", "x_security_sealed_total"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(tab); n != 1+8+18 {
		t.Errorf("%d series, want 27 (1 own, 8 UDP, 18 security)", n)
	}
}
