package mq

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// interrupted reserves space for recs in partition part as p would and
// stops there (a producer killed between reserve and publish): with
// write, after writing the batch whole; with header, after writing its
// header only. It returns the reservation.
func interrupted(t *testing.T, s *simMQ, p *Producer, part int, recs []Record, write, header bool) *attempt {
	t.Helper()
	pp := p.parts[part]
	pp.seq++
	enc, meta := encodeBatch(batchMeta{producer: p.cfg.ID}, recs)
	a := &attempt{seq: pp.seq, meta: meta, body: enc}
	off, err := p.t.ctl.FetchAdd(s.Ctx(), p.t.l.partAddr(part)+wordTail, uint64(len(enc)))
	if err != nil {
		t.Fatal(err)
	}
	a.off = off
	m := meta
	m.offset, m.seq = off, a.seq
	putBatchHeader(enc, m)
	switch {
	case write:
		err = p.t.writeLog(s.Ctx(), part, enc, off)
	case header:
		err = p.t.writeLog(s.Ctx(), part, enc[:batchHeaderLen], off)
	}
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestSimHoleSealed kills producers between reserve and publish: one
// before writing, one after writing the header only, one after writing
// the whole batch. Another producer's batches behind them are published
// after the seal timeout: the two holes are sealed, skipped by readers
// and counted, the whole batch is published (stored), and every
// acknowledged batch is read once, in order.
func TestSimHoleSealed(t *testing.T) {
	simTopic(t, 3, 3, testLayout(), CreateOptions{}, func(t *testing.T, s *simMQ) {
		tp, _ := s.open()
		ctx := s.Ctx()
		dead := NewProducer(tp, ProducerConfig{})
		live := NewProducer(tp, ProducerConfig{})
		if _, err := live.Produce(ctx, 0, recs("a")); err != nil {
			t.Fatal(err)
		}
		interrupted(t, s, dead, 0, recs("never written"), false, false)
		if _, err := live.Produce(ctx, 0, recs("b")); err != nil {
			t.Fatal(err)
		}
		interrupted(t, s, dead, 0, recs("header only"), false, true)
		interrupted(t, s, dead, 0, recs("whole"), true, false)
		start := time.Now()
		if _, err := live.Produce(ctx, 0, recs("c")); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < DefaultSealTimeout {
			t.Fatalf("published behind two holes after %v, before the seal timeout", d)
		}
		c, err := NewConsumer(ctx, tp, ConsumerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if got := drain(t, s, c, 0); !slices.Equal(got, []string{"a", "b", "whole", "c"}) {
			t.Fatalf("read %v", got)
		}
		st, err := tp.State(ctx, 0)
		ps := live.Stats()
		if err != nil || st.Holes != 2 || ps.Sealed != 2 || ps.Published != 1 || st.Committed != st.Tail {
			t.Fatalf("state %+v %v, producer %+v", st, err, ps)
		}
		if cs := c.Stats(); cs.Corrupt != 0 || cs.Records != 4 {
			t.Fatalf("consumer %+v", cs)
		}
	})
}

// TestSimHoleSealedByConsumer: with no producer left, a consumer's long
// poll seals the hole a dead producer left and reads what lies behind
// it.
func TestSimHoleSealedByConsumer(t *testing.T) {
	simTopic(t, 4, 2, testLayout(), CreateOptions{}, func(t *testing.T, s *simMQ) {
		tp, _ := s.open()
		ctx := s.Ctx()
		dead := NewProducer(tp, ProducerConfig{})
		interrupted(t, s, dead, 1, recs("lost"), false, false)
		interrupted(t, s, dead, 1, recs("behind"), true, false)
		c, err := NewConsumer(ctx, tp, ConsumerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if rs, err := c.Fetch(ctx, 1, time.Second); err != nil || len(rs) != 0 {
			t.Fatalf("before the seal timeout: %v %v", rs, err)
		}
		rs, err := c.Fetch(ctx, 1, 5*time.Second)
		if err != nil || len(rs) != 1 || string(rs[0].Value) != "behind" {
			t.Fatalf("after the seal timeout: %v %v", rs, err)
		}
		if cs := c.Stats(); cs.Sealed != 1 || cs.Published != 1 {
			t.Fatalf("consumer %+v", cs)
		}
	})
}

// TestSimRetryNotStoredTwice: a produce whose outcome was unknown is
// produced again. When its batch had been stored, the retry finds it
// and stores nothing (Duplicate); when it had not (its reservation was
// never written), the retry stores it once, after the hole is sealed.
func TestSimRetryNotStoredTwice(t *testing.T) {
	simTopic(t, 5, 3, testLayout(), CreateOptions{Replicas: 2}, func(t *testing.T, s *simMQ) {
		tp, _ := s.open()
		ctx := s.Ctx()
		p := NewProducer(tp, ProducerConfig{})
		for i, write := range []bool{true, false} {
			rs := recs("once", string(rune('a'+i)))
			a := interrupted(t, s, p, 2, rs, write, false)
			p.parts[2].pending = a
			off := a.off
			ack, err := p.Produce(ctx, 2, rs)
			if err != nil || ack.Duplicate != write || ack.Sequence != a.seq || (ack.Offset == off) != write {
				t.Fatalf("retry %d: %+v %v (reserved at %d)", i, ack, err, off)
			}
		}
		c, err := NewConsumer(ctx, tp, ConsumerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if got := drain(t, s, c, 2); !slices.Equal(got, []string{"once", "a", "once", "b"}) {
			t.Fatalf("read %v", got)
		}
		if ps := p.Stats(); ps.Duplicates != 1 {
			t.Fatalf("producer %+v", ps)
		}
		// A produce with an expired context fails cleanly.
		dctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := p.Produce(dctx, 0, recs("x")); !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled produce: %v", err)
		}
	})
}

// TestSimCorruptSkipped corrupts stored batches (a body byte, a header
// byte, a header claiming a span past the committed offset): readers
// skip each, count it, and return every other batch in order.
func TestSimCorruptSkipped(t *testing.T) {
	simTopic(t, 6, 2, testLayout(), CreateOptions{}, func(t *testing.T, s *simMQ) {
		tp, _ := s.open()
		ctx := s.Ctx()
		p := NewProducer(tp, ProducerConfig{})
		var acks []Ack
		for _, v := range []string{"a", "bad body", "b", "bad header", "c", "long span"} {
			a, err := p.Produce(ctx, 0, recs(v))
			if err != nil {
				t.Fatal(err)
			}
			acks = append(acks, a)
		}
		flip := func(off uint64) {
			b := make([]byte, 1)
			if err := tp.readLog(ctx, 0, b, off); err != nil {
				t.Fatal(err)
			}
			b[0] ^= 0x40
			if err := tp.writeLog(ctx, 0, b, off); err != nil {
				t.Fatal(err)
			}
		}
		flip(acks[1].Offset + batchHeaderLen + 14)
		flip(acks[3].Offset + 20)
		hb := make([]byte, batchHeaderLen)
		if err := tp.readLog(ctx, 0, hb, acks[5].Offset); err != nil {
			t.Fatal(err)
		}
		m, err := parseBatchHeader(hb, acks[5].Offset, tp.l.MaxBatch)
		if err != nil {
			t.Fatal(err)
		}
		m.span += 2 * Align
		m.bodyLen += 2 * Align
		putBatchHeader(hb, m)
		if err := tp.writeLog(ctx, 0, hb, acks[5].Offset); err != nil {
			t.Fatal(err)
		}
		c, err := NewConsumer(ctx, tp, ConsumerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if got := drain(t, s, c, 0); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("read %v", got)
		}
		if cs := c.Stats(); cs.Corrupt != 3 || cs.Records != 3 {
			t.Fatalf("consumer %+v", cs)
		}
		// Produced after the corruption: read as usual.
		if _, err := p.Produce(ctx, 0, recs("d")); err != nil {
			t.Fatal(err)
		}
		if got := drain(t, s, c, 0); !slices.Equal(got, []string{"d"}) {
			t.Fatalf("then read %v", got)
		}
	})
}
