package volfs

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// lazyFlag detaches a busy mount; deadErrno is the other errno a stat of
// a mount whose FUSE server is gone returns (besides ENOTCONN).
const (
	lazyFlag  = unix.MNT_DETACH
	deadErrno = syscall.ECONNABORTED
)
