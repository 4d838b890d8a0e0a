package durable

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/memnode"
)

// FuzzParseReplies feeds ParseReplies arbitrary bytes, seeded with
// journals that hold records, empty slots and a torn one: it never
// panics, refuses what is not a journal with ErrReplyJournal, and the
// records it accepts, written to a new journal, read back the same.
func FuzzParseReplies(f *testing.F) {
	j := make([]byte, ReplyJournalLen(4))
	putReplyHeader(j, 4)
	for seq := uint64(3); seq <= 6; seq++ {
		r := memnode.ReplyRecord{Client: netip.MustParseAddrPort("10.0.0.9:5000"), ID: seq, Hop: 1, Old: seq << 8, At: time.Unix(5, int64(seq))}
		if seq == 5 {
			r.Client = netip.MustParseAddrPort("[fd00::9]:7")
		}
		putReply(j[ReplyRecordLen*(1+(seq-1)%4):], seq, &r)
	}
	f.Add(j)
	torn := append([]byte(nil), j...)
	torn[ReplyRecordLen+30] ^= 1
	f.Add(torn)
	f.Add(j[:ReplyRecordLen*2])
	empty := make([]byte, ReplyJournalLen(1))
	putReplyHeader(empty, 1)
	f.Add(empty)
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := ParseReplies(b)
		if err != nil {
			if !errors.Is(err, ErrReplyJournal) {
				t.Fatalf("an error not wrapping ErrReplyJournal: %v", err)
			}
			return
		}
		if len(b) != ReplyJournalLen(got.Slots) || len(got.Records)+got.Bad > got.Slots {
			t.Fatalf("%d bytes: %d slots, %d records, %d bad", len(b), got.Slots, len(got.Records), got.Bad)
		}
		again := make([]byte, len(b))
		putReplyHeader(again, got.Slots)
		for i := range got.Records {
			putReply(again[ReplyRecordLen*(1+i):], uint64(i+1), &got.Records[i])
		}
		back, err := ParseReplies(again)
		if err != nil || back.Bad != 0 || len(back.Records) != len(got.Records) {
			t.Fatalf("written again: %v, %d bad, %d records of %d", err, back.Bad, len(back.Records), len(got.Records))
		}
		for i, r := range back.Records {
			if w := got.Records[i]; r.Client != w.Client || r.ID != w.ID || r.Hop != w.Hop || r.Status != w.Status || r.Old != w.Old || !r.At.Equal(w.At) {
				t.Fatalf("record %d written again: %+v, want %+v", i, r, w)
			}
		}
	})
}
