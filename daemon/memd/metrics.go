package memd

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ndma/ndma/internal/daemon"
	"github.com/ndma/ndma/internal/metricsrv"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
)

// metricPrefix starts the name of every memd metric.
const metricPrefix = "ndma_memd_"

// snap is what one scrape reads: the server and one Stats snapshot.
type snap struct {
	s  *Server
	st Stats
}

// metric is one value the collector exports, read from a snapshot.
type metric = metricsrv.Metric[snap]

func counter(name, help string, labels prometheus.Labels, val func(st *Stats) uint64) metric {
	return metricsrv.Counter(metricPrefix+name, help, labels, func(x *snap) uint64 { return val(&x.st) })
}

func gauge(name, help string, val func(s *Server, st *Stats) float64) metric {
	return metricsrv.Gauge(metricPrefix+name, help, nil, func(x *snap) float64 { return val(x.s, &x.st) })
}

const helpPoolRequests = "Pool requests and chain hops the switch forwarded here, by result: served (status ok) or refused (any other status)."

// metrics is the table of everything a scrape exports.
var metrics = []metric{
	counter("pool_requests_total", helpPoolRequests,
		prometheus.Labels{"result": "served"}, func(st *Stats) uint64 { return st.Node.Server.Pool.Served }),
	counter("pool_requests_total", helpPoolRequests,
		prometheus.Labels{"result": "refused"}, func(st *Stats) uint64 { return st.Node.Server.Pool.Refused }),
	counter("pool_duplicates_total", "Resent mutating pool requests answered from the reply cache, not applied again.",
		nil, func(st *Stats) uint64 { return st.Node.Server.Pool.Duplicates }),
	counter("pool_dropped_total", "Pool datagrams dropped: not from the switch, a bad reply-to address, or the send queue full.",
		nil, func(st *Stats) uint64 { return st.Node.Server.Pool.Dropped }),
	counter("pool_grants_total", "Grants of node memory to pool regions received from the switch (each scrubbed first).",
		nil, func(st *Stats) uint64 { return st.Node.Server.Pool.Grants }),
	counter("pool_revokes_total", "Grants taken back by the switch (regions freed).",
		nil, func(st *Stats) uint64 { return st.Node.Server.Pool.Revokes }),
	counter("pool_replies_evicted_total", "Cached replies pushed out before their TTL by the cache's size bound.",
		nil, func(st *Stats) uint64 { return st.Node.Server.Pool.RepliesEvicted }),
	counter("pool_rebuilds_total", "Rebuilds of copies this node lost in a restart, by result: done or failed.",
		prometheus.Labels{"result": "done"}, func(st *Stats) uint64 { return st.Node.Server.Pool.Rebuilt }),
	counter("pool_rebuilds_total", "Rebuilds of copies this node lost in a restart, by result: done or failed.",
		prometheus.Labels{"result": "failed"}, func(st *Stats) uint64 { return st.Node.Server.Pool.RebuildsFailed }),
	counter("pool_rebuild_bytes_total", "Bytes copied into this node's rebuilt copies.",
		nil, func(st *Stats) uint64 { return st.Node.Server.Pool.RebuildBytes }),
	counter("durable_failures_total", "Of a durable node (--dir), by what failed: saving the grant record (save), flushing memory (sync: a write answered BUSY, a grant or rebuild failed).",
		prometheus.Labels{"what": "save"}, func(st *Stats) uint64 { return st.Node.Server.Pool.SaveFailed }),
	counter("durable_failures_total", "Of a durable node (--dir), by what failed: saving the grant record (save), flushing memory (sync: a write answered BUSY, a grant or rebuild failed).",
		prometheus.Labels{"what": "sync"}, func(st *Stats) uint64 { return st.Node.Server.Pool.SyncFailed }),
	gauge("pool_grants", "Pool regions holding memory on this node now.",
		func(_ *Server, st *Stats) float64 { return float64(st.Node.Server.Pool.GrantsHeld) }),

	counter("requests_total", "Requests executed, by result: served (status ok) or refused (any other status).",
		prometheus.Labels{"result": "served"}, func(st *Stats) uint64 { return st.Node.Server.RequestsServed }),
	counter("requests_total", "Requests executed, by result: served (status ok) or refused (any other status).",
		prometheus.Labels{"result": "refused"}, func(st *Stats) uint64 { return st.Node.Server.RequestsRefused }),
	counter("responses_dropped_total", "Responses not sent because the transport's send queue was full.",
		nil, func(st *Stats) uint64 { return st.Node.Server.ResponsesDropped }),
	counter("unmatched_responses_total", "Response packets received that match no outstanding operation.",
		nil, func(st *Stats) uint64 { return st.Node.UnmatchedResponses }),

	counter("packets_sent_total", "Data packets sent, retransmissions included.",
		nil, func(st *Stats) uint64 { return st.Node.Transport.PacketsSent }),
	counter("packets_received_total", "Data packets received, duplicates included.",
		nil, func(st *Stats) uint64 { return st.Node.Transport.PacketsReceived }),
	counter("packets_retransmitted_total", "Data packets sent again after a timeout or a loss report.",
		nil, func(st *Stats) uint64 { return st.Node.Transport.PacketsRetransmitted }),
	counter("fast_retransmits_total", "Losses detected from acknowledgements rather than a timeout.",
		nil, func(st *Stats) uint64 { return st.Node.Transport.FastRetransmits }),
	counter("retransmission_timeouts_total", "Retransmission timer expiries.",
		nil, func(st *Stats) uint64 { return st.Node.Transport.Timeouts }),
	counter("payload_bytes_sent_total", "Payload bytes of data packets sent, retransmissions included.",
		nil, func(st *Stats) uint64 { return st.Node.Transport.BytesSent }),
	counter("payload_bytes_received_total", "Payload bytes of new (not duplicate) data packets received.",
		nil, func(st *Stats) uint64 { return st.Node.Transport.BytesReceived }),
	counter("acks_sent_total", "Acknowledgement frames sent, NACKs included.",
		nil, func(st *Stats) uint64 { return st.Node.Transport.AcksSent }),
	counter("acks_received_total", "Acknowledgement frames received.",
		nil, func(st *Stats) uint64 { return st.Node.Transport.AcksReceived }),
	counter("nacks_sent_total", "Acknowledgement frames sent that also asked for the gaps to be resent.",
		nil, func(st *Stats) uint64 { return st.Node.Transport.NacksSent }),
	counter("duplicates_total", "Data packets received again and dropped.",
		nil, func(st *Stats) uint64 { return st.Node.Transport.Duplicates }),
	counter("out_of_window_total", "Data packets dropped for arriving beyond the receive window.",
		nil, func(st *Stats) uint64 { return st.Node.Transport.OutOfWindow }),
	counter("partial_overflow_total", "Data packets dropped because too many partial messages were being reassembled.",
		nil, func(st *Stats) uint64 { return st.Node.Transport.PartialOverflow }),
	counter("malformed_total", "Datagrams dropped because they do not parse: short, wrong version, bad checksum, unknown fields, bad ACK frame.",
		nil, func(st *Stats) uint64 { return st.Node.Transport.Malformed }),
	counter("unexpected_total", "Well-formed datagrams dropped: authentication requested, non-unicast mode, wrong destination, ACK from an unknown peer, peer table full.",
		nil, func(st *Stats) uint64 { return st.Node.Transport.Unexpected }),
	counter("peers_dead_total", "Peers declared dead for acknowledging nothing for the dead timeout.",
		nil, func(st *Stats) uint64 { return st.Node.Transport.PeersDead }),
	counter("messages_completed_total", "Outgoing messages fully acknowledged.",
		nil, func(st *Stats) uint64 { return st.Node.Transport.MessagesCompleted }),
	counter("messages_failed_total", "Outgoing messages abandoned (peer dead).",
		nil, func(st *Stats) uint64 { return st.Node.Transport.MessagesFailed }),

	counter("udp_gso_sends_total", "Send calls that carried several datagrams with UDP GSO.",
		nil, func(st *Stats) uint64 { return st.UDP.GSOSends }),
	counter("udp_gro_receives_total", "Receive buffers in which the kernel had coalesced several datagrams (UDP GRO).",
		nil, func(st *Stats) uint64 { return st.UDP.GROReceives }),

	gauge("regions", "Memory regions the node exposes.",
		func(s *Server, _ *Stats) float64 { return float64(len(s.regions)) }),
	gauge("region_bytes", "Total size of the node's regions, in bytes.",
		func(s *Server, _ *Stats) float64 { return float64(s.bytes) }),
	gauge("mtu_bytes", "Largest datagram the node sends, in bytes.",
		func(s *Server, _ *Stats) float64 { return float64(s.mtu) }),
}

// collector exports a Server's counters. It reads them when scraped, with
// one Stats call, so the request path does no metric work at all.
// metricsHandler returns the /metrics handler: the node's counters read
// from one Stats snapshot per scrape, plus the Go runtime and process
// collectors, on a private registry.
func (s *Server) metricsHandler() (http.Handler, error) {
	return metricsrv.Handler(s.log, &metricsrv.Table[snap]{
		Metrics: daemon.Series(metricPrefix, metrics,
			func(x *snap) *netio.UDPStats { return &x.st.UDP },
			func(x *snap) *secure.LayerStats { return &x.st.Security }),
		Snapshot: func() snap { return snap{s: s, st: s.Stats()} },
	})
}
