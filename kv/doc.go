// Package kv is a key-value store in the memory pool: a hash table of
// self-verifying buckets and the values they point to live in one pool
// region (a key space), spread over the memory nodes like any region.
//
// A GET is one-sided: the client reads the buckets on the key's probe
// path and then the value straight from the memory nodes, and checks
// both (a checksum over each, the value's key and version against the
// bucket's); what a write racing the read tore is read again. No owner
// process takes part in a GET, so reads go on while owners restart.
//
// Writes (Set, Add, Replace, CompareAndSwap, Append, Prepend, Incr,
// Touch, Delete) go by anycast, with key affinity, to the owner of the
// key's shard (Owner, run by `ndma kvd`).
// The owner writes a new copy of the value into free space of its shard
// (never over the live one), then publishes it by rewriting the bucket
// with the next version, and only then answers. A reader that saw the
// old bucket still finds the old value, or, when its space was reused,
// a record whose key or version does not match, and reads again.
//
// A value of ClientConfig.OneSidedFrom bytes or more is written by the
// client itself (onesided.go): the owner reserves a slot and fixes the
// value's version, the client writes the record there one-sidedly under
// the owner's fence, and the owner publishes it, answering with the
// next slot of that size class; the value's bytes cross the network
// once and never pass through the owner.
//
// A value may carry an expiry (SetOptions.TTL, Touch): an absolute
// time in its record, past which readers find the key absent by their
// own clock, and owners treat it as absent and free its value (when a
// write touches the key, and in a sweep of their shards).
//
// A shard's table grows (in a key space made with Layout.MaxBuckets):
// past OwnerConfig.GrowAt of its buckets the owner writes a table of
// twice the buckets beside it while writes go on, then switches the
// shard's descriptor to it in one write; GETs read the descriptor with
// the buckets and never stop.
//
// An owner keeps its shards' index and allocator in memory and rebuilds
// both from the region when it starts: space a crashed owner had
// written but not yet published is reused, nothing else is lost.
//
// Layout of a key space region (all integers little-endian):
//
//	header   4 KiB at offset 0: magic, version and geometry (Layout)
//	buckets  Shards × Buckets × 32 B, a shard's buckets contiguous; with
//	         Layout.MaxBuckets, per shard two table areas (even and odd
//	         generations) and a table descriptor (grow.go)
//	heap     Shards × HeapBytes, a shard's values in pages of PageBytes,
//	         each page cut into slots of one size class
package kv
