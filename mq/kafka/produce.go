package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ndma/ndma/mq"
)

// maxRecordsPerBatch is the most records the front end writes in one
// mq batch: Kafka offsets o+i of a batch at mq offset o, and o+count
// after its last, then all lie below o's next mq.Align boundary.
const maxRecordsPerBatch = mq.Align - 1

// errRecords is wrapped by the error for record batches that do not
// decode.
var errRecords = errors.New("kafka: bad record batch")

// errCompressed is wrapped by the error for a compressed record batch.
var errCompressed = errors.New("kafka: compressed record batches are not taken")

// decodeBatches decodes a partition's record batches (magic 2,
// uncompressed, not transactional) into mq records.
func decodeBatches(b []byte) ([]mq.Record, error) {
	var recs []mq.Record
	for len(b) > 0 {
		if len(b) < 12 {
			return nil, fmt.Errorf("%w: %d bytes after the last batch", errRecords, len(b))
		}
		n := int64(int32(binary.BigEndian.Uint32(b[8:]))) + 12
		if n < 61 || n > int64(len(b)) {
			return nil, fmt.Errorf("%w: a batch of %d bytes in %d", errRecords, n, len(b))
		}
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(b[:n]); err != nil {
			return nil, fmt.Errorf("%w: %v", errRecords, err)
		}
		b = b[n:]
		switch {
		case rb.Magic != 2:
			return nil, fmt.Errorf("%w: magic %d (want 2)", errRecords, rb.Magic)
		case rb.Attributes&0x7 != 0:
			return nil, fmt.Errorf("%w: codec %d", errCompressed, rb.Attributes&0x7)
		case rb.Attributes&0x30 != 0:
			return nil, fmt.Errorf("%w: transactional or control batch", errRecords)
		case rb.NumRecords < 0:
			return nil, fmt.Errorf("%w: %d records", errRecords, rb.NumRecords)
		}
		first := rb.FirstTimestamp
		if rb.Attributes&attrLogAppendTime != 0 {
			first = -1 // the log's append time: mq's write time
		}
		rs, err := decodeRecords(rb.Records, int(rb.NumRecords), first)
		if err != nil {
			return nil, err
		}
		recs = append(recs, rs...)
	}
	return recs, nil
}

// maxMillis is the latest record time (unix ms) that mq's nanoseconds
// hold.
const maxMillis = math.MaxInt64 / int64(time.Millisecond)

// decodeRecords decodes n records, each prefixed by its varint length,
// of a batch whose first timestamp (unix ms) is first: a record's time
// is first plus its delta (CreateTime); a negative first or time is none
// (the record takes mq's write time).
func decodeRecords(b []byte, n int, first int64) ([]mq.Record, error) {
	recs := make([]mq.Record, 0, min(n, len(b)/7))
	for i := range n {
		size, k := binary.Varint(b)
		if k <= 0 || size < 0 || size > int64(len(b)-k) {
			return nil, fmt.Errorf("%w: record %d overruns its batch", errRecords, i)
		}
		var r kmsg.Record
		if err := r.ReadFrom(b[:k+int(size)]); err != nil {
			return nil, fmt.Errorf("%w: record %d: %v", errRecords, i, err)
		}
		b = b[k+int(size):]
		m := mq.Record{Key: r.Key, Value: r.Value}
		if ms := first + r.TimestampDelta64; first >= 0 && ms > 0 {
			if ms > maxMillis || r.TimestampDelta64 > maxMillis {
				return nil, fmt.Errorf("%w: record %d: time %d ms is past %d", errRecords, i, ms, maxMillis)
			}
			m.Timestamp = ms * int64(time.Millisecond)
		}
		if m.Value == nil {
			m.Value = []byte{}
		}
		for _, h := range r.Headers {
			m.Headers = append(m.Headers, mq.Header{Key: h.Key, Value: h.Value})
		}
		recs = append(recs, m)
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after %d records", errRecords, len(b), n)
	}
	return recs, nil
}

// chunks splits recs into mq batches: at most maxRecordsPerBatch
// records and maxBatch bytes each.
func chunks(recs []mq.Record, maxBatch uint64) ([][]mq.Record, error) {
	var out [][]mq.Record
	const head = mq.BatchHeaderBytes + mq.BatchTimesBytes
	start, size := 0, uint64(head)
	for i, r := range recs {
		n := uint64(mq.RecordBytes(r))
		if n+head > maxBatch {
			return nil, fmt.Errorf("%w: a record of %d bytes (at most %d with the batch header and times)", mq.ErrTooLarge, n, maxBatch)
		}
		if i-start == maxRecordsPerBatch || size+n > maxBatch {
			out = append(out, recs[start:i])
			start, size = i, head
		}
		size += n
	}
	if start < len(recs) {
		out = append(out, recs[start:])
	}
	return out, nil
}

// produce appends each partition's records: an mq batch per chunk, in
// order; the partition's base offset is its first record's.
func (c *conn) produce(req *kmsg.ProduceRequest) *kmsg.ProduceResponse {
	ctx, cancel := c.ctx()
	defer cancel()
	resp := kmsg.NewPtrProduceResponse()
	for _, t := range req.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = t.Topic
		o, terr := c.s.topics.get(ctx, t.Topic)
		for _, p := range t.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition, rp.BaseOffset, rp.LogAppendTime, rp.LogStartOffset = p.Partition, -1, -1, -1
			err := terr
			if err == nil {
				rp.BaseOffset, err = c.produceTo(ctx, o, int(p.Partition), p.Records, req.Acks)
			}
			rp.ErrorCode, rp.ErrorMessage = produceCode(err), errText(err)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func produceCode(err error) int16 {
	switch {
	case errors.Is(err, errCompressed):
		return errUnsupportedCompress
	case errors.Is(err, errRecords):
		return errCorruptMessage
	case errors.Is(err, mq.ErrNotAllCopies):
		return errNotEnoughReplicasAft
	case errors.Is(err, mq.ErrBadRequest) && !errors.Is(err, mq.ErrTooLarge):
		return errUnknownTopic // a partition the topic lacks
	}
	return codeOf(err)
}

// produceTo appends one partition's record batches and returns the
// Kafka offset of the first record.
func (c *conn) produceTo(ctx context.Context, o *openTopic, p int, b []byte, acks int16) (int64, error) {
	if p < 0 || p >= o.t.Layout().Partitions {
		return -1, fmt.Errorf("%w: partition %d of %q (it has %d)", mq.ErrBadRequest, p, o.t.Ref().Name, o.t.Layout().Partitions)
	}
	recs, err := decodeBatches(b)
	if err != nil {
		return -1, err
	}
	if len(recs) == 0 {
		return -1, fmt.Errorf("%w: no records", errRecords)
	}
	parts, err := chunks(recs, o.t.Layout().MaxBatch)
	if err != nil {
		return -1, err
	}
	base := int64(-1)
	for _, part := range parts {
		ack, err := o.prod.Produce(ctx, p, part)
		if errors.Is(err, mq.ErrNotAllCopies) && acks != -1 {
			err = nil // stored on one copy: enough for acks 0 and 1
		}
		if err != nil {
			return base, err
		}
		c.s.n.produced.Add(uint64(len(part)))
		if base < 0 {
			base = int64(ack.Offset)
		}
	}
	return base, nil
}
