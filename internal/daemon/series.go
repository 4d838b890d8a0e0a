package daemon

import (
	"slices"

	"github.com/ndma/ndma/internal/metricsrv"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
)

// Series is a daemon's metric table: its own series, then those of its UDP
// socket (UDPSeries) and of its security layer (metricsrv.Security), all
// named prefix+"...", read from a snapshot of type T.
func Series[T any](prefix string, own []metricsrv.Metric[T], udp func(*T) *netio.UDPStats, sec func(*T) *secure.LayerStats) []metricsrv.Metric[T] {
	return slices.Concat(own, UDPSeries(prefix, udp), metricsrv.Security(prefix, sec))
}

// UDPSeries is the series of a daemon's UDP socket (netio.UDPStats) that
// every daemon exports, named prefix+"udp_...", read from a snapshot of
// type T through get.
func UDPSeries[T any](prefix string, get func(*T) *netio.UDPStats) []metricsrv.Metric[T] {
	c := func(name, help string, val func(*netio.UDPStats) uint64) metricsrv.Metric[T] {
		return metricsrv.Counter(prefix+"udp_"+name, help, nil, func(x *T) uint64 { return val(get(x)) })
	}
	g := func(name, help string, val func(*netio.UDPStats) bool) metricsrv.Metric[T] {
		return metricsrv.Gauge(prefix+"udp_"+name, help, nil, func(x *T) float64 {
			if val(get(x)) {
				return 1
			}
			return 0
		})
	}
	return []metricsrv.Metric[T]{
		c("datagrams_sent_total", "UDP datagrams the kernel accepted for sending.", func(s *netio.UDPStats) uint64 { return s.DatagramsSent }),
		c("datagrams_received_total", "UDP datagrams received.", func(s *netio.UDPStats) uint64 { return s.DatagramsReceived }),
		c("bytes_sent_total", "UDP payload bytes sent.", func(s *netio.UDPStats) uint64 { return s.BytesSent }),
		c("bytes_received_total", "UDP payload bytes received.", func(s *netio.UDPStats) uint64 { return s.BytesReceived }),
		c("send_drops_total", "Datagrams the kernel refused to send (treated as loss).", func(s *netio.UDPStats) uint64 { return s.SendDrops }),
		c("receive_drops_total", "Datagrams discarded on receive for not fitting the buffer.", func(s *netio.UDPStats) uint64 { return s.ReceiveDrops }),
		g("gso_enabled", "1 if sends use UDP GSO, else 0.", func(s *netio.UDPStats) bool { return s.GSOEnabled }),
		g("gro_enabled", "1 if the socket receives with UDP GRO, else 0.", func(s *netio.UDPStats) bool { return s.GROEnabled }),
	}
}
