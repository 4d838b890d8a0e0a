package mq

import (
	"errors"
	"testing"
)

// TestPushMessages: invitations and pushed batches carry a tag made
// with the topic's data region key: they parse back under that key,
// and a changed byte or another key is refused.
func TestPushMessages(t *testing.T) {
	tp := &Topic{ref: Ref{Data: 7, DataKey: 0x1234}, l: testLayout()}
	other := &Topic{ref: Ref{Data: 7, DataKey: 0x1235}, l: testLayout()}
	inv := appendInvite(tp, "mq.push.7.ab.1", 4, 3)
	if job, size, rank, err := parseInvite(tp, inv); err != nil || job != "mq.push.7.ab.1" || size != 4 || rank != 3 {
		t.Fatalf("invitation: %q %d %d %v", job, size, rank, err)
	}
	if _, _, _, err := parseInvite(other, inv); !errors.Is(err, errBadPush) {
		t.Fatalf("invitation under another key: %v", err)
	}
	for _, bad := range [][]byte{appendInvite(tp, "j", 4, 4), appendInvite(tp, "j", 1, 0), inv[:5]} {
		if _, _, _, err := parseInvite(tp, bad); !errors.Is(err, errBadPush) {
			t.Fatalf("invitation %x: %v", bad, err)
		}
	}
	enc, meta := encodeBatch(batchMeta{offset: 128, producer: 9, seq: 2}, recs("a", "b"))
	putBatchHeader(enc, batchMeta{offset: 128, span: meta.span, count: meta.count, bodyLen: meta.bodyLen, crc: meta.crc, producer: 9, seq: 2})
	m := append([]byte{0x4d, 0x50, 0, 0, 2, 0, 0, 0}, enc[:batchHeaderLen+int(meta.bodyLen)]...)
	m = pushTag(tp, m)
	sub := &Subscription{c: &Consumer{handle: handle{t: tp}}}
	p, got, body, err := sub.parsePush(m)
	if err != nil || p != 2 || got.offset != 128 || got.seq != 2 {
		t.Fatalf("pushed batch: partition %d, %+v, %v", p, got, err)
	}
	if rs, err := parseBody(got, body); err != nil || len(rs) != 2 || string(rs[1].Value) != "b" {
		t.Fatalf("pushed records: %v %v", rs, err)
	}
	for i := range m {
		m[i] ^= 1
		if _, _, _, err := sub.parsePush(m); err == nil {
			t.Fatalf("a pushed batch with byte %d changed was taken", i)
		}
		m[i] ^= 1
	}
	if _, _, _, err := (&Subscription{c: &Consumer{handle: handle{t: other}}}).parsePush(m); !errors.Is(err, errBadPush) {
		t.Fatalf("pushed batch under another key: %v", err)
	}
}

// FuzzPushMessages: invitations and pushed batches from anyone holding
// the topic's key (the fuzzer's bytes, tagged with it) never crash the
// parsers, and what they accept lies within the topic: a partition it
// has, a job a subscriber may join, a body of the length its header
// says.
func FuzzPushMessages(f *testing.F) {
	tp := &Topic{ref: Ref{Data: 7, DataKey: 0x1234}, l: testLayout()}
	f.Add(appendInvite(tp, "mq.push.7.ab.1", 4, 3)[:18], false)
	enc, meta := encodeBatch(batchMeta{offset: 128, producer: 9, seq: 2}, recs("a", "b"))
	putBatchHeader(enc, batchMeta{offset: 128, span: meta.span, count: meta.count, bodyLen: meta.bodyLen, crc: meta.crc, producer: 9, seq: 2})
	f.Add(append([]byte{0x4d, 0x50, 0, 0, 2, 0, 0, 0}, enc[:batchHeaderLen+int(meta.bodyLen)]...), true)
	f.Add([]byte{}, true)
	sub := &Subscription{c: &Consumer{handle: handle{t: tp}}}
	f.Fuzz(func(t *testing.T, body []byte, push bool) {
		for _, m := range [][]byte{body, pushTag(tp, append([]byte(nil), body...))} {
			if !push {
				job, size, rank, err := parseInvite(tp, m)
				if err == nil && (size < 2 || size > MaxSubscribers+1 || rank < 1 || rank >= size || len(job) > len(m)) {
					t.Fatalf("invitation accepted: job %q, rank %d of %d", job, rank, size)
				}
				continue
			}
			p, got, b, err := sub.parsePush(m)
			if err != nil {
				continue
			}
			if p < 0 || p >= tp.l.Partitions || len(b) != int(got.bodyLen) {
				t.Fatalf("push accepted: partition %d, body %d bytes for %d", p, len(b), got.bodyLen)
			}
			_, _ = parseBody(got, b) // a body that does not parse is an error, never a crash
		}
	})
}
