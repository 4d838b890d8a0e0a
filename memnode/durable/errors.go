package durable

import "errors"

// Errors Open returns (wrapped, with the directory and what it found).
var (
	// ErrSize: the directory's memory is of another size than asked.
	ErrSize = errors.New("the directory's memory is of another size")
	// ErrLocked: another process uses the directory.
	ErrLocked = errors.New("the directory is in use by another process")
	// ErrCorrupt: the grant record does not read back (its checksum, or
	// its fields); it also matches memnode.ErrGrantFile.
	ErrCorrupt = errors.New("the directory's grant record is corrupt")
)
