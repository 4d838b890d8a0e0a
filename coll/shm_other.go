//go:build !linux

package coll

import (
	"errors"
	"runtime"
	"time"
)

// errNoShm is the error of shared memory where it is not implemented.
var errNoShm = errors.New("coll: shared memory segments need Linux (/dev/shm)")

// shmNamespace is empty: no rank shares memory with another.
func shmNamespace() string { return "" }

func createSegment(int) (*segment, string, error) { return nil, "", errNoShm }

func openSegment(string, int) (*segment, error) { return nil, errNoShm }

func unlinkSegment(string) error { return nil }

func (s *segment) unmap() error { s.mem = nil; return nil }

// No futex: waits sleep (there is no segment to wait on anyway).
const haveFutex = false

func futexSleep(addr *uint32, val uint32, d time.Duration) { time.Sleep(d) }

func futexWakeAll(*uint32) {}

func pidNamespace() uint64 { return 0 }

func processGone(int) bool { return false }

func osYield() { runtime.Gosched() }
