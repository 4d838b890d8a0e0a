//go:build unix

package durable

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/ndma/ndma/memnode"
)

// replyJournal is the reply journal (DIR/replies, replies.go) mapped
// shared: a record written to it is in the kernel's page cache at once,
// so a crash of the process keeps it; a flush puts it on disk.
type replyJournal struct {
	mu    sync.Mutex
	mem   []byte
	slots int
	seq   uint64 // the last record's number
	kept  []memnode.ReplyRecord
	// keptJournal: the journal's records were taken back at Open
	// (not made new or discarded).
	keptJournal bool
}

// openReplies maps the reply journal of slots slots, making it if it is
// not there, and keeps the records it holds. A journal beside memory
// just made (a new directory), one that does not read as a journal
// (truncated, corrupt header) or one of another size is started again
// empty, and said so in the log: its records cannot be trusted, or
// belong to other memory.
func (d *Dir) openReplies(slots int) error {
	name := filepath.Join(d.path, "replies")
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	made := false
	if errors.Is(err, fs.ErrNotExist) {
		f, err = os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		made = true
	}
	if err != nil {
		return fmt.Errorf("durable: %w", err)
	}
	defer f.Close() // the mapping outlives the descriptor
	want := int64(ReplyJournalLen(slots))
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("durable: %w", err)
	}
	var reason error // why the journal's records are dropped
	if fi.Size() != want {
		if !made {
			reason = fmt.Errorf("%w: %d bytes, a reply cache of %d entries takes %d (cut short, or made for another cache size)", ErrReplyJournal, fi.Size(), slots, want)
		}
		// Truncating to zero first drops the old bytes.
		if err := f.Truncate(0); err != nil {
			return fmt.Errorf("durable: %s: %w", name, err)
		}
		if err := f.Truncate(want); err != nil {
			return fmt.Errorf("durable: %s: %w", name, err)
		}
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(want), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("durable: %s: map: %w", name, err)
	}
	d.rj.mem, d.rj.slots = mem, slots
	j, err := ParseReplies(mem)
	if reason == nil && err == nil && j.Slots != slots {
		reason = fmt.Errorf("%w: %d slots, the node's reply cache %d", ErrReplyJournal, j.Slots, slots)
	} else if reason == nil {
		reason = err
	}
	switch {
	case made:
	case d.fresh:
		d.log.Warn("durable: " + name + ": discarded: the memory file is new, the journal's replies were of other memory")
	case reason != nil:
		d.log.Warn("durable: "+name+": discarded: requests applied before the restart may be applied again if resent", "err", reason)
	default:
		if j.Bad > 0 {
			d.log.Warn(fmt.Sprintf("durable: %s: %d torn or corrupt records skipped", name, j.Bad), "kept", len(j.Records))
		}
		d.rj.kept, d.rj.seq, d.rj.keptJournal = j.Records, j.Last, true
		return nil
	}
	// Start the journal again: empty, on disk before the node serves.
	clear(mem)
	putReplyHeader(mem, slots)
	if err := unix.Msync(mem, unix.MS_SYNC); err != nil {
		return fmt.Errorf("durable: %s: %w", name, err)
	}
	if made {
		if err := syncDir(d.path); err != nil {
			return fmt.Errorf("durable: %w", err)
		}
	}
	return nil
}

// KeptReplies is the reply records the journal held when the directory
// was opened, oldest first (nil: none).
func (d *Dir) KeptReplies() []memnode.ReplyRecord { return d.rj.kept }

// addReply writes r to the reply journal, over its oldest record once
// it is full, and returns the record's slot. The record is in the
// mapped file at once (a crash of the process keeps it); under
// SyncAlways Commit flushes it to disk next, under an interval the
// background flush does, with the memory.
func (d *Dir) addReply(r memnode.ReplyRecord) (int, error) {
	j := &d.rj
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.mem == nil {
		return 0, fmt.Errorf("durable: %s: the directory is closed", d.path)
	}
	j.seq++
	slot := int((j.seq - 1) % uint64(j.slots))
	putReply(j.mem[ReplyRecordLen*(1+slot):], j.seq, &r)
	return slot, nil
}

// flushSlot flushes the page holding slot.
func (j *replyJournal) flushSlot(slot int) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.mem == nil {
		return nil
	}
	start := ReplyRecordLen * (1 + slot) &^ (os.Getpagesize() - 1)
	return j.msync(j.mem[start:min(start+os.Getpagesize(), len(j.mem))])
}

// flushAll flushes the whole journal.
func (j *replyJournal) flushAll() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.mem == nil {
		return nil
	}
	return j.msync(j.mem)
}

func (j *replyJournal) msync(b []byte) error {
	if err := unix.Msync(b, unix.MS_SYNC); err != nil {
		return fmt.Errorf("durable: flushing the reply journal: %w", err)
	}
	return nil
}

// unmap unmaps the journal.
func (j *replyJournal) unmap() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.mem != nil {
		_ = unix.Munmap(j.mem)
		j.mem = nil
	}
}
