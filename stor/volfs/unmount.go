package volfs

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// unmount unmounts dir; lazy detaches it although it is busy (lazyFlag:
// on Linux MNT_DETACH, the directory free at once and the file system gone
// when its last user lets go). Without the privilege for unmount(2) it
// runs fusermount.
func unmount(dir string, lazy bool) error {
	flags := 0
	if lazy {
		flags = lazyFlag
	}
	err := unix.Unmount(dir, flags)
	if errors.Is(err, unix.EPERM) {
		return fusermountU(dir, lazy)
	}
	return err
}

// deadMount reports whether err, from a stat of a directory, says that a
// FUSE mount is there whose server is gone.
func deadMount(err error) bool {
	return errors.Is(err, syscall.ENOTCONN) || errors.Is(err, deadErrno)
}
