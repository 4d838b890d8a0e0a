package mq

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Sizes of the layout's fixed parts.
const (
	// Align is the unit of a partition's log: every batch starts on a
	// multiple of it and spans a multiple of it.
	Align = 64
	// HeaderBytes is the topic header at the start of the data region.
	HeaderBytes = 4096
	// partHeaderBytes is a partition's header in the control region.
	partHeaderBytes = 64
	// MaxPartitions bounds a topic's partitions.
	MaxPartitions = 4096
	// MaxGroups bounds a topic's consumer groups.
	MaxGroups = 1024
	// maxOffset bounds offsets (the seal claim keeps the offset in the
	// high 56 bits).
	maxOffset = 1 << 55
)

// Words of a partition header in the control region.
const (
	wordTail      = 0  // the reservation counter: the next batch's offset
	wordCommitted = 8  // every batch below it is published or sealed
	wordStart     = 16 // the oldest offset still retained
	wordHoles     = 24 // holes sealed
	wordClaim     = 32 // the seal in progress: offset<<8 | attempt
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// magic opens a topic's header.
var magic = [8]byte{'N', 'D', 'M', 'A', 'M', 'Q', 0, 1}

// Errors of layouts.
var (
	// ErrBadLayout is wrapped by the error for a geometry that is not
	// usable, or a header that is not a topic's.
	ErrBadLayout = errors.New("mq: bad topic layout")
	// ErrTooLarge is wrapped by the error for a batch over the topic's
	// limit.
	ErrTooLarge = errors.New("mq: batch too large")
)

// Layout is the geometry of a topic.
type Layout struct {
	// Partitions is the number of partitions, 1 to MaxPartitions.
	Partitions int
	// SegmentBytes is the unit in which a partition's log is retained
	// and dropped: a multiple of Align, 4 KiB to 1 GiB.
	SegmentBytes uint64
	// Segments is the segments of a partition's ring, at least 2: the
	// log keeps the newest Segments-1 to Segments of them.
	Segments int
	// MaxBatch is the largest batch in bytes, header included: a
	// multiple of Align, at most a segment.
	MaxBatch uint64
	// Groups is the consumer groups the topic can hold, 0 to MaxGroups.
	Groups int
}

// Check reports what makes l unusable.
func (l Layout) Check() error {
	switch {
	case l.Partitions < 1 || l.Partitions > MaxPartitions:
		return fmt.Errorf("%w: %d partitions (want 1 to %d)", ErrBadLayout, l.Partitions, MaxPartitions)
	case l.SegmentBytes < 4096 || l.SegmentBytes > 1<<30 || l.SegmentBytes%Align != 0:
		return fmt.Errorf("%w: segment of %d bytes (want a multiple of %d from 4 KiB to 1 GiB)", ErrBadLayout, l.SegmentBytes, Align)
	case l.Segments < 2 || l.Segments > 1<<20:
		return fmt.Errorf("%w: %d segments per partition (want 2 to 2^20)", ErrBadLayout, l.Segments)
	case l.MaxBatch < 2*Align || l.MaxBatch > l.SegmentBytes || l.MaxBatch%Align != 0:
		return fmt.Errorf("%w: largest batch of %d bytes (want a multiple of %d from %d to the segment, %d)", ErrBadLayout, l.MaxBatch, Align, 2*Align, l.SegmentBytes)
	case l.Groups < 0 || l.Groups > MaxGroups:
		return fmt.Errorf("%w: %d consumer groups (want 0 to %d)", ErrBadLayout, l.Groups, MaxGroups)
	case l.ring()*uint64(l.Partitions) > 1<<44:
		return fmt.Errorf("%w: %d partitions of %d bytes exceed 16 TiB", ErrBadLayout, l.Partitions, l.ring())
	case uint64(l.Partitions)*uint64(l.Segments) > 1<<24:
		return fmt.Errorf("%w: %d partitions of %d segments exceed 2^24 segments (the time index)", ErrBadLayout, l.Partitions, l.Segments)
	}
	return nil
}

// ring is a partition's log space in bytes.
func (l Layout) ring() uint64 { return l.SegmentBytes * uint64(l.Segments) }

// DataSize is the data region's size.
func (l Layout) DataSize() uint64 { return HeaderBytes + uint64(l.Partitions)*l.ring() }

// groupBytes is one group's record: its id word and an offset per
// partition, rounded up to Align.
func (l Layout) groupBytes() uint64 { return (8*uint64(1+l.Partitions) + Align - 1) / Align * Align }

// groupsStart is where the groups begin in the control region.
func (l Layout) groupsStart() uint64 { return uint64(l.Partitions) * partHeaderBytes }

// timesStart is where the time index begins in the control region:
// a word per segment of every partition, after the groups.
func (l Layout) timesStart() uint64 { return l.groupsStart() + uint64(l.Groups)*l.groupBytes() }

// ControlSize is the control region's size.
func (l Layout) ControlSize() uint64 {
	return l.timesStart() + uint64(l.Partitions)*uint64(l.Segments)*8
}

// timeAddr is the control region offset of the time index word of
// partition p's segment seg (a segment number: offset / SegmentBytes).
func (l Layout) timeAddr(p int, seg uint64) uint64 {
	return l.timesStart() + (uint64(p)*uint64(l.Segments)+seg%uint64(l.Segments))*8
}

// partAddr is the control region offset of partition p's header.
func (l Layout) partAddr(p int) uint64 { return uint64(p) * partHeaderBytes }

// groupAddr is the control region offset of group slot g.
func (l Layout) groupAddr(g int) uint64 { return l.groupsStart() + uint64(g)*l.groupBytes() }

// dataAddr is the data region offset of offset off of partition p.
func (l Layout) dataAddr(p int, off uint64) uint64 {
	return HeaderBytes + uint64(p)*l.ring() + off%l.ring()
}

// pieces cuts n bytes at offset off of partition p at the ring's end:
// the data region spans to access, one or two.
func (l Layout) pieces(p int, off, n uint64) [][2]uint64 {
	at := off % l.ring()
	if at+n <= l.ring() {
		return [][2]uint64{{l.dataAddr(p, off), n}}
	}
	first := l.ring() - at
	return [][2]uint64{{l.dataAddr(p, off), first}, {l.dataAddr(p, 0), n - first}}
}

// headerLen is appendHeader's output length.
const headerLen = 8 + 4 + 8 + 4 + 8 + 4 + 4

// appendHeader encodes the header of a topic of layout l.
func appendHeader(b []byte, l Layout) []byte {
	b = append(b, magic[:]...)
	b = binary.LittleEndian.AppendUint32(b, uint32(l.Partitions))
	b = binary.LittleEndian.AppendUint64(b, l.SegmentBytes)
	b = binary.LittleEndian.AppendUint32(b, uint32(l.Segments))
	b = binary.LittleEndian.AppendUint64(b, l.MaxBatch)
	b = binary.LittleEndian.AppendUint32(b, uint32(l.Groups))
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// parseHeader decodes and checks a topic header.
func parseHeader(b []byte) (Layout, error) {
	if len(b) < headerLen || [8]byte(b[:8]) != magic {
		return Layout{}, fmt.Errorf("%w: the region does not start with a topic header", ErrBadLayout)
	}
	if crc32.Checksum(b[:headerLen-4], castagnoli) != binary.LittleEndian.Uint32(b[headerLen-4:]) {
		return Layout{}, fmt.Errorf("%w: the header's checksum does not match", ErrBadLayout)
	}
	l := Layout{
		Partitions:   int(binary.LittleEndian.Uint32(b[8:])),
		SegmentBytes: binary.LittleEndian.Uint64(b[12:]),
		Segments:     int(binary.LittleEndian.Uint32(b[20:])),
		MaxBatch:     binary.LittleEndian.Uint64(b[24:]),
		Groups:       int(binary.LittleEndian.Uint32(b[32:])),
	}
	return l, l.Check()
}
