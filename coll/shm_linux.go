//go:build linux

package coll

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// shmDir is where host segments live: a tmpfs shared by the processes of
// a host (and of a container: each has its own).
const shmDir = "/dev/shm"

// shmNamespace identifies the /dev/shm this process sees (its device and
// inode): processes that share a host but not a /dev/shm (containers)
// get different host keys. Empty when there is no /dev/shm: the rank then
// shares memory with nobody.
func shmNamespace() string {
	fi, err := os.Stat(shmDir)
	if err != nil || !fi.IsDir() {
		return ""
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	return fmt.Sprintf("shm %d:%d", st.Dev, st.Ino)
}

// createSegment creates and maps a new segment of size bytes, readable
// and writable by this user alone, and returns it with its name (for
// openSegment). The caller unlinks it (unlinkSegment) once every process
// that needs it has mapped it.
func createSegment(size int) (*segment, string, error) {
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, "", err
	}
	name := fmt.Sprintf("%s%d-%s", shmPrefix, os.Getpid(), hex.EncodeToString(rnd[:]))
	path := filepath.Join(shmDir, name)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, "", fmt.Errorf("coll: shared memory: create %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Unlink(path)
		return nil, "", fmt.Errorf("coll: shared memory: size %s to %d bytes: %w", path, size, err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Unlink(path)
		return nil, "", fmt.Errorf("coll: shared memory: map %s: %w", path, err)
	}
	return &segment{mem: mem}, name, nil
}

// openSegment maps the segment another process of the host created.
func openSegment(name string, size int) (*segment, error) {
	if !validSegmentName(name) {
		return nil, fmt.Errorf("%w: shared memory: segment name %q", ErrArg, name)
	}
	path := filepath.Join(shmDir, name)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("coll: shared memory: open %s (the host leader's segment; do the ranks share this /dev/shm?): %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("coll: shared memory: %s: %w", path, err)
	}
	if st.Size != int64(size) {
		return nil, fmt.Errorf("%w: shared memory: %s holds %d bytes, want %d (ranks of one host disagree on the host's layout)", ErrArg, path, st.Size, size)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("coll: shared memory: map %s: %w", path, err)
	}
	return &segment{mem: mem}, nil
}

// unlinkSegment removes the segment's name: its memory stays mapped by
// those that mapped it and goes when the last of them unmaps it or
// exits.
func unlinkSegment(name string) error {
	if !validSegmentName(name) {
		return nil
	}
	if err := unix.Unlink(filepath.Join(shmDir, name)); err != nil && err != unix.ENOENT {
		return fmt.Errorf("coll: shared memory: unlink %s: %w", name, err)
	}
	return nil
}

// unmap releases the mapping.
func (s *segment) unmap() error {
	if s.mem == nil {
		return nil
	}
	err := unix.Munmap(s.mem)
	s.mem = nil
	return err
}

// Futex operations (linux/futex.h) on a word of the shared segment: not
// FUTEX_PRIVATE, as the word is shared between processes.
const (
	futexWait = 0
	futexWake = 1
)

// futexSleep blocks while *addr holds val, for at most d (or until woken;
// spurious wake-ups and interrupts return early).
func futexSleep(addr *uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWait, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWakeAll wakes every process blocked on addr.
func futexWakeAll(addr *uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWake, uintptr(1<<31-1), 0, 0, 0)
}

// haveFutex: waits block in the kernel until woken.
const haveFutex = true

// pidNamespace is the inode of this process's PID namespace (0 if
// unknown): process ids mean the same only within one.
func pidNamespace() uint64 {
	fi, err := os.Stat("/proc/self/ns/pid")
	if err != nil {
		return 0
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0
	}
	return st.Ino
}

// processGone reports whether process pid no longer runs: it does not
// exist, or it is a zombie (it died; its parent has not reaped it yet).
func processGone(pid int) bool {
	if pid <= 0 {
		return false
	}
	if unix.Kill(pid, 0) == unix.ESRCH {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// "pid (comm) state ...": comm may hold spaces and parentheses.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] == 'Z'
	}
	return false
}

// osYield gives the CPU to another runnable thread of the machine, if
// any (sched_yield): a rank spinning for a rank of another process lets
// that process run when the host has more ranks than cores.
func osYield() { unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
