//go:build unix

package secretfile

import (
	"io/fs"
	"syscall"
)

// modeBits: this platform's permission bits say who may read a file.
const modeBits = true

// fileOwner returns the uid of fi's owner.
func fileOwner(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
