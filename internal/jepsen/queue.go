package jepsen

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// A queue history records sends to the partitions of a log-structured
// queue and what consumers read back. Every record sent carries a value
// no other send uses, and an acknowledged send says where its batch
// lies (partition and offset, its records at index 0, 1, ...), so the
// log's contents are known exactly from the history and CheckQueue
// needs no search: where porcupine would try the orders of a queue's
// operations, here the offsets fix the order.

// Send is one recorded send of a batch.
type Send struct {
	Client, Partition int
	// Values are the batch's records' values, unique in the history.
	Values  []uint64
	Outcome Outcome
	Err     error
	// Offset is where an OK send's batch lies.
	Offset               uint64
	invokeSeq, returnSeq int64
}

// Delivery is one record a consumer read.
type Delivery struct {
	// Session is the consumer's run: deliveries of one session are
	// checked for order and gaps (a consumer that restarts, or seeks,
	// begins a new session).
	Session   int
	Partition int
	Offset    uint64
	Index     int
	Value     uint64
}

// QueueHistory records sends and deliveries; safe for concurrent use.
type QueueHistory struct {
	mu    sync.Mutex
	seq   int64
	sends []*Send
	reads []Delivery
}

// NewQueueHistory returns an empty queue history.
func NewQueueHistory() *QueueHistory { return &QueueHistory{} }

// SendCall is a send in flight; complete it with OK, Fail or Unknown.
// Only the first completion counts.
type SendCall struct {
	h *QueueHistory
	s *Send
}

// Send records that client begins sending values as one batch to
// partition.
func (h *QueueHistory) Send(client, partition int, values []uint64) *SendCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	s := &Send{Client: client, Partition: partition, Values: slices.Clone(values), invokeSeq: h.seq}
	h.sends = append(h.sends, s)
	return &SendCall{h: h, s: s}
}

// OK records that the batch was acknowledged at offset.
func (c *SendCall) OK(offset uint64) { c.end(OK, offset, nil) }

// Fail records that the batch was definitely not stored.
func (c *SendCall) Fail(err error) { c.end(Failed, 0, err) }

// Unknown records that the batch may or may not have been stored.
func (c *SendCall) Unknown(err error) { c.end(Unknown, 0, err) }

func (c *SendCall) end(out Outcome, off uint64, err error) {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	if c.s.Outcome != Pending {
		return
	}
	c.h.seq++
	c.s.returnSeq = c.h.seq
	c.s.Outcome, c.s.Offset, c.s.Err = out, off, err
}

// Deliver records that a consumer read d.
func (h *QueueHistory) Deliver(d Delivery) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reads = append(h.reads, d)
}

// QueueReport is what CheckQueue found.
type QueueReport struct {
	Sends      Counts
	Deliveries int
	// Anomalies are the first MaxAnomalies things wrong; Total counts
	// them all.
	Anomalies []string
	Total     int
}

// MaxAnomalies bounds the anomalies a report lists.
const MaxAnomalies = 20

// OK reports whether nothing is wrong.
func (r *QueueReport) OK() bool { return r.Total == 0 }

func (r *QueueReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sends %v, %d deliveries, %d anomalies", r.Sends, r.Deliveries, r.Total)
	for _, a := range r.Anomalies {
		b.WriteString("\n  ")
		b.WriteString(a)
	}
	return b.String()
}

func (r *QueueReport) anomaly(format string, args ...any) {
	r.Total++
	if len(r.Anomalies) < MaxAnomalies {
		r.Anomalies = append(r.Anomalies, fmt.Sprintf(format, args...))
	}
}

// pos is a record's place in a partition's log.
type pos struct {
	part  int
	off   uint64
	index int
}

// CheckQueue checks a queue history: every position holds one value for
// every reader; no value is stored at two positions; nothing read was
// never sent or failed; each acknowledged batch lies where its
// acknowledgement says; a batch acknowledged before another was sent to
// the same partition lies before it; each session reads its partitions
// in order without skipping an acknowledged record; and the sessions in
// complete, which read their partitions from the start to the end after
// the faults, read every acknowledged record.
func CheckQueue(h *QueueHistory, complete ...int) *QueueReport {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := &QueueReport{Deliveries: len(h.reads)}
	sent := make(map[uint64]*Send)
	acked := make(map[pos]uint64) // where acknowledged records lie
	for _, s := range h.sends {
		switch s.Outcome {
		case OK:
			r.Sends.OK++
			for i, v := range s.Values {
				acked[pos{s.Partition, s.Offset, i}] = v
			}
		case Failed:
			r.Sends.Failed++
		default:
			r.Sends.Unknown++
		}
		for _, v := range s.Values {
			sent[v] = s
		}
	}
	at := make(map[pos]uint64)
	where := make(map[uint64]pos)
	for _, d := range h.reads {
		p := pos{d.Partition, d.Offset, d.Index}
		if v, ok := at[p]; ok && v != d.Value {
			r.anomaly("partition %d offset %d index %d read as %#x and as %#x", p.part, p.off, p.index, v, d.Value)
		}
		at[p] = d.Value
		if q, ok := where[d.Value]; ok && q != p {
			r.anomaly("duplicate: %#x stored at partition %d offset %d index %d and offset %d index %d", d.Value, q.part, q.off, q.index, p.off, p.index)
		}
		where[d.Value] = p
		switch s := sent[d.Value]; {
		case s == nil:
			r.anomaly("%#x read at partition %d offset %d was never sent", d.Value, p.part, p.off)
		case s.Outcome == Failed:
			r.anomaly("%#x read at partition %d offset %d was sent by client %d, which failed", d.Value, p.part, p.off, s.Client)
		}
		if v, ok := acked[p]; ok && v != d.Value {
			r.anomaly("partition %d offset %d index %d: acknowledged %#x, read %#x", p.part, p.off, p.index, v, d.Value)
		}
	}
	r.checkAckOrder(h.sends)
	r.checkSessions(h.reads, acked, complete)
	return r
}

// checkAckOrder: of two batches acknowledged in one partition, the one
// acknowledged before the other was sent lies before it.
func (r *QueueReport) checkAckOrder(sends []*Send) {
	byPart := make(map[int][]*Send)
	for _, s := range sends {
		if s.Outcome == OK {
			byPart[s.Partition] = append(byPart[s.Partition], s)
		}
	}
	for p, ss := range byPart {
		slices.SortFunc(ss, func(a, b *Send) int { return cmp.Compare(a.invokeSeq, b.invokeSeq) })
		// Walk by invocation; the latest-offset batch among those
		// acknowledged before each one's invocation must lie before it.
		done := slices.Clone(ss)
		slices.SortFunc(done, func(a, b *Send) int { return cmp.Compare(a.returnSeq, b.returnSeq) })
		j, latest := 0, (*Send)(nil)
		for _, s := range ss {
			for j < len(done) && done[j].returnSeq < s.invokeSeq {
				if latest == nil || done[j].Offset > latest.Offset {
					latest = done[j]
				}
				j++
			}
			if latest != nil && latest.Offset >= s.Offset {
				r.anomaly("partition %d: batch at %d acknowledged before the batch at %d was sent", p, latest.Offset, s.Offset)
			}
		}
	}
}

// checkSessions checks each session's order and gaps, and that the
// complete sessions read every acknowledged record.
func (r *QueueReport) checkSessions(reads []Delivery, acked map[pos]uint64, complete []int) {
	ackedBy := make(map[int][]pos) // per partition, in log order
	for p := range acked {
		ackedBy[p.part] = append(ackedBy[p.part], p)
	}
	less := func(a, b pos) int { return cmp.Or(cmp.Compare(a.off, b.off), cmp.Compare(a.index, b.index)) }
	for _, ps := range ackedBy {
		slices.SortFunc(ps, less)
	}
	type key struct{ session, part int }
	last := make(map[key]pos)
	seen := make(map[key]map[pos]bool)
	for _, d := range reads {
		k := key{d.Session, d.Partition}
		p := pos{d.Partition, d.Offset, d.Index}
		if seen[k] == nil {
			seen[k] = make(map[pos]bool)
		}
		seen[k][p] = true
		prev, ok := last[k]
		last[k] = p
		if !ok {
			continue
		}
		if less(prev, p) >= 0 {
			r.anomaly("session %d partition %d: read offset %d index %d after offset %d index %d", d.Session, d.Partition, p.off, p.index, prev.off, prev.index)
			continue
		}
		// An acknowledged record strictly between the two was skipped.
		ps := ackedBy[d.Partition]
		i, _ := slices.BinarySearchFunc(ps, prev, less)
		for ; i < len(ps) && less(ps[i], p) < 0; i++ {
			if less(ps[i], prev) > 0 {
				r.anomaly("gap: session %d partition %d read offset %d index %d, then %d index %d, skipping acknowledged offset %d index %d", d.Session, d.Partition, prev.off, prev.index, p.off, p.index, ps[i].off, ps[i].index)
			}
		}
	}
	for _, s := range complete {
		for part, ps := range ackedBy {
			for _, p := range ps {
				if !seen[key{s, part}][p] {
					r.anomaly("lost: acknowledged partition %d offset %d index %d (%#x) not read by the final read", part, p.off, p.index, acked[p])
				}
			}
		}
	}
}
