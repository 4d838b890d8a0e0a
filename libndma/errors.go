package main

/*
#include <stdlib.h>
#include "ndma.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ndma/ndma/coll"
	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// lastErr holds each thread's last error message, as errno and dlerror
// do: a C caller's thread runs the exported function (cgo locks the
// goroutine to it), so the thread id names the caller.
var lastErr = struct {
	sync.Mutex
	m map[int]*C.char
}{m: make(map[int]*C.char)}

// maxErrThreads bounds the threads whose last message is kept.
const maxErrThreads = 4096

var emptyMsg = C.CString("")

func setLastError(msg string) {
	tid := unix.Gettid()
	cs := C.CString(msg)
	lastErr.Lock()
	defer lastErr.Unlock()
	if old := lastErr.m[tid]; old != nil {
		C.free(unsafe.Pointer(old))
	} else if len(lastErr.m) >= maxErrThreads {
		for k, v := range lastErr.m { // forget some thread's (likely gone)
			C.free(unsafe.Pointer(v))
			delete(lastErr.m, k)
			break
		}
	}
	lastErr.m[tid] = cs
}

//export ndmago_last_error
func ndmago_last_error() *C.char {
	lastErr.Lock()
	defer lastErr.Unlock()
	if s := lastErr.m[unix.Gettid()]; s != nil {
		return s
	}
	return emptyMsg
}

// code maps an error to its NDMA_ERR_* code.
func code(err error) C.int {
	var rank *coll.RankError
	var rv *endpoint.RendezvousError
	switch {
	case err == nil:
		return C.NDMA_OK
	case errors.Is(err, coll.ErrClosed), errors.Is(err, endpoint.ErrClosed):
		return C.NDMA_ERR_CLOSED
	case errors.Is(err, coll.ErrNoLaunch):
		return C.NDMA_ERR_ENV
	case errors.Is(err, wire.StatusAuth), errors.Is(err, transport.ErrSealRequired):
		return C.NDMA_ERR_AUTH
	case errors.As(err, &rv), errors.Is(err, endpoint.ErrRankTaken):
		return C.NDMA_ERR_RENDEZVOUS
	case errors.Is(err, endpoint.ErrNoSwitch):
		return C.NDMA_ERR_NO_SWITCH
	case errors.Is(err, ctrl.ErrNoSpace), errors.Is(err, ctrl.ErrNoNodes), errors.Is(err, wire.StatusLost):
		return C.NDMA_ERR_POOL
	case errors.Is(err, wire.StatusBadKey), errors.Is(err, wire.StatusOutOfBounds), errors.Is(err, wire.StatusMisaligned),
		errors.Is(err, wire.StatusPermission), errors.Is(err, wire.StatusTooLarge):
		return C.NDMA_ERR_ARG
	case errors.Is(err, wire.StatusBadOperand):
		// The switch refused an aggregation whose ranks' buffers differ:
		// the caller's arguments, on some rank.
		return C.NDMA_ERR_ARG
	case errors.As(err, &rank):
		return C.NDMA_ERR_RANK
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, endpoint.ErrTimeout):
		return C.NDMA_ERR_TIMEOUT
	case errors.Is(err, coll.ErrArg), errors.Is(err, endpoint.ErrBadOp):
		return C.NDMA_ERR_ARG
	case errors.Is(err, endpoint.ErrShortRead), errors.Is(err, endpoint.ErrTruncated):
		// A message of another length than this rank's buffer: the
		// ranks' counts differ.
		return C.NDMA_ERR_ARG
	}
	return C.NDMA_ERR_INTERNAL
}

// fail records err as the calling thread's last error and returns its
// code.
func fail(err error) C.int {
	c := code(err)
	setLastError(err.Error())
	return c
}

// argErr is fail for a bad argument.
func argErr(format string, a ...any) C.int {
	return fail(fmt.Errorf("%w: "+format, append([]any{coll.ErrArg}, a...)...))
}

// guard turns a panic into NDMA_ERR_INTERNAL: nothing of Go's may unwind
// into C. Every exported function defers it.
func guard(rc *C.int) {
	if p := recover(); p != nil {
		*rc = fail(fmt.Errorf("libndma: internal error: %v", p))
	}
}
