package metricsrv

import (
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metric is one series a Table exports, read from a snapshot of type T.
type Metric[T any] struct {
	desc *prometheus.Desc
	kind prometheus.ValueType
	val  func(*T) float64
}

// Counter is a counter series (constant labels optional).
func Counter[T any](name, help string, labels prometheus.Labels, val func(*T) uint64) Metric[T] {
	return Metric[T]{
		desc: prometheus.NewDesc(name, help, nil, labels),
		kind: prometheus.CounterValue,
		val:  func(x *T) float64 { return float64(val(x)) },
	}
}

// Gauge is a gauge series (constant labels optional).
func Gauge[T any](name, help string, labels prometheus.Labels, val func(*T) float64) Metric[T] {
	return Metric[T]{desc: prometheus.NewDesc(name, help, nil, labels), kind: prometheus.GaugeValue, val: val}
}

// Table is a prometheus.Collector that takes one snapshot per scrape and
// exports every Metric from it, so the daemon's hot path does no metric
// work at all. Extra, if set, adds series that are not known in advance
// (their descriptors in ExtraDescs).
type Table[T any] struct {
	Metrics    []Metric[T]
	Snapshot   func() T
	ExtraDescs []*prometheus.Desc
	Extra      func(snap *T, ch chan<- prometheus.Metric)
}

// Describe implements prometheus.Collector.
func (t *Table[T]) Describe(ch chan<- *prometheus.Desc) {
	for i := range t.Metrics {
		ch <- t.Metrics[i].desc
	}
	for _, d := range t.ExtraDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (t *Table[T]) Collect(ch chan<- prometheus.Metric) {
	snap := t.Snapshot()
	for i := range t.Metrics {
		m := &t.Metrics[i]
		ch <- prometheus.MustNewConstMetric(m.desc, m.kind, m.val(&snap))
	}
	if t.Extra != nil {
		t.Extra(&snap, ch)
	}
}

// Handler returns a /metrics handler over a private registry holding c and
// the Go runtime and process collectors.
func Handler(log *slog.Logger, c prometheus.Collector) (http.Handler, error) {
	reg := prometheus.NewRegistry()
	for _, c := range []prometheus.Collector{
		c,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		Registry: reg,
	}), nil
}
