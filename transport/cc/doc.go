// Package cc holds the congestion control and path estimation that the
// reliable transport and the pool client's request lanes share: one RTT
// estimator (RTT), one base of one-way delays (OWD), and two windows,
// the transport's delay-based Swift window (Swift) and the pool lanes'
// Vegas window (Vegas).
//
// Like the transport above it, the package does no I/O and reads no
// clock: every method that needs the time takes it. Nothing here is safe
// for concurrent use; each estimator belongs to the stream or lane whose
// owner feeds it.
package cc
