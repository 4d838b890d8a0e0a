package metricsrv

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestTable: one snapshot per scrape feeds every series, the extra ones
// included.
func TestTable(t *testing.T) {
	type snap struct{ n uint64 }
	calls := 0
	extra := prometheus.NewDesc("t_extra", "Extra.", []string{"k"}, nil)
	tab := &Table[snap]{
		Metrics: []Metric[snap]{
			Counter("t_total", "Count.", nil, func(x *snap) uint64 { return x.n }),
			Gauge("t_gauge", "Gauge.", prometheus.Labels{"a": "b"}, func(x *snap) float64 { return float64(2 * x.n) }),
		},
		Snapshot:   func() snap { calls++; return snap{n: 21} },
		ExtraDescs: []*prometheus.Desc{extra},
		Extra: func(x *snap, ch chan<- prometheus.Metric) {
			ch <- prometheus.MustNewConstMetric(extra, prometheus.GaugeValue, float64(x.n), "v")
		},
	}
	want := `
# HELP t_extra Extra.
# TYPE t_extra gauge
t_extra{k="v"} 21
# HELP t_gauge Gauge.
# TYPE t_gauge gauge
t_gauge{a="b"} 42
# HELP t_total Count.
# TYPE t_total counter
t_total 21
`
	if err := testutil.CollectAndCompare(tab, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Fatalf("%d snapshots for one scrape", calls)
	}
}
