// Package mq is a message queue in the memory pool: a topic is P
// partitions, each an append-only log in pool space that producers
// write and consumers read one-sidedly, with no broker process.
//
// A topic lives in two pool regions. The control region (one copy,
// since the pool runs atomics only on regions with one copy) holds, for
// each partition, a 64-byte header on its own stripe: the tail
// reservation counter, the committed offset, the start of the retained
// log, the count of sealed holes and the seal claim; after them, the
// consumer groups' committed offsets. The data region (one or two
// copies, CreateOptions.Replicas) holds each partition's log: a ring of
// Segments segments of SegmentBytes, striped over the memory nodes like
// any region.
//
// Producing a batch takes three pool operations: a FetchAdd on the
// partition's tail counter reserves its bytes, one WRITE stores the
// batch there, and a compare-and-swap of the committed offset from the
// batch's offset to its end publishes it, once every earlier
// reservation is published. A producer that dies between reserving and
// publishing leaves a hole: after Config.SealTimeout another producer
// or a consumer seals it (writes a skip marker over it and moves the
// committed offset past it), and the hole is counted.
//
// Consumers read from an offset below the committed offset only, and
// check each batch's header and body checksums and its offset: a
// corrupt batch is skipped and counted, never returned. Consumer groups
// commit their offsets in the control region by compare-and-swap.
//
// Offsets are byte positions in a partition's log: a batch's offset is
// where it starts, the next batch's is that plus the batch's span (its
// length rounded up to Align bytes). Offsets only grow; the physical
// place of offset o is o modulo the partition's ring.
package mq
