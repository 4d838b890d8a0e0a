package kv

import "time"

// Bounds of an owner's table of recent replies.
const (
	// MaxReplies is the most replies an owner keeps.
	MaxReplies = 1 << 16
	// ReplyTTL is how long a reply is kept at least: longer than a
	// client goes on sending one request again (its context).
	ReplyTTL = time.Minute
)

type replyKey struct{ client, seq uint64 }

// replies is an owner's table of the replies it gave, by client and
// request, so that a request sent again (its answer was lost, or late)
// is answered as the first time instead of applied twice. An entry
// lives ReplyTTL at least; when the table is full of live entries, new
// requests are refused as busy (not applied) until the oldest expires.
type replies struct {
	m     map[replyKey][]byte
	order []replyEntry // insertion order, oldest first
}

type replyEntry struct {
	k  replyKey
	at time.Time
}

func (r *replies) get(k replyKey) ([]byte, bool) {
	b, ok := r.m[k]
	return b, ok
}

// room makes room for one more entry at now; false when the table is
// full of entries younger than ReplyTTL.
func (r *replies) room(now time.Time) bool {
	for len(r.order) > 0 && (len(r.m) >= MaxReplies || now.Sub(r.order[0].at) > ReplyTTL) {
		if now.Sub(r.order[0].at) <= ReplyTTL {
			return false
		}
		delete(r.m, r.order[0].k)
		r.order[0] = replyEntry{}
		r.order = r.order[1:]
	}
	if len(r.order) == 0 {
		r.order = nil // let the array go
	}
	return len(r.m) < MaxReplies
}

func (r *replies) put(k replyKey, reply []byte, now time.Time) {
	if r.m == nil {
		r.m = make(map[replyKey][]byte)
	}
	r.m[k] = reply
	r.order = append(r.order, replyEntry{k, now})
}
