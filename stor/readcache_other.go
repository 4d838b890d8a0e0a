//go:build !linux

package stor

import "os"

// readAt reads len(b) bytes of f at off.
func readAt(f *os.File, b []byte, off int64) (int, error) { return f.ReadAt(b, off) }
