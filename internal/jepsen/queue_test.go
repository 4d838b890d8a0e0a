package jepsen

import (
	"strings"
	"testing"
)

// queueHistory: client 0 sends batches {1,2} and {3} to partition 0,
// acknowledged at offsets 0 and 128, and client 1 sends {4}, which
// fails; session 0 reads what reads gives.
func queueHistory(reads ...Delivery) *QueueHistory {
	h := NewQueueHistory()
	h.Send(0, 0, []uint64{1, 2}).OK(0)
	h.Send(0, 0, []uint64{3}).OK(128)
	h.Send(1, 0, []uint64{4}).Fail(nil)
	for _, d := range reads {
		h.Deliver(d)
	}
	return h
}

var (
	d1 = Delivery{Offset: 0, Index: 0, Value: 1}
	d2 = Delivery{Offset: 0, Index: 1, Value: 2}
	d3 = Delivery{Offset: 128, Index: 0, Value: 3}
)

func TestCheckQueue(t *testing.T) {
	if r := CheckQueue(queueHistory(d1, d2, d3), 0); !r.OK() || r.Sends.OK != 2 || r.Sends.Failed != 1 || r.Deliveries != 3 {
		t.Fatalf("a legal history: %v", r)
	}
	for _, c := range []struct {
		name  string
		reads []Delivery
		want  string
	}{
		{"lost", []Delivery{d1, d2}, "lost: acknowledged partition 0 offset 128"},
		{"gap", []Delivery{d1, d3}, "gap: session 0"},
		{"reordered", []Delivery{d1, d3, d2}, "read offset 0 index 1 after offset 128"},
		{"duplicate", []Delivery{d1, d2, d3, {Offset: 192, Value: 3}}, "duplicate: 0x3"},
		{"failed send read", []Delivery{d1, d2, d3, {Offset: 192, Value: 4}}, "sent by client 1, which failed"},
		{"never sent", []Delivery{d1, d2, d3, {Offset: 192, Value: 9}}, "never sent"},
		{"moved", []Delivery{d1, d2, {Offset: 192, Value: 3}}, "not read by the final read"},
		{"two values", []Delivery{d1, d2, d3, {Session: 1, Offset: 128, Value: 4}}, "read as 0x3 and as 0x4"},
	} {
		r := CheckQueue(queueHistory(c.reads...), 0)
		if r.OK() || !strings.Contains(r.String(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, r, c.want)
		}
	}
	// A batch acknowledged before another was sent lies before it.
	h := NewQueueHistory()
	h.Send(0, 0, []uint64{1}).OK(128)
	h.Send(1, 0, []uint64{2}).OK(0)
	if r := CheckQueue(h); r.OK() || !strings.Contains(r.String(), "acknowledged before the batch at 0 was sent") {
		t.Errorf("acknowledgement order: %v", r)
	}
	// Overlapping sends may lie in either order.
	h = NewQueueHistory()
	a, b := h.Send(0, 0, []uint64{1}), h.Send(1, 0, []uint64{2})
	a.OK(128)
	b.OK(0)
	if r := CheckQueue(h); !r.OK() {
		t.Errorf("overlapping sends: %v", r)
	}
}
