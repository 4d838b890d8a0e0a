// Package kafka serves a message queue catalog (package mq) to
// unmodified Kafka clients over TCP: producers, consumers and consumer
// groups speak the Kafka protocol (its codec is franz-go's kmsg) to a
// front end that reads and writes the topics' partitions in the pool.
//
// The front end is one broker (node 0) that leads every partition. It
// serves ApiVersions, Metadata, Produce, Fetch, ListOffsets,
// FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
// OffsetCommit, OffsetFetch and CreateTopics. Another request of a
// kind whose response has a top-level error code is answered
// UNSUPPORTED_VERSION; any other, and a frame that does not decode,
// ends the connection.
//
// Offsets: mq's offsets are byte positions of batches, a multiple of
// mq.Align. The record at index i of the batch at mq offset o has Kafka
// offset o+i; the front end writes at most mq.Align-1 records per mq
// batch, so every Kafka offset o+i, and the offset after a batch's
// last record, lies below the batch's next mq.Align boundary. A Fetch
// returns whole batches, each spanning Kafka offsets up to the next
// batch; a fetch at an offset other than where the connection's last
// fetch of the partition ended finds its batch with Topic.BatchStart.
// Kafka offsets so grow, with gaps, as after a compaction. Records'
// times pass through as CreateTime both ways (a produced record's
// timestamp becomes its mq Record.Timestamp; a LogAppendTime batch's
// records take mq's write time). ListOffsets by timestamp answers from
// mq's time index (Topic.OffsetForTime): in the first batch whose newest
// record is at or after the time, the first record that is, with its
// time.
//
// Consumer groups: membership and rebalances (JoinGroup, SyncGroup,
// Heartbeat, LeaveGroup) are kept by a coordinator in this process
// only; committed offsets are mq's consumer-group offsets, kept in the
// pool, so they outlive the front end.
package kafka
