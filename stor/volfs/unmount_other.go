//go:build !linux

package volfs

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// lazyFlag is the nearest these systems have to Linux's MNT_DETACH;
// deadErrno is the other errno a stat of a mount whose FUSE server is
// gone returns (besides ENOTCONN).
const (
	lazyFlag  = unix.MNT_FORCE
	deadErrno = syscall.ENXIO
)
