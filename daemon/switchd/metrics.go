package switchd

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/internal/daemon"
	"github.com/ndma/ndma/internal/metricsrv"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire/ctrl"
)

// metricPrefix starts the name of every switch metric.
const metricPrefix = "ndma_switch_"

// snap is what one scrape reads: the server, one Stats snapshot and the
// group table.
type snap struct {
	s       *Server
	st      Stats
	groups  []fabric.GroupInfo
	nodes   []ctrl.PoolNodeInfo
	regions []ctrl.PoolSpec
}

// metric is one value the collector exports, read from a snapshot.
type metric = metricsrv.Metric[snap]

func counter(name, help string, labels prometheus.Labels, val func(st *Stats) uint64) metric {
	return metricsrv.Counter(metricPrefix+name, help, labels, func(x *snap) uint64 { return val(&x.st) })
}

func gauge(name, help string, val func(s *Server, st *Stats) float64) metric {
	return metricsrv.Gauge(metricPrefix+name, help, nil, func(x *snap) float64 { return val(x.s, &x.st) })
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Help texts of the metrics with a label, shared by their series.
const (
	helpPacketsIn  = "Packets received, by mode: unicast and multicast data from members, aggregation contributions, anycast requests and replies."
	helpPacketsOut = "Datagrams sent, by mode: forwarded unicast packets, multicast replicas, aggregation results, relayed anycast requests and replies."
	helpFaults     = "Faults injected into sent datagrams, by kind: drop, dup, reorder, corrupt."
)

func modeCounter(name, help, mode string, val func(st *Stats) uint64) metric {
	return counter(name, help, prometheus.Labels{"mode": mode}, val)
}

func faultCounter(kind string, val func(st *Stats) uint64) metric {
	return counter("fault_injections_total", helpFaults, prometheus.Labels{"kind": kind}, val)
}

// metrics is the table of everything a scrape exports besides the
// per-group series.
var metrics = []metric{
	counter("datagrams_received_total", "Datagrams handed to the switch, whatever became of them.",
		nil, func(st *Stats) uint64 { return st.Switch.Received }),
	modeCounter("packets_in_total", helpPacketsIn, "unicast", func(st *Stats) uint64 { return st.Switch.UnicastIn }),
	modeCounter("packets_in_total", helpPacketsIn, "multicast", func(st *Stats) uint64 { return st.Switch.MulticastIn }),
	modeCounter("packets_in_total", helpPacketsIn, "aggregate", func(st *Stats) uint64 { return st.Switch.AggregateIn }),
	modeCounter("packets_in_total", helpPacketsIn, "anycast", func(st *Stats) uint64 { return st.Switch.AnycastIn }),
	modeCounter("packets_out_total", helpPacketsOut, "unicast", func(st *Stats) uint64 { return st.Switch.UnicastOut }),
	modeCounter("packets_out_total", helpPacketsOut, "multicast", func(st *Stats) uint64 { return st.Switch.MulticastOut }),
	modeCounter("packets_out_total", helpPacketsOut, "aggregate", func(st *Stats) uint64 { return st.Switch.AggregateOut }),
	modeCounter("packets_out_total", helpPacketsOut, "anycast", func(st *Stats) uint64 { return st.Switch.AnycastOut }),
	counter("multicast_acks_in_total", "ACKs and NACKs received from multicast receivers.",
		nil, func(st *Stats) uint64 { return st.Switch.MulticastAcksIn }),
	counter("merged_acks_total", "Merged ACKs sent to multicast senders (cumulative = minimum, SACK = intersection over the members).",
		nil, func(st *Stats) uint64 { return st.Switch.MergedAcksOut }),

	counter("control_requests_total", "Control requests received (join, leave, destroy, heartbeat, register, lookup).",
		nil, func(st *Stats) uint64 { return st.Switch.ControlIn }),
	counter("control_refusals_total", "Control requests refused: authentication failure, malformed, not a member, unknown type.",
		nil, func(st *Stats) uint64 { return st.Switch.ControlRefused }),
	counter("auth_failures_total", "Control requests whose tag did not verify under the fabric token.",
		nil, func(st *Stats) uint64 { return st.Switch.AuthFailures }),
	counter("role_refusals_total", "Control requests refused because the sender's credential is of a role that may not send them.",
		nil, func(st *Stats) uint64 { return st.Switch.RoleRefused }),
	counter("name_refusals_total", "Joins and registrations refused because the sender's credential name does not bind the job, rank or service.",
		nil, func(st *Stats) uint64 { return st.Switch.NameRefused }),

	counter("spoofed_total", "Packets dropped because their source member id does not match the address they came from.",
		nil, func(st *Stats) uint64 { return st.Switch.Spoofed }),
	counter("malformed_total", "Datagrams dropped because they do not parse, and multicast ACKs that do not decode.",
		nil, func(st *Stats) uint64 { return st.Switch.Malformed }),
	counter("no_group_total", "Packets dropped for an unknown group, a dead sender or a missing or dead destination.",
		nil, func(st *Stats) uint64 { return st.Switch.NoGroup }),
	counter("forward_drops_total", "Datagrams not forwarded because the per-poll forwarding budget was spent.",
		nil, func(st *Stats) uint64 { return st.Switch.ForwardDropped }),
	counter("anycast_refused_total", "Anycast requests answered BUSY at once: beyond MaxAnycast or MaxAnycastPerClient.",
		nil, func(st *Stats) uint64 { return st.Switch.AnycastRefused }),
	counter("anycast_expired_total", "Anycast requests failed because their member did not reply within AnycastTimeout.",
		nil, func(st *Stats) uint64 { return st.Switch.AnycastExpired }),
	counter("anycast_held_total", "Anycast fragments left unacknowledged, to be resent, while the queue toward the relay's other end was long.",
		nil, func(st *Stats) uint64 { return st.Switch.AnycastHeld }),
	counter("anycast_stale_total", "Fragments of anycast requests whose relay had already ended, dropped.",
		nil, func(st *Stats) uint64 { return st.Switch.AnycastStale }),
	gauge("anycast_pending", "Anycast requests relayed to a member and not yet answered.",
		func(_ *Server, st *Stats) float64 { return float64(st.Switch.AnycastPending) }),
	counter("members_dead_total", "Members declared dead: they stopped heartbeating.",
		nil, func(st *Stats) uint64 { return st.Switch.MembersDead }),
	counter("members_left_total", "Members that left their group (LEAVE).",
		nil, func(st *Stats) uint64 { return st.Switch.MembersLeft }),
	counter("stalls_total", "The switch's own stalls (its loop not run for a quarter of the heartbeat timeout), left out of members' silence.",
		nil, func(st *Stats) uint64 { return st.Switch.Stalls }),
	counter("events_dropped_total", "Job and pool events not logged because fabric.MaxEvents were already waiting.",
		nil, func(st *Stats) uint64 { return st.Switch.EventsDropped }),

	faultCounter("drop", func(st *Stats) uint64 { return st.Switch.FaultDrops }),
	faultCounter("dup", func(st *Stats) uint64 { return st.Switch.FaultDups }),
	faultCounter("reorder", func(st *Stats) uint64 { return st.Switch.FaultReorders }),
	faultCounter("corrupt", func(st *Stats) uint64 { return st.Switch.FaultCorrupts }),

	gauge("pool_slots", "Aggregation slots configured.",
		func(_ *Server, st *Stats) float64 { return float64(st.Switch.Pool.Slots) }),
	gauge("pool_slots_in_use", "Aggregation slots holding a chunk (open, or complete and not yet released).",
		func(_ *Server, st *Stats) float64 { return float64(st.Switch.Pool.InUse) }),
	counter("pool_contributions_total", "Aggregation contributions recorded.",
		nil, func(st *Stats) uint64 { return st.Switch.Pool.Contributions }),
	counter("pool_completions_total", "Aggregation slots completed (every member contributed).",
		nil, func(st *Stats) uint64 { return st.Switch.Pool.Completions }),
	counter("pool_duplicates_total", "Aggregation contributions dropped as duplicates.",
		nil, func(st *Stats) uint64 { return st.Switch.Pool.Duplicates }),
	counter("pool_no_slot_total", "Aggregation contributions held back for want of a free slot.",
		nil, func(st *Stats) uint64 { return st.Switch.Pool.NoSlot }),
	counter("pool_mismatches_total", "Aggregation contributions refused as invalid or inconsistent with their slot.",
		nil, func(st *Stats) uint64 { return st.Switch.Pool.Mismatches }),

	counter("transport_packets_sent_total", "Data packets the switch's own streams sent, retransmissions included.",
		nil, func(st *Stats) uint64 { return st.Switch.Transport.PacketsSent }),
	counter("transport_packets_received_total", "Data packets received on streams the switch terminates, duplicates included.",
		nil, func(st *Stats) uint64 { return st.Switch.Transport.PacketsReceived }),
	counter("transport_retransmits_total", "Data packets the switch's own streams sent again after a timeout or a loss report.",
		nil, func(st *Stats) uint64 { return st.Switch.Transport.PacketsRetransmitted }),
	counter("transport_fast_retransmits_total", "Losses detected from acknowledgements rather than a timeout.",
		nil, func(st *Stats) uint64 { return st.Switch.Transport.FastRetransmits }),
	counter("transport_timeouts_total", "Retransmission timer expiries.",
		nil, func(st *Stats) uint64 { return st.Switch.Transport.Timeouts }),
	counter("transport_payload_bytes_sent_total", "Payload bytes of data packets sent, retransmissions included.",
		nil, func(st *Stats) uint64 { return st.Switch.Transport.BytesSent }),
	counter("transport_payload_bytes_received_total", "Payload bytes of new (not duplicate) data packets received.",
		nil, func(st *Stats) uint64 { return st.Switch.Transport.BytesReceived }),
	counter("transport_acks_sent_total", "Acknowledgement frames sent, NACKs included.",
		nil, func(st *Stats) uint64 { return st.Switch.Transport.AcksSent }),
	counter("transport_acks_received_total", "Acknowledgement frames received.",
		nil, func(st *Stats) uint64 { return st.Switch.Transport.AcksReceived }),
	counter("transport_nacks_sent_total", "Acknowledgement frames sent that also asked for the gaps to be resent.",
		nil, func(st *Stats) uint64 { return st.Switch.Transport.NacksSent }),
	counter("transport_duplicates_total", "Data packets received again and dropped.",
		nil, func(st *Stats) uint64 { return st.Switch.Transport.Duplicates }),
	counter("transport_out_of_window_total", "Data packets dropped for arriving beyond the receive window.",
		nil, func(st *Stats) uint64 { return st.Switch.Transport.OutOfWindow }),
	counter("transport_partial_overflow_total", "Data packets dropped because too many partial messages were being reassembled.",
		nil, func(st *Stats) uint64 { return st.Switch.Transport.PartialOverflow }),
	counter("transport_malformed_total", "Datagrams the transport dropped because they do not parse.",
		nil, func(st *Stats) uint64 { return st.Switch.Transport.Malformed }),
	counter("transport_unexpected_total", "Well-formed datagrams the transport dropped (not admitted, unknown peer, peer table full).",
		nil, func(st *Stats) uint64 { return st.Switch.Transport.Unexpected }),
	counter("transport_refused_total", "Data packets the transport refused.",
		nil, func(st *Stats) uint64 { return st.Switch.Transport.Refused }),
	counter("transport_peers_dead_total", "Peers declared dead for acknowledging nothing for the dead timeout.",
		nil, func(st *Stats) uint64 { return st.Switch.Transport.PeersDead }),
	counter("transport_messages_completed_total", "Outgoing messages fully acknowledged.",
		nil, func(st *Stats) uint64 { return st.Switch.Transport.MessagesCompleted }),
	counter("transport_messages_failed_total", "Outgoing messages abandoned (peer dead).",
		nil, func(st *Stats) uint64 { return st.Switch.Transport.MessagesFailed }),

	counter("memory_pool_requests_total", "Pool requests (reads, writes, atomics, vector ops, chain hops, optimizer steps) received, by result: forwarded to a memory node, or refused by the switch.",
		prometheus.Labels{"result": "received"}, func(st *Stats) uint64 { return st.Switch.PoolIn }),
	counter("memory_pool_requests_total", "Pool requests (reads, writes, atomics, vector ops, chain hops, optimizer steps) received, by result: forwarded to a memory node, or refused by the switch.",
		prometheus.Labels{"result": "refused"}, func(st *Stats) uint64 { return st.Switch.PoolRefused }),
	counter("memory_pool_rebuilt_total", "Copies lost in a memory node restart and rebuilt from the other copies.",
		nil, func(st *Stats) uint64 { return st.Switch.PoolRebuilt }),
	counter("memory_pool_forwarded_total", "Pool request datagrams forwarded to memory nodes (one per copy of a replicated write).",
		nil, func(st *Stats) uint64 { return st.Switch.PoolOut }),

	gauge("groups", "Groups (jobs and services) the switch holds.",
		func(_ *Server, st *Stats) float64 { return float64(st.Switch.Groups) }),
	gauge("members", "Live members over all groups.",
		func(_ *Server, st *Stats) float64 { return float64(st.Switch.Members) }),
	gauge("mtu_bytes", "Largest datagram the switch's own streams send, in bytes.",
		func(s *Server, _ *Stats) float64 { return float64(s.cfg.MTU) }),
	gauge("heartbeat_timeout_seconds", "How long a member may go without a heartbeat before it is declared dead.",
		func(s *Server, _ *Stats) float64 { return s.cfg.HeartbeatTimeout.Seconds() }),
	gauge("etcd_backlog", "Pool map changes queued for etcd, not yet written (at most one per region; 0 without --etcd).",
		func(_ *Server, st *Stats) float64 { return float64(st.Etcd.Backlog) }),
	counter("etcd_writes_total", "Pool region records written to (or deleted from) etcd.",
		nil, func(st *Stats) uint64 { return st.Etcd.Written }),
	counter("etcd_write_failures_total", "Writes to etcd that got no answer (tried again).",
		nil, func(st *Stats) uint64 { return st.Etcd.Failed }),
	counter("etcd_conflicts_total", "Pool region records in etcd that another writer changed: not overwritten, no longer written by this switch.",
		nil, func(st *Stats) uint64 { return st.Etcd.Conflicts + st.Etcd.Foreign }),
	counter("etcd_records_refused_total", "Values under the etcd prefix refused: not a region's record, or one that does not decode.",
		nil, func(st *Stats) uint64 { return st.Etcd.Refused }),
	counter("memory_pool_regions_loaded_total", "Pool regions taken from etcd when the switch started.",
		nil, func(st *Stats) uint64 { return st.Switch.PoolRegionsLoaded }),
}

// Per-memory-node series of the pool, labelled with the node's id and
// address.
var (
	nodeLabels   = []string{"node", "addr"}
	nodeCapacity = prometheus.NewDesc(metricPrefix+"memory_pool_node_capacity_bytes", "Memory a node lends to the pool.", nodeLabels, nil)
	nodeUsed     = prometheus.NewDesc(metricPrefix+"memory_pool_node_used_bytes", "Memory of a node given to pool regions.", nodeLabels, nil)
	nodeAlive    = prometheus.NewDesc(metricPrefix+"memory_pool_node_alive", "1 while a node's offers (its heartbeat) arrive, else 0.", nodeLabels, nil)
	nodeRequests = prometheus.NewDesc(metricPrefix+"memory_pool_node_requests_total", "Pool requests forwarded to a node.", nodeLabels, nil)
	nodeBytes    = prometheus.NewDesc(metricPrefix+"memory_pool_node_request_bytes_total", "Payload bytes of the pool requests forwarded to a node.", nodeLabels, nil)
	poolRegions  = prometheus.NewDesc(metricPrefix+"memory_pool_regions", "Pool regions.", nil, nil)
)

// poolSeries exports the pool's per-node series of one snapshot.
func poolSeries(x *snap, ch chan<- prometheus.Metric) {
	for _, n := range x.nodes {
		l := []string{strconv.Itoa(int(n.ID)), n.Addr.String()}
		ch <- prometheus.MustNewConstMetric(nodeCapacity, prometheus.GaugeValue, float64(n.Capacity), l...)
		ch <- prometheus.MustNewConstMetric(nodeUsed, prometheus.GaugeValue, float64(n.Used), l...)
		ch <- prometheus.MustNewConstMetric(nodeAlive, prometheus.GaugeValue, b2f(n.Alive), l...)
		ch <- prometheus.MustNewConstMetric(nodeRequests, prometheus.CounterValue, float64(n.Requests), l...)
		ch <- prometheus.MustNewConstMetric(nodeBytes, prometheus.CounterValue, float64(n.Bytes), l...)
	}
	ch <- prometheus.MustNewConstMetric(poolRegions, prometheus.GaugeValue, float64(len(x.regions)))
}

// Per-group series, labelled with the group's id, name and kind (job or
// service).
var (
	groupLabels       = []string{"group", "name", "kind"}
	groupMembersAlive = prometheus.NewDesc(metricPrefix+"group_members_alive",
		"Live members of a group.", groupLabels, nil)
	groupMembers = prometheus.NewDesc(metricPrefix+"group_members",
		"Members of a group, live or dead.", groupLabels, nil)
)

// groupSeries exports the per-group series of one snapshot.
func groupSeries(x *snap, ch chan<- prometheus.Metric) {
	for _, g := range x.groups {
		alive := 0
		for _, a := range g.Alive {
			if a {
				alive++
			}
		}
		labels := []string{strconv.FormatUint(uint64(g.ID), 10), g.Name, groupKind(g)}
		ch <- prometheus.MustNewConstMetric(groupMembersAlive, prometheus.GaugeValue, float64(alive), labels...)
		ch <- prometheus.MustNewConstMetric(groupMembers, prometheus.GaugeValue, float64(len(g.Members)), labels...)
	}
}

func groupKind(g fabric.GroupInfo) string {
	if g.Service {
		return "service"
	}
	return "job"
}

// metricsHandler returns the /metrics handler: the switch's counters and
// group table read once per scrape (one Stats and one Groups call, so the
// forwarding path does no metric work), plus the Go runtime and process
// collectors, on a private registry.
func (s *Server) metricsHandler() (http.Handler, error) {
	return metricsrv.Handler(s.log, &metricsrv.Table[snap]{
		Metrics: daemon.Series(metricPrefix, metrics,
			func(x *snap) *netio.UDPStats { return &x.st.UDP },
			func(x *snap) *secure.LayerStats { return &x.st.Security }),
		Snapshot: func() snap {
			nodes, regions := s.Pool()
			return snap{s: s, st: s.Stats(), groups: s.Groups(), nodes: nodes, regions: regions}
		},
		ExtraDescs: []*prometheus.Desc{groupMembersAlive, groupMembers, nodeCapacity, nodeUsed, nodeAlive, nodeRequests, nodeBytes, poolRegions},
		Extra: func(x *snap, ch chan<- prometheus.Metric) {
			groupSeries(x, ch)
			poolSeries(x, ch)
		},
	})
}
