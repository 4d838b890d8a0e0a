package stor

import (
	"os"

	"golang.org/x/sys/unix"
)

// datasync makes f's data durable (fdatasync: without the metadata a
// read does not need, such as the modification time).
func datasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }
