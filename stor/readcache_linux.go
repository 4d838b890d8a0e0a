package stor

import (
	"math/bits"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// readAt reads len(b) bytes of f at off. It first asks the kernel for
// what the page cache holds without blocking (preadv2 with RWF_NOWAIT, a
// raw system call: no hand-off of the goroutine's processor, which for a
// 4 KiB read costs more than the copy), and reads the rest the usual way
// (a blocking pread the runtime schedules around) if the data is not
// cached or the file system cannot say.
func readAt(f *os.File, b []byte, off int64) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return f.ReadAt(b, off)
	}
	n := 0
	_ = rc.Control(func(fd uintptr) {
		iov := unix.Iovec{Base: &b[0]}
		iov.SetLen(len(b))
		lo, hi := uintptr(off), uintptr(uint64(off)>>(bits.UintSize-1)>>1)
		r, _, e := unix.RawSyscall6(unix.SYS_PREADV2, fd, uintptr(unsafe.Pointer(&iov)), 1, lo, hi, unix.RWF_NOWAIT)
		if e == 0 {
			n = int(r)
		}
	})
	if n == len(b) {
		return n, nil
	}
	m, err := f.ReadAt(b[n:], off+int64(n))
	return n + m, err
}
