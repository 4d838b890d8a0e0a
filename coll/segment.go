package coll

import (
	"strings"
	"sync/atomic"
	"unsafe"
)

// A host segment is the memory the ranks of one host share for the
// two-level collectives (hier.go). Its layout, for L local ranks:
//
//	[0, 64)            the abort word (abortWord)
//	[64·(1+j), +64)    local rank j's line: its phase count (gen), its
//	                   heartbeat (beat) and its calls' arguments (arg),
//	                   each a uint64 that only rank j writes, and the
//	                   count of ranks blocked on its phase (waiters),
//	                   its process id and PID namespace
//	[dataOff, +L·C)    one input slot of shmChunk bytes per local rank
//	[.., +2·C)         two result regions, used in turn
//
// The flags are read and written with sync/atomic only; the data areas
// are plain memory whose hand-over is ordered by the flags (a rank
// writes data, then its gen; a reader loads the gen, then reads).
type segment struct {
	mem   []byte
	ranks int
}

// shmPrefix begins every segment's file name; the creator's process id
// follows, then a random part.
const shmPrefix = "ndma-"

// shmChunk is the bytes of a collective one step through the segment
// moves per local rank: larger buffers go through in chunks.
const shmChunk = 128 << 10

// MaxLocalRanks bounds the ranks of one host that share a segment.
const MaxLocalRanks = 256

const (
	shmLine = 64 // one cache line per flag set: no false sharing
	shmPage = 4096
)

// segmentSize is the size of the segment of ranks local ranks.
func segmentSize(ranks int) int {
	return dataOffset(ranks) + (ranks+2)*shmChunk
}

func dataOffset(ranks int) int {
	return (shmLine*(1+ranks) + shmPage - 1) / shmPage * shmPage
}

// word is the uint64 at off, for atomic access.
func (s *segment) word(off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&s.mem[off]))
}

// abortWord holds the reason the host's collectives stopped, 0 while
// they run (abortCode).
func (s *segment) abortWord() *atomic.Uint64 { return s.word(0) }

// gen is the number of phases local rank j has completed.
func (s *segment) gen(j int) *atomic.Uint64 { return s.word(shmLine * (1 + j)) }

// beat is bumped by local rank j while it works outside the segment (a
// leader's step between hosts), so waiting there is not silence.
func (s *segment) beat(j int) *atomic.Uint64 { return s.word(shmLine*(1+j) + 8) }

// arg is local rank j's summary of its call's arguments (argCode), which
// every local rank checks against its own: two words, used by calls in
// turn (a rank runs at most one call ahead of the others).
func (s *segment) arg(j int, call uint64) *atomic.Uint64 {
	return s.word(shmLine*(1+j) + 16 + 8*int(call&1))
}

// genWord is the low half of local rank j's phase count (the machines
// are little-endian), the futex word its waiters block on.
func (s *segment) genWord(j int) *uint32 {
	return (*uint32)(unsafe.Pointer(&s.mem[shmLine*(1+j)]))
}

// waiters counts the ranks blocked in the kernel on local rank j's
// phase count: j wakes them when it publishes a phase, and makes no
// system call when there are none.
func (s *segment) waiters(j int) *atomic.Int32 {
	return (*atomic.Int32)(unsafe.Pointer(&s.mem[shmLine*(1+j)+32]))
}

// pid is local rank j's process id and pidNS its PID namespace (an
// inode number), written once at setup: a waiter in the same namespace
// checks that the process still exists.
func (s *segment) pid(j int) *atomic.Uint64   { return s.word(shmLine*(1+j) + 40) }
func (s *segment) pidNS(j int) *atomic.Uint64 { return s.word(shmLine*(1+j) + 48) }

// slot is local rank j's input slot.
func (s *segment) slot(j int) []byte {
	off := dataOffset(s.ranks) + j*shmChunk
	return s.mem[off : off+shmChunk : off+shmChunk]
}

// result is result region i (0 or 1).
func (s *segment) result(i uint64) []byte {
	off := dataOffset(s.ranks) + (s.ranks+int(i&1))*shmChunk
	return s.mem[off : off+shmChunk : off+shmChunk]
}

// validSegmentName reports whether name is one createSegment makes: a
// name another rank sent is never a path.
func validSegmentName(name string) bool {
	if !strings.HasPrefix(name, shmPrefix) || len(name) > 64 {
		return false
	}
	for _, r := range name[len(shmPrefix):] {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r == '-') {
			return false
		}
	}
	return true
}
