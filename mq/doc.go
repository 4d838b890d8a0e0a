// Package mq is a message queue in the memory pool: a topic is P
// partitions, each an append-only log in pool space that producers
// write and consumers read one-sidedly, with no broker process.
//
// A topic lives in two pool regions. The control region (one copy,
// since the pool runs atomics only on regions with one copy) holds, for
// each partition, a 64-byte header on its own stripe: the tail
// reservation counter, the committed offset, the start of the retained
// log, the count of sealed holes and the seal claim; after them, the
// consumer groups' committed offsets, then the time index. The data region (one or two
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
//
// Time: every record has a time, its own (Record.Timestamp given to
// Produce) or its batch's write time; a batch's time is its newest
// record's. The time index keeps, per segment of each ring, the newest
// batch time (in milliseconds) of the batches that start in it, raised
// by compare-and-swap before a batch is published. Topic.OffsetForTime
// and Consumer.SeekTime find the first batch whose time is at or after
// a time, and in it the first record that is: the index words skip the
// segments that are all older, and the batch headers of the first
// segment that may hold it decide, to the nanosecond. Topic.Expire drops the oldest segments older than a time
// (retention by age; the ring's size is the other bound).
//
// Push: a producer configured with ProducerConfig.Push multicasts each
// batch it stores, once, to the topic's subscribers: the switch
// replicates it. Subscribers are the members of the topic's push
// service at the switch; a producer forms a job group of them and
// itself, anew when they change, and looks at them only while it
// produces. Consumer.Subscribe makes a consumer a subscriber: its
// Subscription delivers each partition's records in order, taking
// pushed batches and reading the log one-sidedly for what was not
// pushed to it (the offset of a pushed batch jumps past its position, or
// a partition stays quiet for Push.Idle). Pushing is best effort and
// the log is the truth, so a subscriber that loses pushes, joins late,
// restarts or waits behind a hole still misses nothing and gets nothing
// twice.
package mq
