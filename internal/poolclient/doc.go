// Package poolclient is the sans-I/O machinery of a pool client's
// reliability: memory requests at pool addresses travel to the switch as
// self-contained datagrams (wire.ModePool) outside the transport's
// streams, and this package gives each its own request id, resends it
// under the same id after a retransmission timeout (RFC 6298 estimator,
// exponential backoff) until it is answered, matches the answers (one
// per copy of a replicated region), and paces the requests with a
// delay-based window per lane (like TCP Vegas, halved on a timeout). An
// Outbox holds the datagrams to send until the core's next Poll.
//
// What a request carries and what an answer means is the caller's: the
// host library's pool client (endpoint) and a memory node rebuilding a
// lost copy (memnode/node, through memnode/server) both use it, each
// encoding its own requests (Sender) and reading its own answers.
package poolclient
