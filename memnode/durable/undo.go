package durable

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/ndma/ndma/memnode"
)

// The undo record (DIR/undo) makes a mutating request and its reply
// record one unit on disk under SyncAlways. Before the node applies a
// request it writes the bytes the request may change, as they are, to
// the undo file and flushes it (Begin); after applying it flushes the
// changed bytes, then writes and flushes the request's reply record
// (Commit), and only then answers. A restart that finds an undo record
// whose reply record is not in the journal (the request was cut short
// by a crash or a power loss, and its client had no answer) puts the
// old bytes back, so the request is either applied with its reply
// record or not at all: a resend is answered from the record, or
// applied for the first time. The file holds one record:
//
//	magic "NDMAUND1", sequence number u64 (the reply record the
//	request's Commit writes), span count u32, then for each span its
//	node-local offset u64, length u32 and bytes, then a CRC32C u32 of
//	everything before it
//
// All integers are little-endian. An empty file, or a record that does
// not check out (a Begin a crash cut mid-write, whose request was not
// applied yet), holds nothing to undo.

// undoMagic opens an undo record.
const undoMagic = "NDMAUND1"

// undoHeaderLen is the bytes before the first span.
const undoHeaderLen = 8 + 8 + 4

// MaxUndoSpans bounds the spans of one record (an OPTIM request
// changes three).
const MaxUndoSpans = 4

// ErrUndo is returned (wrapped) by ParseUndo for bytes that are not
// an undo record.
var ErrUndo = errors.New("not an undo record")

// Undo is an undo record as ParseUndo reads it.
type Undo struct {
	Seq   uint64 // the reply record the request's Commit writes
	Spans []memnode.Span
	Old   [][]byte // the bytes of each span before the request
}

// appendUndo appends the record of request seq, saving spans of mem
// (each already inside mem), to b.
func appendUndo(b []byte, seq uint64, spans []memnode.Span, mem []byte) []byte {
	le := binary.LittleEndian
	start := len(b)
	b = append(b, undoMagic...)
	b = le.AppendUint64(b, seq)
	b = le.AppendUint32(b, uint32(len(spans)))
	for _, s := range spans {
		b = le.AppendUint64(b, s.Off)
		b = le.AppendUint32(b, uint32(s.Len))
		b = append(b, mem[s.Off:s.Off+s.Len]...)
	}
	return le.AppendUint32(b, crc32.Checksum(b[start:], replyCRC))
}

// ParseUndo reads an undo record; the spans' bytes alias b. It fails,
// wrapping ErrUndo, for bytes that are not one (empty, torn, corrupt,
// or naming more than MaxUndoSpans spans or bytes past memLen, the
// size of the node's memory).
func ParseUndo(b []byte, memLen uint64) (Undo, error) {
	le := binary.LittleEndian
	if len(b) < undoHeaderLen+4 || string(b[:8]) != undoMagic {
		return Undo{}, fmt.Errorf("%w: no header in %d bytes", ErrUndo, len(b))
	}
	u := Undo{Seq: le.Uint64(b[8:])}
	count := le.Uint32(b[16:])
	if count > MaxUndoSpans {
		return Undo{}, fmt.Errorf("%w: %d spans", ErrUndo, count)
	}
	p := undoHeaderLen
	for range count {
		if len(b)-p < 12 {
			return Undo{}, fmt.Errorf("%w: cut short", ErrUndo)
		}
		s := memnode.Span{Off: le.Uint64(b[p:]), Len: uint64(le.Uint32(b[p+8:]))}
		p += 12
		if uint64(len(b)-p) < s.Len {
			return Undo{}, fmt.Errorf("%w: cut short", ErrUndo)
		}
		if s.Off > memLen || s.Len > memLen-s.Off {
			return Undo{}, fmt.Errorf("%w: span [%d, +%d) past the %d bytes of memory", ErrUndo, s.Off, s.Len, memLen)
		}
		u.Spans = append(u.Spans, s)
		u.Old = append(u.Old, b[p:p+int(s.Len)])
		p += int(s.Len)
	}
	if len(b)-p < 4 || le.Uint32(b[p:]) != crc32.Checksum(b[:p], replyCRC) {
		return Undo{}, fmt.Errorf("%w: bad checksum", ErrUndo)
	}
	if u.Seq == 0 {
		return Undo{}, fmt.Errorf("%w: sequence number 0", ErrUndo)
	}
	return u, nil
}

// clampSpans returns the parts of spans inside memory of memLen bytes,
// dropping empty ones, in dst.
func clampSpans(dst, spans []memnode.Span, memLen uint64) []memnode.Span {
	for _, s := range spans {
		if s.Off >= memLen || s.Len == 0 {
			continue
		}
		dst = append(dst, memnode.Span{Off: s.Off, Len: min(s.Len, memLen-s.Off)})
	}
	return dst
}
