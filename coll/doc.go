// Package coll is NDMA's collectives library: MPI-style Barrier, Bcast,
// Reduce, Allreduce, Allgather, ReduceScatter, Gather, Scatter and
// Alltoall on a Communicator, blocking and non-blocking, with in-network
// algorithms (multicast and aggregation through a forwarding node) and
// host algorithms (binomial tree, pipelined chain, scatter+allgather,
// ring, recursive doubling, Rabenseifner, direct) chosen per call, by
// option, by NDMA_ALGO_<OP>, or by a Tuner.
//
// Host algorithms exchange two-sided messages (endpoint.SendMsg/RecvMsg)
// tagged with the call's sequence number, so overlapping collectives on
// one communicator never mix.
//
// With Config.Hierarchy (HierarchyAuto; under a launcher the default,
// NDMA_HIERARCHY=off to opt out), ranks that share a host run every
// collective in two levels: through a shared-memory segment inside the host
// (hier.go, segment.go) and over the network only between one leader
// per host.
package coll
