package kafka

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ndma/ndma/mq"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// attrLogAppendTime marks a record batch's timestamps as the log's
// append time. The front end sends records' times as CreateTime (each
// record's own, or its batch's write time for one that has none).
const attrLogAppendTime = 1 << 3

// encodeBatch encodes the records of one mq batch (all of one Offset)
// as a Kafka record batch at base offset o, spanning Kafka offsets o to
// next-1 so that the client fetches next after it.
func encodeBatch(dst []byte, recs []mq.Record, next uint64) []byte {
	o := recs[0].Offset
	first, newest := recs[0].Timestamp/int64(time.Millisecond), int64(math.MinInt64)
	for _, r := range recs {
		first = min(first, r.Timestamp/int64(time.Millisecond))
	}
	var body []byte
	for _, r := range recs {
		kr := kmsg.NewRecord()
		kr.OffsetDelta = int32(r.Index)
		ms := r.Timestamp / int64(time.Millisecond)
		kr.TimestampDelta64, newest = ms-first, max(newest, ms)
		kr.Key, kr.Value = r.Key, r.Value
		if len(kr.Key) == 0 {
			kr.Key = nil
		}
		for _, h := range r.Headers {
			kr.Headers = append(kr.Headers, kmsg.Header{Key: h.Key, Value: h.Value})
		}
		enc := kr.AppendTo(nil) // Length 0: one byte of varint
		kr.Length = int32(len(enc) - 1)
		body = kr.AppendTo(body)
	}
	last := int64(next - o - 1)
	if next <= o || last > math.MaxInt32 {
		last = int64(recs[len(recs)-1].Index)
	}
	rb := kmsg.RecordBatch{FirstOffset: int64(o), Magic: 2,
		LastOffsetDelta: int32(last), FirstTimestamp: first, MaxTimestamp: newest,
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: int32(len(recs)), Records: body}
	start := len(dst)
	dst = rb.AppendTo(dst)
	b := dst[start:]
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
	return dst
}

// consumer is the connection's reader of topic o.
func (c *conn) consumer(ctx context.Context, o *openTopic) (*mq.Consumer, error) {
	name := o.t.Ref().Name
	if cs := c.consumers[name]; cs != nil {
		return cs, nil
	}
	fb := max(c.s.cfg.FetchBytes, int(o.t.Layout().MaxBatch))
	cs, err := mq.NewConsumer(ctx, o.t, mq.ConsumerConfig{FetchBytes: fb})
	if err != nil {
		return nil, err
	}
	c.consumers[name] = cs
	return cs, nil
}

// partKey names a partition of a topic.
type partKey struct {
	topic string
	part  int
}

// fetchPart is one partition of a Fetch.
type fetchPart struct {
	o    *openTopic
	rp   *kmsg.FetchResponseTopicPartition
	part int
	off  int64
}

// fetch reads each partition asked for from its offset, waiting up to
// MaxWaitMillis (at most MaxFetchWait) while none has records. Fetch
// sessions are not kept: the response's session id 0 tells the client
// to send whole requests.
func (c *conn) fetch(req *kmsg.FetchRequest) *kmsg.FetchResponse {
	wait := min(time.Duration(max(req.MaxWaitMillis, 0))*time.Millisecond, MaxFetchWait)
	ctx, cancel := context.WithTimeout(c.s.base, c.s.cfg.Timeout+wait)
	defer cancel()
	resp := kmsg.NewPtrFetchResponse()
	var parts []fetchPart
	for _, t := range req.Topics {
		resp.Topics = append(resp.Topics, kmsg.NewFetchResponseTopic())
		rt := &resp.Topics[len(resp.Topics)-1]
		rt.Topic = t.Topic
		o, err := c.s.topics.get(ctx, t.Topic)
		for _, p := range t.Partitions {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.Partition, rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = p.Partition, -1, -1, -1
			rp.RecordBatches = []byte{} // empty, not null: librdkafka takes no null record set
			if err != nil {
				rp.ErrorCode = codeOf(err)
			} else if p.Partition < 0 || int(p.Partition) >= o.t.Layout().Partitions {
				rp.ErrorCode = errUnknownTopic
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		for i, p := range t.Partitions {
			if rt.Partitions[i].ErrorCode == 0 {
				parts = append(parts, fetchPart{o: o, rp: &rt.Partitions[i], part: int(p.Partition), off: p.FetchOffset})
			}
		}
	}
	// The response's batches: up to the client's MaxBytes and at most
	// the larger of MaxFrame and FetchBytes; the first partition with
	// records is sent whatever its size, as Kafka does.
	limit := max(c.s.cfg.MaxFrame, c.s.cfg.FetchBytes)
	if req.MaxBytes > 0 {
		limit = min(limit, int(req.MaxBytes))
	}
	deadline := time.Now().Add(wait)
	for pause := time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
		total, failed := 0, false
		for _, fp := range parts {
			total += c.fetchPartition(ctx, fp, total < limit)
			failed = failed || fp.rp.ErrorCode != 0
		}
		if total > 0 || failed || total >= int(req.MinBytes) || !time.Now().Before(deadline) || ctx.Err() != nil {
			break
		}
		t := time.NewTimer(min(pause, time.Until(deadline)))
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	return resp
}

// fetchPartition fills fp's response: its offsets and, when read, the
// batches from fp.off on; it returns the bytes of batches it holds.
func (c *conn) fetchPartition(ctx context.Context, fp fetchPart, read bool) int {
	rp := fp.rp
	st, err := fp.o.t.State(ctx, fp.part)
	if err != nil {
		rp.ErrorCode = codeOf(err)
		return 0
	}
	rp.ErrorCode = 0
	rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = int64(st.Committed), int64(st.Committed), int64(st.Start)
	if fp.off < int64(st.Start) || fp.off > int64(st.Committed) {
		rp.ErrorCode = errOffsetOutOfRange
		return 0
	}
	if !read || fp.off == int64(st.Committed) || len(rp.RecordBatches) > 0 {
		return len(rp.RecordBatches)
	}
	cs, err := c.consumer(ctx, fp.o)
	key := partKey{fp.o.t.Ref().Name, fp.part}
	start, known := c.next[key]
	if err == nil && (!known || start != uint64(fp.off)) {
		// Not where this connection's last fetch ended: an offset
		// committed inside a batch, or one a client chose.
		start, err = fp.o.t.BatchStart(ctx, fp.part, uint64(fp.off))
	}
	if err == nil {
		err = cs.Seek(fp.part, start)
	}
	var recs []mq.Record
	if err == nil {
		recs, err = cs.Fetch(ctx, fp.part, 0)
	}
	if err != nil {
		rp.ErrorCode = codeOf(err)
		return 0
	}
	for i := 0; i < len(recs); {
		j := i
		for j < len(recs) && recs[j].Offset == recs[i].Offset {
			j++
		}
		next := cs.Position(fp.part)
		if j < len(recs) {
			next = recs[j].Offset
		}
		rp.RecordBatches = encodeBatch(rp.RecordBatches, recs[i:j], next)
		i = j
	}
	c.next[key] = cs.Position(fp.part)
	c.s.n.fetched.Add(uint64(len(recs)))
	return len(rp.RecordBatches)
}

// listOffsets answers the earliest (-2) and latest (-1) offsets of
// partitions, and for a timestamp (milliseconds) the first record at or
// after it of the first batch whose newest record is
// (mq.Topic.OffsetForTime), with its time, or -1 when there is none.
func (c *conn) listOffsets(req *kmsg.ListOffsetsRequest) *kmsg.ListOffsetsResponse {
	ctx, cancel := c.ctx()
	defer cancel()
	resp := kmsg.NewPtrListOffsetsResponse()
	for _, t := range req.Topics {
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		o, terr := c.s.topics.get(ctx, t.Topic)
		for _, p := range t.Partitions {
			rp := kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition, rp.Timestamp, rp.Offset = p.Partition, -1, -1
			var st mq.PartitionState
			err := terr
			if err == nil {
				st, err = o.t.State(ctx, int(p.Partition))
			}
			switch {
			case err != nil:
				rp.ErrorCode = produceCode(err)
			case p.Timestamp == -1:
				rp.Offset = int64(st.Committed)
			case p.Timestamp == -2:
				rp.Offset = int64(st.Start)
			case p.Timestamp < 0:
				rp.ErrorCode = errInvalidRequest
			default:
				// The first record at or after the time asked for
				// (milliseconds) in the first batch that has one, from
				// mq's time index; none: -1.
				r, err := o.t.OffsetForTime(ctx, int(p.Partition), time.UnixMilli(p.Timestamp))
				switch {
				case err != nil:
					rp.ErrorCode = produceCode(err)
				case r.Found:
					rp.Offset, rp.Timestamp = int64(r.Offset)+int64(r.Index), r.Timestamp/int64(time.Millisecond)
				}
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
