//go:build unix

package durable

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/ndma/ndma/memnode"
)

// undoLog is the undo file (DIR/undo, undo.go). Begin, Commit and
// Abort are called by the node's one request loop, in that order per
// request; Flush may come from elsewhere, hence mu.
type undoLog struct {
	f     *os.File
	buf   []byte
	spans []memnode.Span
	// stale: the record on disk is of a request that changed nothing
	// (Abort): it must be cleared before bytes change other than
	// through a request (Flush), or a restart would put its old bytes
	// back over them.
	stale bool
}

// openUndo opens the undo file and undoes the request its record names
// if the reply journal misses that request's record (keptJournal: the
// journal was taken back, not discarded), then empties the file. It
// runs after openReplies.
func (d *Dir) openUndo(keptJournal bool) error {
	name := filepath.Join(d.path, "undo")
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("durable: %w", err)
	}
	d.undo.f = f
	b, err := io.ReadAll(io.NewSectionReader(f, 0, math.MaxInt64))
	if err != nil {
		return fmt.Errorf("durable: %s: %w", name, err)
	}
	if len(b) == 0 {
		return nil
	}
	u, perr := ParseUndo(b, uint64(len(d.mem)))
	switch {
	case perr != nil:
		// A Begin cut short: its request was not applied yet.
		d.log.Info("durable: "+name+": a torn record skipped", "err", perr)
	case d.fresh:
	case !keptJournal:
		d.log.Warn(fmt.Sprintf("durable: %s: request %d may have been cut short, but the reply journal was discarded: its bytes are left as they are", name, u.Seq))
	case d.rj.seq >= u.Seq:
		// Its reply record is in the journal: it was applied whole.
	default:
		for i, s := range u.Spans {
			copy(d.mem[s.Off:s.Off+s.Len], u.Old[i])
			if err := d.Flush(s.Off, s.Len); err != nil {
				return err
			}
		}
		d.log.Warn(fmt.Sprintf("durable: %s: request %d was cut short before its reply was recorded: its bytes are put back (its client had no answer and resends it)", name, u.Seq), "spans", len(u.Spans))
	}
	return d.clearUndo()
}

// clearUndo empties the undo file, on disk.
func (d *Dir) clearUndo() error {
	if err := d.undo.f.Truncate(0); err != nil {
		return fmt.Errorf("durable: clearing the undo record: %w", err)
	}
	if err := unix.Fdatasync(int(d.undo.f.Fd())); err != nil {
		return fmt.Errorf("durable: clearing the undo record: %w", err)
	}
	d.undo.stale = false
	return nil
}

// Begin is called before a mutating request is applied, with the spans
// of the lent memory it may change (the parts past the memory are
// ignored). Under SyncAlways it writes their bytes as they are now to
// the undo file and returns once they are on disk: should the request's
// reply record not be on disk when the directory is opened again, the
// bytes are put back. Under an interval it does nothing.
func (d *Dir) Begin(spans []memnode.Span) error {
	if d.sync.Every > 0 {
		return nil
	}
	d.undoMu.Lock()
	defer d.undoMu.Unlock()
	u := &d.undo
	if u.f == nil {
		return fmt.Errorf("durable: %s: the directory is closed", d.path)
	}
	if len(spans) > MaxUndoSpans {
		return fmt.Errorf("durable: %d spans to undo, at most %d", len(spans), MaxUndoSpans)
	}
	u.spans = clampSpans(u.spans[:0], spans, uint64(len(d.mem)))
	for _, s := range u.spans {
		if s.Len > math.MaxUint32 {
			return fmt.Errorf("durable: a span of %d bytes to undo", s.Len)
		}
	}
	d.rj.mu.Lock()
	seq := d.rj.seq + 1
	d.rj.mu.Unlock()
	u.buf = appendUndo(u.buf[:0], seq, u.spans, d.mem)
	if _, err := u.f.WriteAt(u.buf, 0); err != nil {
		return fmt.Errorf("durable: writing the undo record: %w", err)
	}
	if err := unix.Fdatasync(int(u.f.Fd())); err != nil {
		return fmt.Errorf("durable: flushing the undo record: %w", err)
	}
	u.stale = false
	return nil
}

// Commit records r, the reply of the request begun (its status OK),
// after the request was applied. Under SyncAlways it flushes the bytes
// of spans, then writes the reply record and flushes it: once it
// returns, the request and its reply are on disk together. Under an
// interval it writes the record, and the background flush puts both on
// disk. The record is in the mapped journal at once, so a crash of the
// process keeps it.
func (d *Dir) Commit(spans []memnode.Span, r memnode.ReplyRecord) error {
	if d.sync.Every > 0 {
		_, err := d.addReply(r)
		return err
	}
	for _, s := range spans {
		if err := d.Flush(s.Off, s.Len); err != nil {
			return err
		}
	}
	slot, err := d.addReply(r)
	if err != nil {
		return err
	}
	return d.rj.flushSlot(slot)
}

// Abort ends a request begun that changed nothing (it was refused).
func (d *Dir) Abort() error {
	if d.sync.Every == 0 {
		d.undoMu.Lock()
		d.undo.stale = true
		d.undoMu.Unlock()
	}
	return nil
}

// retireUndo clears an aborted request's record before bytes change
// outside of a request.
func (d *Dir) retireUndo() error {
	d.undoMu.Lock()
	defer d.undoMu.Unlock()
	if !d.undo.stale || d.undo.f == nil {
		return nil
	}
	return d.clearUndo()
}

// closeUndo closes the undo file; a record left in it is of a request
// whose reply record is in the journal, or one that changed nothing.
func (d *Dir) closeUndo() {
	d.undoMu.Lock()
	defer d.undoMu.Unlock()
	if d.undo.f != nil {
		if d.undo.stale {
			_ = d.clearUndo()
		}
		d.undo.f.Close()
		d.undo.f = nil
	}
}
