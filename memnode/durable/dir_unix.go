//go:build unix

package durable

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ndma/ndma/memnode"
)

// Dir is an open durable directory. Its methods are safe for concurrent
// use; Mem must not be used after Close.
type Dir struct {
	path   string
	sync   Sync
	log    *slog.Logger
	lock   *os.File
	mem    []byte
	kept   []memnode.GrantState
	fresh  bool
	rj     replyJournal
	undo   undoLog
	undoMu sync.Mutex
	mu     sync.Mutex // serializes SaveGrants
	stop   chan struct{}
	done   chan struct{}
	closed sync.Once
}

// Open opens (creating it if need be) the directory path for a node
// lending size bytes, whose reply cache holds replies entries (the
// journal's slots, 1 to MaxReplySlots), under policy s; log (nil:
// discarded) takes the background flushes' failures and what was
// discarded of the reply journal. It refuses a directory another
// process holds (ErrLocked), one whose memory is of another size
// (ErrSize) and one whose grant record is corrupt (ErrCorrupt). A
// record a crash left half saved (grants.tmp) is removed: the previous
// one stands. A reply journal that is not one, or of another number of
// slots, is discarded (logged), and so are its torn records.
func Open(path string, size int64, replies int, s Sync, log *slog.Logger) (*Dir, error) {
	if size <= 0 {
		return nil, fmt.Errorf("durable: %s: size %d", path, size)
	}
	if replies < 1 || replies > MaxReplySlots {
		return nil, fmt.Errorf("durable: %s: %d reply slots (want 1 to %d)", path, replies, MaxReplySlots)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, fmt.Errorf("durable: %w", err)
	}
	d := &Dir{path: path, sync: s, log: log}
	ok := false
	defer func() {
		if !ok {
			d.release()
		}
	}()
	lock, err := os.OpenFile(filepath.Join(path, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("durable: %w", err)
	}
	d.lock = lock
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("durable: %s: %w", path, ErrLocked)
		}
		return nil, fmt.Errorf("durable: %s: lock: %w", path, err)
	}
	if err := d.mapMemory(size); err != nil {
		return nil, err
	}
	if err := d.loadGrants(); err != nil {
		return nil, err
	}
	if err := d.openReplies(replies); err != nil {
		return nil, err
	}
	if err := d.openUndo(d.rj.keptJournal); err != nil {
		return nil, err
	}
	if s.Every > 0 {
		d.stop, d.done = make(chan struct{}), make(chan struct{})
		go d.flushEvery(s.Every)
	}
	ok = true
	return d, nil
}

// mapMemory maps the memory file, creating it of size bytes if it is
// not there.
func (d *Dir) mapMemory(size int64) error {
	name := filepath.Join(d.path, "memory")
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		d.fresh = true
		if f, err = os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
			err = f.Truncate(size)
			if err == nil {
				err = f.Sync()
			}
			if err == nil {
				err = syncDir(d.path)
			}
		}
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		return fmt.Errorf("durable: %w", err)
	}
	defer f.Close() // the mapping outlives the descriptor
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("durable: %w", err)
	}
	if fi.Size() != size {
		return fmt.Errorf("durable: %s: %w: it holds %d bytes, this node lends %d (lend its size, or use another directory)", d.path, ErrSize, fi.Size(), size)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("durable: %s: map: %w", name, err)
	}
	d.mem = mem
	return nil
}

// loadGrants reads the grant record, dropping a half-saved one.
func (d *Dir) loadGrants() error {
	if err := os.Remove(filepath.Join(d.path, "grants.tmp")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("durable: %w", err)
	}
	b, err := os.ReadFile(filepath.Join(d.path, "grants"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("durable: %w", err)
	}
	if d.kept, err = memnode.ParseGrants(b); err != nil {
		return fmt.Errorf("durable: %s: %w: %w", filepath.Join(d.path, "grants"), ErrCorrupt, err)
	}
	return nil
}

// Mem is the lent memory, mapped from the directory's file.
func (d *Dir) Mem() []byte { return d.mem }

// Kept is the grant table the directory held when it was opened (nil:
// none).
func (d *Dir) Kept() []memnode.GrantState { return d.kept }

// Fresh reports whether Open created the memory file (a new directory).
func (d *Dir) Fresh() bool { return d.fresh }

// SaveGrants replaces the grant record with rec atomically: written to
// grants.tmp, flushed, renamed over grants, and the directory flushed.
func (d *Dir) SaveGrants(rec []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	tmp := filepath.Join(d.path, "grants.tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("durable: %w", err)
	}
	_, err = f.Write(rec)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(d.path, "grants"))
	}
	if err == nil {
		err = syncDir(d.path)
	}
	if err != nil {
		return fmt.Errorf("durable: saving the grants: %w", err)
	}
	return nil
}

// Flush flushes bytes [off, off+n) of the memory to the file now,
// whatever the policy. Bytes changed other than by a request (a grant's
// scrubbed extent, a rebuilt copy) are flushed with it, and it first
// clears an undo record of a request that changed nothing.
func (d *Dir) Flush(off, n uint64) error {
	if err := d.retireUndo(); err != nil {
		return err
	}
	if n == 0 || off >= uint64(len(d.mem)) {
		return nil
	}
	page := uint64(os.Getpagesize())
	start := off &^ (page - 1)
	end := min(off+n, uint64(len(d.mem)))
	if err := unix.Msync(d.mem[start:end], unix.MS_SYNC); err != nil {
		return fmt.Errorf("durable: flushing memory: %w", err)
	}
	return nil
}

// flushEvery flushes the whole memory every interval until Close.
func (d *Dir) flushEvery(every time.Duration) {
	defer close(d.done)
	t := time.NewTicker(every)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
		}
		err := unix.Msync(d.mem, unix.MS_SYNC)
		if err == nil {
			err = d.rj.flushAll()
		}
		if (err != nil) != failing {
			failing = err != nil
			if failing {
				d.log.Error("durable: flushing memory and replies to "+d.path+" fails: answered writes are not reaching the disk", "err", err)
			} else {
				d.log.Info("durable: flushing memory works again", "dir", d.path)
			}
		}
	}
}

// Close stops the background flush, flushes the memory a last time,
// unmaps it and releases the directory. Call it after the node that
// uses Mem stopped. It is idempotent.
func (d *Dir) Close() error {
	var err error
	d.closed.Do(func() {
		if d.stop != nil {
			close(d.stop)
			<-d.done
		}
		if d.mem != nil {
			if e := unix.Msync(d.mem, unix.MS_SYNC); e != nil {
				err = fmt.Errorf("durable: flushing memory: %w", e)
			}
		}
		if e := d.rj.flushAll(); e != nil && err == nil {
			err = e
		}
		d.closeUndo()
		d.release()
	})
	return err
}

// release unmaps the memory and drops the lock.
func (d *Dir) release() {
	if d.mem != nil {
		_ = unix.Munmap(d.mem)
		d.mem = nil
	}
	d.rj.unmap()
	d.closeUndo()
	if d.lock != nil {
		d.lock.Close() // drops the flock
		d.lock = nil
	}
}

// syncDir flushes directory path (a rename or a new file in it).
func syncDir(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
