package kvd

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ndma/ndma/internal/daemon"
	"github.com/ndma/ndma/internal/metricsrv"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
)

// metricPrefix starts the name of every kvd metric.
const metricPrefix = "ndma_kvd_"

type metric = metricsrv.Metric[Stats]

func counter(name, help string, labels prometheus.Labels, val func(st *Stats) uint64) metric {
	return metricsrv.Counter(metricPrefix+name, help, labels, val)
}

func gauge(name, help string, val func(st *Stats) float64) metric {
	return metricsrv.Gauge(metricPrefix+name, help, nil, val)
}

const helpWrites = "Write requests the owner answered, by result: applied, refused (absent, exists, full, too large, bad), or failed (a pool write failed: outcome unknown to the client)."

// metrics is the table of everything a scrape exports.
var metrics = []metric{
	counter("writes_total", helpWrites, prometheus.Labels{"result": "applied"}, func(st *Stats) uint64 { return st.Owner.Writes }),
	counter("writes_total", helpWrites, prometheus.Labels{"result": "refused"}, func(st *Stats) uint64 { return st.Owner.Refused }),
	counter("writes_total", helpWrites, prometheus.Labels{"result": "failed"}, func(st *Stats) uint64 { return st.Owner.Failed }),
	counter("expired_total", "Expired values the owner freed (touched by a write, or found by its sweep).",
		nil, func(st *Stats) uint64 { return st.Owner.Expired }),
	counter("registrations_total", "Times the owner took its rank: at start, after a switch restart, or over from another process of the rank.",
		nil, func(st *Stats) uint64 { return st.Owner.Registrations }),
	counter("lease_lapsed_total", "Pool writes refused or cut short because the switch had not confirmed the owner's membership within its lease.",
		nil, func(st *Stats) uint64 { return st.Owner.LeaseLapsed }),
	counter("fenced_total", "Pool writes the switch or the memory nodes refused for their fencing token: another process of the rank raised the fence.",
		nil, func(st *Stats) uint64 { return st.Owner.Fenced }),
	counter("one_sided_total", "Slots the owner reserved for values clients write one-sidedly, by outcome: reserved, published, expired (the client's time ran out before it published).",
		prometheus.Labels{"outcome": "reserved"}, func(st *Stats) uint64 { return st.Owner.Reserved }),
	counter("one_sided_total", "Slots the owner reserved for values clients write one-sidedly, by outcome: reserved, published, expired (the client's time ran out before it published).",
		prometheus.Labels{"outcome": "published"}, func(st *Stats) uint64 { return st.Owner.OneSided }),
	counter("one_sided_total", "Slots the owner reserved for values clients write one-sidedly, by outcome: reserved, published, expired (the client's time ran out before it published).",
		prometheus.Labels{"outcome": "expired"}, func(st *Stats) uint64 { return st.Owner.ReservationsExpired }),
	gauge("serving", "1 while the owner holds its rank and may write; 0 while it stands by or waits for its lease.",
		func(st *Stats) float64 {
			if st.Owner.Serving {
				return 1
			}
			return 0
		}),
	gauge("keys", "Keys with a value in the owner's shards, expired ones not yet freed included.",
		func(st *Stats) float64 { return float64(st.Owner.Keys) }),
	gauge("table_buckets", "Buckets of the owner's shards' hash tables: keys over buckets is their load.",
		func(st *Stats) float64 { return float64(st.Owner.Buckets) }),
	counter("table_growths_total", "Shard tables the owner grew to twice their buckets (the key space created with room for it: kv create --max-buckets).",
		nil, func(st *Stats) uint64 { return st.Owner.Growths }),
	gauge("tables_growing", "Shards whose bigger table the owner is writing now.",
		func(st *Stats) float64 { return float64(st.Owner.Growing) }),
	gauge("heap_bytes", "Value space of the owner's shards, in bytes.",
		func(st *Stats) float64 { return float64(st.Owner.Heap.Bytes) }),
	gauge("heap_used_bytes", "Bytes of the value slots in use.",
		func(st *Stats) float64 { return float64(st.Owner.Heap.UsedBytes) }),
	gauge("heap_pages", "Heap pages given to a size class.",
		func(st *Stats) float64 { return float64(st.Owner.Heap.Pages) }),
	counter("packets_retransmitted_total", "Data packets sent again after a timeout or a loss report.",
		nil, func(st *Stats) uint64 { return st.Endpoint.Transport.PacketsRetransmitted }),
}

// metricsHandler returns the /metrics handler.
func (s *Server) metricsHandler() (http.Handler, error) {
	return metricsrv.Handler(s.log, &metricsrv.Table[Stats]{
		Metrics: daemon.Series(metricPrefix, metrics,
			func(x *Stats) *netio.UDPStats { return &x.UDP },
			func(x *Stats) *secure.LayerStats { return &x.Security }),
		Snapshot: s.Stats,
	})
}
