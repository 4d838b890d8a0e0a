package durable

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net/netip"
	"slices"
	"time"

	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/wire"
)

// The reply journal (DIR/replies) keeps the replies of the mutating
// requests a durable node applied (memnode.ReplyRecord), so that a
// request resent across a restart is answered from it rather than
// applied again. It is a ring of fixed-size slots after a header, the
// whole file of a size fixed when it is made:
//
//	header (64 bytes): magic "NDMARPL1", slots u32, record length u32
//	(64), zero padding, CRC32C u32 of the 60 bytes before it
//	slot (64 bytes): sequence number u64 (0: an empty slot), time i64
//	(Unix ns), client address (16 bytes, IPv4 mapped), client port
//	u16, chain hop u8, status u8, request id u64, old u64, zero
//	padding, CRC32C u32 of the 60 bytes before it
//
// Record n (numbered from 1) lives in slot (n-1) mod slots, so the
// ring holds the newest slots records. All integers are little-endian.

// replyMagic opens a reply journal.
const replyMagic = "NDMARPL1"

// ReplyRecordLen is the bytes of the journal's header and of each slot.
const ReplyRecordLen = 64

// MaxReplySlots bounds a journal's slots (64 MiB of file).
const MaxReplySlots = 1 << 20

// ErrReplyJournal is returned (wrapped) by ParseReplies for bytes that
// are not a reply journal: too short, a wrong magic or header checksum,
// or a length that does not match the slots the header names.
var ErrReplyJournal = errors.New("not a reply journal")

var replyCRC = crc32.MakeTable(crc32.Castagnoli)

// ReplyJournalLen is the size of a journal of slots slots.
func ReplyJournalLen(slots int) int { return ReplyRecordLen * (1 + slots) }

// putReplyHeader writes the header of a journal of slots slots to b.
func putReplyHeader(b []byte, slots int) {
	h := b[:ReplyRecordLen]
	clear(h)
	copy(h, replyMagic)
	binary.LittleEndian.PutUint32(h[8:], uint32(slots))
	binary.LittleEndian.PutUint32(h[12:], ReplyRecordLen)
	binary.LittleEndian.PutUint32(h[60:], crc32.Checksum(h[:60], replyCRC))
}

// putReply writes record seq (r) to slot b (ReplyRecordLen bytes). The
// checksum is written last, but a torn slot is caught whatever the
// order the bytes reach the disk in.
func putReply(b []byte, seq uint64, r *memnode.ReplyRecord) {
	le := binary.LittleEndian
	b = b[:ReplyRecordLen]
	le.PutUint64(b[0:], seq)
	le.PutUint64(b[8:], uint64(r.At.UnixNano()))
	a := r.Client.Addr().As16()
	copy(b[16:32], a[:])
	le.PutUint16(b[32:], r.Client.Port())
	b[34], b[35] = r.Hop, byte(r.Status)
	le.PutUint64(b[36:], r.ID)
	le.PutUint64(b[44:], r.Old)
	clear(b[52:60])
	le.PutUint32(b[60:], crc32.Checksum(b[:60], replyCRC))
}

// Replies is a reply journal as ParseReplies reads it.
type Replies struct {
	Slots   int                   // the slots the header names
	Records []memnode.ReplyRecord // the valid records, oldest first
	Last    uint64                // the highest record number (0: none)
	// Bad counts the slots that are neither empty nor a valid record
	// (torn by a crash mid-write, or corrupt): skipped.
	Bad int
}

// ParseReplies reads a reply journal. It fails, wrapping
// ErrReplyJournal, only when b is not one; slots that do not check out
// are skipped and counted (Replies.Bad). It never keeps b.
func ParseReplies(b []byte) (Replies, error) {
	le := binary.LittleEndian
	if len(b) < ReplyRecordLen || string(b[:8]) != replyMagic ||
		le.Uint32(b[60:]) != crc32.Checksum(b[:60], replyCRC) {
		return Replies{}, fmt.Errorf("%w: no valid header in %d bytes", ErrReplyJournal, len(b))
	}
	slots, rlen := int(le.Uint32(b[8:])), le.Uint32(b[12:])
	if slots < 1 || slots > MaxReplySlots || rlen != ReplyRecordLen {
		return Replies{}, fmt.Errorf("%w: %d slots of %d bytes", ErrReplyJournal, slots, rlen)
	}
	if len(b) != ReplyJournalLen(slots) {
		return Replies{}, fmt.Errorf("%w: %d bytes, want %d for %d slots (truncated?)", ErrReplyJournal, len(b), ReplyJournalLen(slots), slots)
	}
	j := Replies{Slots: slots}
	type numbered struct {
		seq uint64
		r   memnode.ReplyRecord
	}
	var recs []numbered
	for i := range slots {
		s := b[ReplyRecordLen*(1+i):][:ReplyRecordLen]
		seq := le.Uint64(s)
		if seq == 0 && allZero(s) {
			continue
		}
		client := netip.AddrPortFrom(netip.AddrFrom16([16]byte(s[16:32])).Unmap(), le.Uint16(s[32:]))
		if seq == 0 || (seq-1)%uint64(slots) != uint64(i) || le.Uint32(s[60:]) != crc32.Checksum(s[:60], replyCRC) ||
			!allZero(s[52:60]) || !client.Addr().IsValid() || client.Addr().IsUnspecified() || client.Port() == 0 {
			j.Bad++
			continue
		}
		recs = append(recs, numbered{seq, memnode.ReplyRecord{Client: client, Hop: s[34], Status: wire.Status(s[35]),
			ID: le.Uint64(s[36:]), Old: le.Uint64(s[44:]), At: time.Unix(0, int64(le.Uint64(s[8:])))}})
		j.Last = max(j.Last, seq)
	}
	slices.SortFunc(recs, func(a, b numbered) int { return cmp.Compare(a.seq, b.seq) })
	j.Records = make([]memnode.ReplyRecord, len(recs))
	for i := range recs {
		j.Records[i] = recs[i].r
	}
	return j, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
