package wire

import (
	"encoding/binary"
	"hash/crc32"
	"math/bits"
	"sync"
	"sync/atomic"
)

// One payload sent under many headers (a forwarding node's reduced chunk,
// to every member's stream) needs one checksum per header, each over the
// header and the same payload. CRC32C is linear: the checksum of header
// and payload is the header's CRC register carried over the payload's
// length in zero bytes, combined with the payload's own CRC (computed
// once). Carrying a register over n zero bytes is a linear map of its 32
// bits, applied with four 256-entry tables per length; AppendHeaderShared
// uses them, so each header costs a CRC over 96 bytes instead of over the
// whole packet.

// PayloadCRC is the payload's part of every checksum that covers it, for
// AppendHeaderShared.
func PayloadCRC(payload []byte) uint32 {
	return ^crcUpdate(0xFFFFFFFF, payload)
}

// AppendHeaderShared is AppendHeader for a payload whose PayloadCRC the
// caller has computed: the checksum costs a CRC over the header alone
// (once the tables for len(payload) exist; they are made on first use,
// for up to MaxCRCShifts lengths of at least minShiftLen bytes, and other
// lengths are checksummed in full).
func AppendHeaderShared(buf []byte, h *Header, payload []byte, payloadCRC uint32) ([]byte, error) {
	t := (*crcShift)(nil)
	if h.Flags&FlagAuth == 0 && len(payload) >= minShiftLen && len(payload) <= MaxPayload {
		t = shiftFor(len(payload))
	}
	if t == nil {
		return AppendHeader(buf, h, payload)
	}
	buf, c, err := headerCRC(buf, h, len(payload))
	if err != nil {
		return buf, err
	}
	binary.BigEndian.PutUint32(buf[crcOff:], ^(t.apply(^c) ^ payloadCRC))
	return buf, nil
}

const (
	// minShiftLen: below it a full CRC costs no more than the tables.
	minShiftLen = 1024
	// MaxCRCShifts bounds the payload lengths AppendHeaderShared keeps
	// tables for (4 KiB each, for the process's lifetime).
	MaxCRCShifts = 32
)

// crcShift carries a raw CRC32C register over a fixed number of zero
// bytes: t[k][b] is the image of byte k of the register being b.
type crcShift [4][256]uint32

func (t *crcShift) apply(r uint32) uint32 {
	return t[0][byte(r)] ^ t[1][byte(r>>8)] ^ t[2][byte(r>>16)] ^ t[3][byte(r>>24)]
}

var (
	shiftMu sync.Mutex                        // serialises additions
	shifts  atomic.Pointer[map[int]*crcShift] // immutable once stored
)

// shiftFor returns the tables for n zero bytes, making them if there is
// room; nil if there is not.
func shiftFor(n int) *crcShift {
	if m := shifts.Load(); m != nil {
		if t := (*m)[n]; t != nil {
			return t
		}
	}
	shiftMu.Lock()
	defer shiftMu.Unlock()
	old := shifts.Load()
	var next map[int]*crcShift
	if old != nil {
		if t := (*old)[n]; t != nil {
			return t
		}
		if len(*old) >= MaxCRCShifts {
			return nil
		}
		next = make(map[int]*crcShift, len(*old)+1)
		for k, v := range *old {
			next[k] = v
		}
	} else {
		next = make(map[int]*crcShift, 1)
	}
	t := newShift(n)
	next[n] = t
	shifts.Store(&next)
	return t
}

// newShift builds the tables for n zero bytes from the images of the 32
// single-bit registers (the raw register r carried over the zeros is
// ^crc32.Update(^r, zeros)).
func newShift(n int) *crcShift {
	zeros := make([]byte, n)
	var basis [32]uint32
	for i := range basis {
		r := uint32(1) << i
		basis[i] = ^crc32.Update(^r, castagnoli, zeros)
	}
	t := new(crcShift)
	for k := range t {
		for b := 1; b < 256; b++ {
			low := bits.TrailingZeros(uint(b))
			t[k][b] = t[k][b&(b-1)] ^ basis[8*k+low]
		}
	}
	return t
}
