package kv

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Requests an owner serves (the first byte of an anycast request).
const (
	opMeta    = 1  // the key space's region: id and key
	opSet     = 2  // store the value, whether or not the key exists
	opAdd     = 3  // store only if the key does not exist
	opDelete  = 4  // remove the key
	opCAS     = 5  // store only if the key's version is the one given
	opIncr    = 6  // add a signed delta to a decimal integer value
	opReplace = 7  // store only if the key exists
	opAppend  = 8  // add the bytes after the value (expiry and flags kept)
	opPrepend = 9  // add the bytes before the value (expiry and flags kept)
	opTouch   = 10 // give the value a new expiry
	// opSetBatch stores several values of one shard: the value is the
	// entries (appendBatch), the key the first entry's (which routes it);
	// expiry and flags apply to every entry. The reply's body holds each
	// entry's status and version.
	opSetBatch = 11
	// opRebuild rebuilds a lost shard column of an erasure-coded key
	// space in rows of one shard, which the anycast key names: the
	// value is the column (u8), the rows' first volume offset and their
	// length (u64 each), which must lie in that shard's table or heap.
	// Its owner, the rows' only writer, rebuilds them under the shard's
	// lock (RebuildShards); the key is empty.
	opRebuild = 12
)

// rebuildReqLen is an opRebuild request's value.
const rebuildReqLen = 1 + 8 + 8

func appendRebuild(col int, off, n uint64) []byte {
	b := []byte{byte(col)}
	b = binary.LittleEndian.AppendUint64(b, off)
	return binary.LittleEndian.AppendUint64(b, n)
}

func parseRebuild(b []byte) (col int, off, n uint64, ok bool) {
	if len(b) != rebuildReqLen {
		return 0, 0, 0, false
	}
	return int(b[0]), binary.LittleEndian.Uint64(b[1:]), binary.LittleEndian.Uint64(b[9:]), true
}

// Bounds of a SetMulti batch request.
const (
	maxBatchEntries = 256
	maxBatchBytes   = 60 << 10
)

// batchEntryFixed is an entry's length fields: key u16, value u32.
const batchEntryFixed = 2 + 4

// appendBatchEntry appends one entry of an opSetBatch request.
func appendBatchEntry(b, key, val []byte) []byte {
	b = binary.LittleEndian.AppendUint16(b, uint16(len(key)))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(val)))
	b = append(b, key...)
	return append(b, val...)
}

// parseBatch splits an opSetBatch request's entries; the slices alias b.
func parseBatch(b []byte) (keys, vals [][]byte, err error) {
	for len(b) > 0 {
		if len(b) < batchEntryFixed || len(keys) == maxBatchEntries {
			return nil, nil, ErrBadRequest
		}
		kl, vl := int(binary.LittleEndian.Uint16(b)), int(binary.LittleEndian.Uint32(b[2:]))
		b = b[batchEntryFixed:]
		if kl > len(b) || vl > len(b)-kl {
			return nil, nil, ErrBadRequest
		}
		keys, vals = append(keys, b[:kl]), append(vals, b[kl:kl+vl])
		b = b[kl+vl:]
	}
	if len(keys) == 0 {
		return nil, nil, ErrBadRequest
	}
	return keys, vals, nil
}

// Statuses an owner answers with (the first byte of a reply).
const (
	stOK       = 0
	stNotFound = 1
	stExists   = 2 // Add of a present key; CAS of another version
	stFull     = 3 // no free bucket or no heap space in the shard
	stBad      = 4 // malformed request, or a shard this owner does not own
	stNotInt   = 5 // Incr of a value that is not a decimal integer, or overflow
	stTooLarge = 6
	stFailed   = 7 // the owner could not write the pool: the outcome is unknown
	// stStale: the request named another incarnation of the owner (the
	// reply's version field carries the current one); not applied.
	stStale = 8
	// stBusy: not applied: the owner does not hold its rank yet, or its
	// table of recent replies has no room (for this client or at all),
	// or the request is at or below its client's done mark; try again.
	stBusy = 9
	// stDenied: the caller's certified scope may not use the key space
	// (OwnerConfig.Clients).
	stDenied = 10
)

// Errors the store returns.
var (
	// ErrNotFound is returned for a key that is not in the store.
	// An expired key is not found.
	ErrNotFound = errors.New("kv: key not found")
	// ErrExists is returned by Add for a key that exists (and has not
	// expired), and by
	// CompareAndSwap when the key's version is not the one given.
	ErrExists = errors.New("kv: key exists with another version")
	// ErrFull is returned when the key's shard has no free bucket or no
	// value space left.
	ErrFull = errors.New("kv: shard full")
	// ErrNotInteger is returned by Incr for a value that is not a
	// decimal integer, or a sum that overflows 64 bits.
	ErrNotInteger = errors.New("kv: value is not a 64-bit decimal integer")
	// ErrUnknownOutcome is returned for a write that may or may not have
	// been applied: its owner failed while writing, or no answer came.
	// Reading the key tells which.
	ErrUnknownOutcome = errors.New("kv: write outcome unknown")
	// ErrBadRequest is an owner's refusal of a request it cannot parse.
	ErrBadRequest = errors.New("kv: bad request")
	// ErrDenied is an owner's refusal of a caller whose scope may not
	// use the key space (OwnerConfig.Clients, kvd --clients).
	ErrDenied = errors.New("kv: this credential's scope may not use the key space")
)

func statusErr(st byte) error {
	switch st {
	case stOK:
		return nil
	case stNotFound:
		return ErrNotFound
	case stExists:
		return ErrExists
	case stFull:
		return ErrFull
	case stNotInt:
		return ErrNotInteger
	case stTooLarge:
		return ErrTooLarge
	case stFailed:
		return ErrUnknownOutcome
	case stBad:
		return ErrBadRequest
	case stDenied:
		return ErrDenied
	case stInline, stRetry:
		return errInline
	}
	return fmt.Errorf("%w: owner answered status %d", ErrBadRequest, st)
}

// request is a write request: op; the client's id and the request's
// sequence number, which an owner answers again from its table of
// recent replies instead of applying twice, and the client's done mark
// (every request of its numbered up to it has had its answer or was
// given up: the owner forgets their replies); the owner incarnation the
// client expects; the expected version (CAS), the delta (Incr), the
// time to live (nanoseconds from when the owner applies it; 0: no
// expiry), the client's flags, key and value.
type request struct {
	op     byte
	client uint64
	seq    uint64
	done   uint64
	inc    uint64
	ver    uint64
	delta  int64
	ttl    int64
	flags  uint32
	key    []byte
	val    []byte
}

const reqFixed = 1 + 8 + 8 + 8 + 8 + 8 + 8 + 8 + 4 + 2

func (r *request) append(b []byte) []byte {
	b = append(b, r.op)
	b = binary.LittleEndian.AppendUint64(b, r.client)
	b = binary.LittleEndian.AppendUint64(b, r.seq)
	b = binary.LittleEndian.AppendUint64(b, r.done)
	b = binary.LittleEndian.AppendUint64(b, r.inc)
	b = binary.LittleEndian.AppendUint64(b, r.ver)
	b = binary.LittleEndian.AppendUint64(b, uint64(r.delta))
	b = binary.LittleEndian.AppendUint64(b, uint64(r.ttl))
	b = binary.LittleEndian.AppendUint32(b, r.flags)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(r.key)))
	b = append(b, r.key...)
	return append(b, r.val...)
}

func parseRequest(b []byte) (request, error) {
	if len(b) < reqFixed {
		return request{}, ErrBadRequest
	}
	le := binary.LittleEndian
	r := request{op: b[0], client: le.Uint64(b[1:]), seq: le.Uint64(b[9:]), done: le.Uint64(b[17:]),
		inc: le.Uint64(b[25:]), ver: le.Uint64(b[33:]), delta: int64(le.Uint64(b[41:])),
		ttl: int64(le.Uint64(b[49:])), flags: le.Uint32(b[57:])}
	klen := int(le.Uint16(b[61:]))
	if klen > len(b)-reqFixed || r.ttl < 0 {
		return request{}, ErrBadRequest
	}
	r.key = b[reqFixed : reqFixed+klen]
	r.val = b[reqFixed+klen:]
	return r, nil
}

// reply is an owner's answer: a status, the key's version after the
// request (or the present one, for a refused Add or CAS) and, for Meta
// and Incr, a body.
func appendReply(b []byte, st byte, ver uint64, body []byte) []byte {
	b = append(b, st)
	b = binary.LittleEndian.AppendUint64(b, ver)
	return append(b, body...)
}

func parseReply(b []byte) (st byte, ver uint64, body []byte, err error) {
	if len(b) < 9 {
		return 0, 0, nil, fmt.Errorf("%w: reply of %d bytes", ErrBadRequest, len(b))
	}
	return b[0], binary.LittleEndian.Uint64(b[1:]), b[9:], nil
}
