package kv

import "time"

// Bounds of an owner's table of recent replies.
const (
	// MaxReplies is the most replies an owner keeps.
	MaxReplies = 1 << 16
	// MaxClientReplies is the most replies an owner keeps for one
	// client: more requests than that in flight from one client are
	// answered busy, so that no client takes the table from the others.
	MaxClientReplies = 4096
	// ReplyTTL is how long a reply is kept at most, unless its client
	// says sooner that it has its answer: longer than a client goes on
	// sending one request again (its context).
	ReplyTTL = time.Minute
)

type replyKey struct{ client, seq uint64 }

// replies is an owner's table of the replies it gave, by client and
// request, so that a request sent again (its answer was lost, or late)
// is answered as the first time instead of applied twice.
//
// Each request carries its client's done mark: every request of that
// client numbered up to it has had its answer or been given up. The
// owner drops the client's replies up to the mark, and answers a copy
// numbered at or below it busy without applying it (the client no
// longer waits for it). So a client's replies live about as long as
// its requests are in flight; those of a client that stopped live
// ReplyTTL. A client holds at most MaxClientReplies, the table at most
// MaxReplies: past either, new requests are refused busy (not applied).
type replies struct {
	clients map[uint64]*clientReplies
	n       int          // replies kept, in all
	order   []replyEntry // insertion order, oldest first; may name dropped replies
	swept   time.Time    // when quiet clients were last looked for
}

// clientReplies is one client's part of the table.
type clientReplies struct {
	done uint64 // the highest done mark seen
	m    map[uint64][]byte
	last time.Time // when the client's last reply was kept
}

type replyEntry struct {
	k  replyKey
	at time.Time
}

// verdict is what check found for a request.
type verdict int

const (
	replyNew    verdict = iota // not seen: apply it and put the reply
	replyCached                // seen: answer the kept reply
	replyDone                  // at or below its client's done mark: answer busy, apply nothing
	replyFull                  // no room: answer busy, apply nothing
)

// check looks request k up, first taking done, the client's done mark,
// at now. For replyCached it returns the reply kept.
func (r *replies) check(k replyKey, done uint64, now time.Time) (verdict, []byte) {
	r.expire(now)
	c := r.clients[k.client]
	if c != nil && done > c.done {
		c.done = done
		for seq := range c.m {
			if seq <= done {
				delete(c.m, seq)
				r.n--
			}
		}
	}
	if c != nil {
		if b, ok := c.m[k.seq]; ok {
			return replyCached, b
		}
		if k.seq <= c.done {
			return replyDone, nil
		}
	} else if k.seq <= done {
		return replyDone, nil
	}
	if r.n >= MaxReplies || (c != nil && len(c.m) >= MaxClientReplies) || (c == nil && len(r.clients) >= MaxReplies) {
		return replyFull, nil
	}
	return replyNew, nil
}

// expire drops replies older than ReplyTTL, and the clients left with
// none that were quiet that long.
func (r *replies) expire(now time.Time) {
	for len(r.order) > 0 && now.Sub(r.order[0].at) > ReplyTTL {
		e := r.order[0]
		r.order[0] = replyEntry{}
		r.order = r.order[1:]
		c := r.clients[e.k.client]
		if c == nil {
			continue
		}
		if _, ok := c.m[e.k.seq]; ok {
			delete(c.m, e.k.seq)
			r.n--
		}
		if len(c.m) == 0 && now.Sub(c.last) > ReplyTTL {
			delete(r.clients, e.k.client)
		}
	}
	if len(r.order) == 0 {
		r.order = nil // let the array go
	}
	// Clients whose replies their done marks dropped are forgotten once
	// quiet for ReplyTTL.
	if now.Sub(r.swept) > ReplyTTL/4 {
		r.swept = now
		for id, c := range r.clients {
			if len(c.m) == 0 && now.Sub(c.last) > ReplyTTL {
				delete(r.clients, id)
			}
		}
	}
	// The order names replies since dropped by done marks: compact it
	// when they are most of it, so that it stays within twice the table.
	if len(r.order) > 2*r.n+64 {
		live := r.order[:0]
		for _, e := range r.order {
			if c := r.clients[e.k.client]; c != nil {
				if _, ok := c.m[e.k.seq]; ok {
					live = append(live, e)
				}
			}
		}
		clear(r.order[len(live):])
		r.order = live
	}
}

// put keeps reply for request k, which check found new, at now.
func (r *replies) put(k replyKey, reply []byte, now time.Time) {
	if r.clients == nil {
		r.clients = make(map[uint64]*clientReplies)
	}
	c := r.clients[k.client]
	if c == nil {
		c = &clientReplies{m: make(map[uint64][]byte)}
		r.clients[k.client] = c
	}
	if k.seq <= c.done {
		return // its client gave it up while it was applied
	}
	if _, ok := c.m[k.seq]; !ok {
		r.n++
	}
	c.m[k.seq] = reply
	c.last = now
	r.order = append(r.order, replyEntry{k, now})
}
