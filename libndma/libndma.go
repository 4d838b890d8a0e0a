// Command libndma is NDMA's C library: built with
// `go build -buildmode=c-shared` (make libndma), it implements ndma.h, the
// C interface of package coll's collectives, for C programs and for
// anything with a C FFI (the Python package in python/ndma loads it with
// ctypes).
//
// Communicators and requests cross the boundary as integer handles, never
// as Go pointers; the caller's buffers are used in place (C memory, which
// Go may read and write) and not kept once a call or request completes;
// every exported function recovers from a panic and returns
// NDMA_ERR_INTERNAL instead.
package main

/*
#include "ndma.h"
*/
import "C"

import (
	"fmt"
	"sync"

	"github.com/ndma/ndma/coll"
)

func main() {}

// handles maps the integers C holds to what they name.
var handles = struct {
	sync.Mutex
	next    uint64
	comms   map[uint64]*comm
	reqs    map[uint64]*request
	regions map[uint64]*region
}{comms: make(map[uint64]*comm), reqs: make(map[uint64]*request), regions: make(map[uint64]*region)}

func newHandle() uint64 {
	handles.next++
	return handles.next
}

func lookupComm(h C.ndma_comm_t) (*comm, error) {
	handles.Lock()
	defer handles.Unlock()
	c := handles.comms[uint64(h)]
	if c == nil {
		return nil, fmt.Errorf("%w: no communicator %d (never created, or freed)", coll.ErrArg, uint64(h))
	}
	return c, nil
}
