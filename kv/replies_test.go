package kv

import (
	"testing"
	"time"
)

// TestRepliesDoneMark: a client's done mark drops its replies up to the
// mark; a copy of a request at or below it is refused, never applied
// again; one above it is answered from the table.
func TestRepliesDoneMark(t *testing.T) {
	var r replies
	now := time.Unix(0, 0)
	for seq := uint64(1); seq <= 10; seq++ {
		if v, _ := r.check(replyKey{7, seq}, 0, now); v != replyNew {
			t.Fatalf("request %d: verdict %d, want new", seq, v)
		}
		r.put(replyKey{7, seq}, []byte{byte(seq)}, now)
	}
	// Request 11 says 1..6 are done.
	if v, _ := r.check(replyKey{7, 11}, 6, now); v != replyNew {
		t.Fatalf("request 11: verdict %d, want new", v)
	}
	if r.n != 4 {
		t.Fatalf("%d replies kept after the done mark 6, want 4 (7..10)", r.n)
	}
	if v, _ := r.check(replyKey{7, 3}, 0, now); v != replyDone {
		t.Fatalf("a copy of request 3 after the mark 6: verdict %d, want done (not applied)", v)
	}
	if v, b := r.check(replyKey{7, 8}, 0, now); v != replyCached || b[0] != 8 {
		t.Fatalf("a copy of request 8: verdict %d reply %v, want the kept reply 8", v, b)
	}
	// Another client is not touched by client 7's mark.
	r.put(replyKey{9, 2}, []byte{2}, now)
	if v, _ := r.check(replyKey{7, 12}, 10, now); v != replyNew || r.n != 1 {
		t.Fatalf("after client 7's mark 10: verdict %d, %d replies kept, want new and client 9's one", v, r.n)
	}
	if v, b := r.check(replyKey{9, 2}, 0, now); v != replyCached || b[0] != 2 {
		t.Fatalf("client 9's reply: verdict %d, want cached", v)
	}
	// A reply put after its client gave the request up is not kept.
	r.put(replyKey{7, 5}, []byte{5}, now)
	if r.n != 1 {
		t.Fatalf("a reply below the done mark was kept (%d replies)", r.n)
	}
}

// TestRepliesPerClientBound: a client with MaxClientReplies replies kept
// is refused more, while other clients go on; its done mark makes room.
func TestRepliesPerClientBound(t *testing.T) {
	var r replies
	now := time.Unix(0, 0)
	for seq := uint64(1); seq <= MaxClientReplies; seq++ {
		r.put(replyKey{1, seq}, nil, now)
	}
	if v, _ := r.check(replyKey{1, MaxClientReplies + 1}, 0, now); v != replyFull {
		t.Fatalf("client over its bound: verdict %d, want full", v)
	}
	if v, _ := r.check(replyKey{2, 1}, 0, now); v != replyNew {
		t.Fatalf("another client: verdict %d, want new", v)
	}
	if v, _ := r.check(replyKey{1, MaxClientReplies + 1}, 100, now); v != replyNew {
		t.Fatalf("after its done mark: verdict %d, want new", v)
	}
}

// TestRepliesBounds: the table holds at most MaxReplies replies (then
// refuses until the oldest expire), replies expire after ReplyTTL, quiet
// clients are forgotten, and the insertion order stays within twice the
// table however many replies done marks drop.
func TestRepliesBounds(t *testing.T) {
	var r replies
	now := time.Unix(0, 0)
	clients := MaxReplies/MaxClientReplies + 1
	for c := range clients {
		for seq := uint64(1); seq <= MaxClientReplies; seq++ {
			k := replyKey{uint64(c + 1), seq}
			v, _ := r.check(k, 0, now)
			if r.n >= MaxReplies {
				if v != replyFull {
					t.Fatalf("table full: verdict %d, want full", v)
				}
				continue
			}
			r.put(k, nil, now)
		}
	}
	if r.n != MaxReplies {
		t.Fatalf("%d replies kept, want the bound %d", r.n, MaxReplies)
	}
	later := now.Add(ReplyTTL + time.Second)
	if v, _ := r.check(replyKey{99, 1}, 0, later); v != replyNew || r.n != 0 || len(r.clients) != 0 {
		t.Fatalf("after ReplyTTL: verdict %d, %d replies, %d clients; want new, 0, 0", v, r.n, len(r.clients))
	}
	// A client whose done mark follows its requests keeps a handful of
	// replies, and the order does not grow with the requests.
	for seq := uint64(1); seq <= 100000; seq++ {
		k := replyKey{5, seq}
		if v, _ := r.check(k, seq-1, later); v != replyNew {
			t.Fatalf("request %d: verdict %d", seq, v)
		}
		r.put(k, nil, later)
	}
	if r.n != 1 || len(r.order) > 2*r.n+64 {
		t.Fatalf("%d replies kept, order of %d, want 1 and at most %d", r.n, len(r.order), 2*r.n+64)
	}
}

// TestClientDoneMark: the done mark a client sends is the request before
// its oldest one still in flight, whatever order requests finish in.
func TestClientDoneMark(t *testing.T) {
	var c Client
	a, b, d := c.begin(), c.begin(), c.begin()
	if a != 1 || b != 2 || d != 3 || c.base-1 != 0 {
		t.Fatalf("requests %d %d %d, mark %d; want 1 2 3, 0", a, b, d, c.base-1)
	}
	c.finish(b)
	if c.base-1 != 0 {
		t.Fatalf("mark %d with request 1 in flight, want 0", c.base-1)
	}
	c.finish(a)
	if c.base-1 != 2 {
		t.Fatalf("mark %d with request 3 in flight, want 2", c.base-1)
	}
	c.finish(d)
	if e := c.begin(); e != 4 || c.base-1 != 3 || len(c.win) != 1 {
		t.Fatalf("next request %d, mark %d, window %d; want 4, 3, 1", e, c.base-1, len(c.win))
	}
}
