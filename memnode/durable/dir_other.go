//go:build !unix

package durable

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/ndma/ndma/memnode"
)

// Dir is an open durable directory (unix only).
type Dir struct{}

// Open fails: durable directories need a unix system (mmap, flock).
func Open(path string, size int64, replies int, s Sync, log *slog.Logger) (*Dir, error) {
	return nil, fmt.Errorf("durable: %s: %w", path, errors.ErrUnsupported)
}

func (d *Dir) Mem() []byte                        { return nil }
func (d *Dir) Kept() []memnode.GrantState         { return nil }
func (d *Dir) KeptReplies() []memnode.ReplyRecord { return nil }
func (d *Dir) Fresh() bool                        { return false }
func (d *Dir) SaveGrants(rec []byte) error        { return errors.ErrUnsupported }
func (d *Dir) Begin(spans []memnode.Span) error   { return errors.ErrUnsupported }
func (d *Dir) Commit(spans []memnode.Span, r memnode.ReplyRecord) error {
	return errors.ErrUnsupported
}
func (d *Dir) Abort() error              { return errors.ErrUnsupported }
func (d *Dir) Flush(off, n uint64) error { return errors.ErrUnsupported }
func (d *Dir) Close() error              { return nil }
