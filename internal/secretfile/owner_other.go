//go:build !unix

package secretfile

import "io/fs"

// modeBits: this platform's permission bits do not say who may read a
// file (Windows has ACLs), so they are not checked.
const modeBits = false

// fileOwner reports no owner: this platform's files have no uid.
func fileOwner(fs.FileInfo) (int, bool) { return 0, false }
