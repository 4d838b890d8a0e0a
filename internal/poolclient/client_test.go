package poolclient

import (
	"net/netip"
	"testing"
	"time"
)

// recorder is a Sender that records what it is asked to send.
type recorder struct {
	sent       []uint64 // request ids, in order
	unanswered int
}

func (r *recorder) SendSeg(_ time.Time, a *Access[int], i int) { r.sent = append(r.sent, a.Segs[i].ID) }
func (r *recorder) Unanswered(time.Time, netip.AddrPort)       { r.unanswered++ }

var sw = netip.MustParseAddrPort("10.0.0.1:7471")

// TestLanesBounded starts accesses to many regions and releases them:
// the table of lanes stays bounded and nothing stays in flight.
func TestLanesBounded(t *testing.T) {
	c := New[int](&recorder{})
	now := time.Unix(1, 0)
	for i := range 3 * MaxLanes {
		c.Start(now, &Access[int]{Op: i, Key: LaneKey{Switch: sw, Region: uint32(i + 1)}, Segs: []Seg{{}}})
		if !c.Release(i) {
			t.Fatalf("access %d was not in flight", i)
		}
	}
	if n := c.Lanes(); n > MaxLanes {
		t.Fatalf("%d lanes, want at most %d", n, MaxLanes)
	}
	if c.Len() != 0 || c.Requests() != 0 {
		t.Fatalf("%d accesses, %d requests after releasing every one", c.Len(), c.Requests())
	}
	if c.Release(0) {
		t.Fatal("a released access released again")
	}
}

// TestResendUnderSameID: a segment unanswered for the initial timeout is
// sent again under its id, with the timeout doubled; the third send
// reports the switch unanswered; an answer ends it.
func TestResendUnderSameID(t *testing.T) {
	r := &recorder{}
	c := New[int](r)
	now := time.Unix(1, 0)
	a := &Access[int]{Op: 1, Key: LaneKey{Switch: sw, Region: 1}, Segs: []Seg{{Off: 0, N: 8}, {Off: 8, N: 8}}}
	c.Start(now, a)
	if len(r.sent) != 2 || r.sent[0] == r.sent[1] {
		t.Fatalf("sent %v, want two distinct ids", r.sent)
	}
	if next := c.Poll(now.Add(initRTO - time.Millisecond)); !next.Equal(now.Add(initRTO)) {
		t.Fatalf("next timer %v, want %v", next, now.Add(initRTO))
	}
	c.Poll(now.Add(initRTO))
	if len(r.sent) != 4 || r.sent[2] != r.sent[0] || r.sent[3] != r.sent[1] || c.Stats.Retransmits != 2 || r.unanswered != 0 {
		t.Fatalf("after one timeout: sent %v, %d retransmits, %d unanswered", r.sent, c.Stats.Retransmits, r.unanswered)
	}
	c.Poll(now.Add(initRTO + 2*initRTO))
	if len(r.sent) != 6 || r.unanswered != 2 {
		t.Fatalf("after two timeouts: sent %v, %d unanswered; want 6 sends, 2 unanswered", r.sent, r.unanswered)
	}
	got, i := c.Match(r.sent[1])
	if got != a || i != 1 {
		t.Fatalf("Match(%d) = %p, %d", r.sent[1], got, i)
	}
	if dup, more := c.Answer(a, i, netip.MustParseAddrPort("10.0.0.2:1"), 1); dup || more != 0 {
		t.Fatalf("first answer: dup %v, more %d", dup, more)
	}
	c.Complete(now, a, i)
	if a.Left() != 1 || c.Requests() != 1 {
		t.Fatalf("%d segments left, %d requests; want 1 and 1", a.Left(), c.Requests())
	}
	if got, _ := c.Match(r.sent[1]); got != nil {
		t.Fatal("a completed request still matches")
	}
}

// TestAnswerCopies: a segment of a region with two copies waits for both
// nodes; a second answer from the same node is a duplicate; a later
// answer reporting fewer copies lowers what is waited for.
func TestAnswerCopies(t *testing.T) {
	c := New[int](&recorder{})
	now := time.Unix(1, 0)
	a := &Access[int]{Op: 1, Key: LaneKey{Switch: sw, Region: 1}, Segs: []Seg{{N: 8}}}
	c.Start(now, a)
	n1, n2 := netip.MustParseAddrPort("10.0.0.2:1"), netip.MustParseAddrPort("10.0.0.3:1")
	if dup, more := c.Answer(a, 0, n1, 2); dup || more != 1 {
		t.Fatalf("first of two: dup %v, more %d", dup, more)
	}
	if dup, more := c.Answer(a, 0, n1, 2); !dup || more != 1 {
		t.Fatalf("again from the same node: dup %v, more %d", dup, more)
	}
	if dup, more := c.Answer(a, 0, n2, 2); dup || more != 0 {
		t.Fatalf("second of two: dup %v, more %d", dup, more)
	}
	b := &Access[int]{Op: 2, Key: LaneKey{Switch: sw, Region: 1}, Segs: []Seg{{N: 8}}}
	c.Start(now, b)
	c.Answer(b, 0, n1, 2)
	if dup, more := c.Answer(b, 0, n1, 1); !dup || more != 0 {
		t.Fatalf("one copy left: dup %v, more %d; want a duplicate that completes", dup, more)
	}
	if c.Stats.Responses != 3 || c.Stats.LateResponses != 2 {
		t.Fatalf("%d responses, %d late; want 3 and 2", c.Stats.Responses, c.Stats.LateResponses)
	}
}
