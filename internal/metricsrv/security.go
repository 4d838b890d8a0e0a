package metricsrv

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ndma/ndma/secure"
)

// Security is the series of a daemon's security layer (secure.Layer's
// counters), named prefix+"security_...", read from a snapshot of type T
// through get. Every daemon that seals exports the same set.
func Security[T any](prefix string, get func(*T) *secure.LayerStats) []Metric[T] {
	c := func(name, help string, labels prometheus.Labels, val func(*secure.LayerStats) uint64) Metric[T] {
		return Counter(prefix+"security_"+name, help, labels, func(x *T) uint64 { return val(get(x)) })
	}
	const dropped = "Datagrams the security layer dropped, by reason: plain (not sealed), no_sa (sealed for no session of ours, or from another address), auth (failing authentication), replay (replayed or too old), queue (outbound: held too long, handshake failed, table full)."
	const sessions = "Sessions ended or restarted, by cause: reset (the peer said it no longer knew the session: a new handshake), lost (the peer did not answer that handshake), evicted (too many sessions for one credential or address), revoked (the peer's credential expired or was revoked)."
	const handshakes = "Handshakes, by result: established, failed (refused or given up), duplicate (an answer to one already completed), restarted (started again by the timer after giving way to the peer's)."
	return []Metric[T]{
		c("sealed_total", "Datagrams sealed.", nil, func(s *secure.LayerStats) uint64 { return s.Sealed }),
		c("opened_total", "Datagrams opened (authenticated and, with encryption, decrypted).", nil, func(s *secure.LayerStats) uint64 { return s.Opened }),
		c("handshakes_total", handshakes, prometheus.Labels{"result": "established"}, func(s *secure.LayerStats) uint64 { return s.Handshakes }),
		c("handshakes_total", handshakes, prometheus.Labels{"result": "failed"}, func(s *secure.LayerStats) uint64 { return s.HandshakesFailed }),
		c("handshakes_total", handshakes, prometheus.Labels{"result": "duplicate"}, func(s *secure.LayerStats) uint64 { return s.HandshakeDuplicates }),
		c("handshakes_total", handshakes, prometheus.Labels{"result": "restarted"}, func(s *secure.LayerStats) uint64 { return s.HandshakeRestarts }),
		c("dropped_total", dropped, prometheus.Labels{"reason": "plain"}, func(s *secure.LayerStats) uint64 { return s.DroppedPlain }),
		c("dropped_total", dropped, prometheus.Labels{"reason": "no_sa"}, func(s *secure.LayerStats) uint64 { return s.DroppedNoSA }),
		c("dropped_total", dropped, prometheus.Labels{"reason": "auth"}, func(s *secure.LayerStats) uint64 { return s.DroppedAuth }),
		c("dropped_total", dropped, prometheus.Labels{"reason": "replay"}, func(s *secure.LayerStats) uint64 { return s.DroppedReplay }),
		c("dropped_total", dropped, prometheus.Labels{"reason": "queue"}, func(s *secure.LayerStats) uint64 { return s.DroppedQueue }),
		c("seal_required_sent_total", "Answers to unsealed datagrams saying only sealed ones are taken (rate permitting).", nil, func(s *secure.LayerStats) uint64 { return s.SealRequiredSent }),
		c("sessions_ended_total", sessions, prometheus.Labels{"cause": "reset"}, func(s *secure.LayerStats) uint64 { return s.SessionsReset }),
		c("sessions_ended_total", sessions, prometheus.Labels{"cause": "lost"}, func(s *secure.LayerStats) uint64 { return s.SessionsLost }),
		c("sessions_ended_total", sessions, prometheus.Labels{"cause": "evicted"}, func(s *secure.LayerStats) uint64 { return s.SessionsEvicted }),
		c("sessions_ended_total", sessions, prometheus.Labels{"cause": "revoked"}, func(s *secure.LayerStats) uint64 { return s.SessionsRevoked }),
		c("rekeys_total", "Sessions replaced by new keys for their age or the datagrams sealed.", nil, func(s *secure.LayerStats) uint64 { return s.Rekeys }),
		Gauge(prefix+"security_peers", "Addresses with a session or a handshake under way.", nil, func(x *T) float64 { return float64(get(x).Peers) }),
	}
}
