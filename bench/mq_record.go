package bench

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"time"
)

// A benchmark record starts with its header (little-endian): u32 magic,
// u32 producer, u32 partition, u32 zero, u64 sequence number (per
// producer and partition, from 1), i64 the time the producer made it
// (unix ns); filler bytes follow up to the record's size.
const (
	mqRecHeader = 32
	mqRecMagic  = 0x51_4d_42_4e // "NBMQ"
	// mqRecOverhead and mqBatchOverhead bound what a queue stores
	// besides a record's bytes, and besides a batch's records.
	mqRecOverhead   = 64
	mqBatchOverhead = 128
)

// mqRecord fills b (at least mqRecHeader bytes) as producer's record
// seq of partition part, made at now.
func mqRecord(b []byte, producer, part int, seq uint64, now time.Time) {
	binary.LittleEndian.PutUint32(b[0:], mqRecMagic)
	binary.LittleEndian.PutUint32(b[4:], uint32(producer))
	binary.LittleEndian.PutUint32(b[8:], uint32(part))
	binary.LittleEndian.PutUint32(b[12:], 0)
	binary.LittleEndian.PutUint64(b[16:], seq)
	binary.LittleEndian.PutUint64(b[24:], uint64(now.UnixNano()))
	for i := mqRecHeader; i < len(b); i++ {
		b[i] = byte(i)
	}
}

// mqRecHead is what a record's header says.
type mqRecHead struct {
	producer, part int
	seq            uint64
	made           int64 // unix ns
}

// parseMQRecord reads b's header; ok is false when b is not a
// benchmark record.
func parseMQRecord(b []byte) (h mqRecHead, ok bool) {
	if len(b) < mqRecHeader || binary.LittleEndian.Uint32(b) != mqRecMagic || binary.LittleEndian.Uint32(b[12:]) != 0 {
		return h, false
	}
	h.producer = int(binary.LittleEndian.Uint32(b[4:]))
	h.part = int(binary.LittleEndian.Uint32(b[8:]))
	h.seq = binary.LittleEndian.Uint64(b[16:])
	h.made = int64(binary.LittleEndian.Uint64(b[24:]))
	return h, true
}

// latHist is a histogram of durations in a fixed table: exact below
// 64 ns, then 32 buckets per power of two (each within 1/32 of its
// values). The zero value is empty; not safe for concurrent use.
type latHist struct {
	n      uint64
	counts [64 + 58*32]uint64
}

func histBucket(v uint64) int {
	if v < 64 {
		return int(v)
	}
	shift := bits.Len64(v) - 6
	return 64 + (shift-1)*32 + int(v>>shift) - 32
}

// histMid is the middle of bucket i's values.
func histMid(i int) uint64 {
	if i < 64 {
		return uint64(i)
	}
	shift := (i-64)/32 + 1
	lo := uint64((i-64)%32+32) << shift
	return lo + (uint64(1)<<shift)/2
}

func (h *latHist) add(d time.Duration) {
	h.counts[histBucket(uint64(max(d, 0)))]++
	h.n++
}

func (h *latHist) merge(o *latHist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// sparse returns h's non-empty buckets, by index, to send to another
// process; fromSparse adds such buckets to h.
func (h *latHist) sparse() map[int]uint64 {
	m := make(map[int]uint64)
	for i, c := range h.counts {
		if c > 0 {
			m[i] = c
		}
	}
	return m
}

func (h *latHist) fromSparse(m map[int]uint64) error {
	for i, c := range m {
		if i < 0 || i >= len(h.counts) {
			return fmt.Errorf("histogram bucket %d out of range", i)
		}
		h.counts[i] += c
		h.n += c
	}
	return nil
}

// pctUS is the p-th percentile in microseconds (nearest rank; zero
// when empty).
func (h *latHist) pctUS(p int) float64 {
	if h.n == 0 {
		return 0
	}
	rank := max((h.n*uint64(p)+99)/100, 1)
	var seen uint64
	for i, c := range h.counts {
		if seen += c; seen >= rank {
			return round(us(time.Duration(histMid(i))), 5)
		}
	}
	panic("unreachable: the counts sum to n")
}
