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
#include <stdlib.h>
#include "ndma.h"
void ndma_call_notify(void *fn, void *arg);
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ndma/ndma/coll"
	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

func main() {}

// comm is a communicator handed out as a handle.
type comm struct {
	c      *coll.Communicator
	ep     *endpoint.Endpoint
	launch coll.Launch // where the switch is, and the token

	mu            sync.Mutex
	timeout       time.Duration // each collective's bound; 0: none
	deterministic bool
	algos         map[coll.Operation]coll.Algo // ndma_comm_set_algo
	closed        bool
	inflight      map[*request]struct{}  // started and not finished
	pool          *pool.Client           // made by the first region call
	poolCalls     map[*poolCall]struct{} // region calls in flight
}

// callOpts are the options of a call of op under the communicator's
// settings, and its timeout.
func (cm *comm) callOpts(op coll.Operation) ([]coll.CallOption, time.Duration) {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	var opts []coll.CallOption
	if cm.deterministic {
		opts = append(opts, coll.WithDeterministic(true))
	}
	if a, ok := cm.algos[op]; ok {
		opts = append(opts, coll.WithAlgo(a))
	}
	return opts, cm.timeout
}

// request is a non-blocking collective handed out as a handle.
type request struct {
	r        *coll.Request
	cancel   context.CancelFunc
	c        *comm
	done     chan struct{} // blocking calls: closed once r is done and off c.inflight
	notified bool          // ndma_request_notify was called (under handles)
}

// handles maps the integers C holds to what they name.
var handles = struct {
	sync.Mutex
	next    uint64
	comms   map[uint64]*comm
	reqs    map[uint64]*request
	regions map[uint64]*region
}{comms: make(map[uint64]*comm), reqs: make(map[uint64]*request), regions: make(map[uint64]*region)}

// maxRequests bounds the requests not yet waited for or tested complete,
// so that a program that never waits runs out of requests, not memory.
const maxRequests = 1 << 16

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

// launchFromEnv is the launch in the environment (read through getenv,
// os.LookupEnv in production), with libndma's own variables (NDMA_LISTEN,
// NDMA_TIMEOUT, NDMA_DETERMINISTIC).
func launchFromEnv(getenv func(string) (string, bool)) (l coll.Launch, listen string, timeout time.Duration, det bool, err error) {
	if l, err = coll.ParseEnv(getenv); err != nil {
		return
	}
	listen = ":0"
	if v := os.Getenv("NDMA_LISTEN"); v != "" {
		listen = v
	}
	if v := os.Getenv("NDMA_TIMEOUT"); v != "" {
		if timeout, err = time.ParseDuration(v); err != nil || timeout <= 0 {
			err = fmt.Errorf("%w: NDMA_TIMEOUT=%q: want a positive duration such as 30s", coll.ErrArg, v)
			return
		}
	}
	if v := os.Getenv("NDMA_DETERMINISTIC"); v != "" {
		if det, err = strconv.ParseBool(v); err != nil {
			err = fmt.Errorf("%w: NDMA_DETERMINISTIC=%q: want 1 or 0", coll.ErrArg, v)
			return
		}
	}
	return
}

//export ndmago_comm_from_env
func ndmago_comm_from_env(out *C.ndma_comm_t) (rc C.int) {
	defer guard(&rc)
	if out == nil {
		return argErr("comm is NULL")
	}
	l, listen, timeout, det, err := launchFromEnv(os.LookupEnv)
	if err != nil {
		return fail(err)
	}
	return create(l, listen, timeout, det, out)
}

//export ndmago_comm_from_env_as
func ndmago_comm_from_env_as(job *C.char, rank, size C.int, out *C.ndma_comm_t) (rc C.int) {
	defer guard(&rc)
	if out == nil || job == nil {
		return argErr("job or comm is NULL")
	}
	if size < 1 || rank < 0 || rank >= size {
		return argErr("rank %d of size %d: want 0 <= rank < size", int(rank), int(size))
	}
	name := C.GoString(job)
	if name == "" {
		return argErr("empty job name")
	}
	given := map[string]string{"NDMA_RANK": strconv.Itoa(int(rank)), "NDMA_SIZE": strconv.Itoa(int(size)), "NDMA_JOB": name}
	l, listen, timeout, det, err := launchFromEnv(func(k string) (string, bool) {
		if v, ok := given[k]; ok {
			return v, true
		}
		return os.LookupEnv(k)
	})
	if err != nil {
		return fail(err)
	}
	// A process may be in many groups, each its own endpoint: NDMA_LISTEN
	// chooses their address, not one port for all.
	if host, port, err := net.SplitHostPort(listen); err == nil && port != "0" {
		listen = net.JoinHostPort(host, "0")
	}
	return create(l, listen, timeout, det, out)
}

// cfgField reports whether cfg, of size struct_size as the caller's
// header declared it, has the field at off of size n (a program built
// against an older header has a shorter struct).
func cfgField(cfg *C.ndma_config, off, n uintptr) bool {
	return off+n <= uintptr(cfg.struct_size)
}

func cString(p *C.char) string {
	if p == nil {
		return ""
	}
	return C.GoString(p)
}

//export ndmago_comm_create
func ndmago_comm_create(cfg *C.ndma_config, out *C.ndma_comm_t) (rc C.int) {
	defer guard(&rc)
	if cfg == nil || out == nil {
		return argErr("cfg or comm is NULL")
	}
	if cfg.struct_size == 0 {
		return argErr("ndma_config.struct_size is 0: fill the config with ndma_config_init first")
	}
	if !cfgField(cfg, unsafe.Offsetof(cfg.timeout_ms), unsafe.Sizeof(cfg.timeout_ms)) {
		return argErr("ndma_config.struct_size %d is smaller than any ndma.h declared", cfg.struct_size)
	}
	l := coll.Launch{Rank: int(cfg.rank), Size: int(cfg.size), Switch: cString(cfg.switch_addr), Job: cString(cfg.job),
		Token: cString(cfg.token), Insecure: cfg.insecure != 0, Credential: cString(cfg.credential), MTU: int(cfg.mtu),
		JoinTimeout: time.Duration(cfg.join_timeout_ms) * time.Millisecond, Source: coll.ConfigSource}
	if l.Size < 1 || l.Rank < 0 || l.Rank >= l.Size {
		return argErr("rank %d of size %d: want 0 <= rank < size", l.Rank, l.Size)
	}
	if l.Job == "" {
		l.Job, l.JobFrom = "ndma", "the default"
	}
	if cfg.mtu != 0 && (l.MTU < transport.MinMTU || l.MTU > transport.MaxMTU) {
		return argErr("mtu %d: want %d to %d bytes", l.MTU, transport.MinMTU, transport.MaxMTU)
	}
	if cfg.join_timeout_ms < 0 || cfg.timeout_ms < 0 {
		return argErr("negative timeout")
	}
	listen := cString(cfg.listen)
	if listen == "" {
		listen = ":0"
	}
	det := cfgField(cfg, unsafe.Offsetof(cfg.deterministic), unsafe.Sizeof(cfg.deterministic)) && cfg.deterministic != 0
	return create(l, listen, time.Duration(cfg.timeout_ms)*time.Millisecond, det, out)
}

// warnInsecure gives the warning of a job run with NDMA_INSECURE=1 once
// per process, on rank 0's standard error.
var warnInsecure sync.Once

// create makes the endpoint and the communicator of launch l.
func create(l coll.Launch, listen string, timeout time.Duration, det bool, out *C.ndma_comm_t) C.int {
	opts, err := l.EndpointOptions()
	if err != nil {
		return fail(err)
	}
	ep, err := endpoint.Listen(listen, endpoint.Config{Transport: transport.Config{MTU: l.MTU}}, opts)
	if err != nil {
		return fail(fmt.Errorf("%w: listen on %s: %w", coll.ErrArg, listen, err))
	}
	c, err := l.Communicator(context.Background(), ep)
	if err != nil {
		ep.Close()
		return fail(err)
	}
	if w := l.Warning(); w != "" && l.Rank == 0 {
		warnInsecure.Do(func() { fmt.Fprintf(os.Stderr, "ndma: warning: %s\n", w) })
	}
	cm := &comm{c: c, ep: ep, launch: l, timeout: timeout, deterministic: det, algos: make(map[coll.Operation]coll.Algo),
		inflight: make(map[*request]struct{}), poolCalls: make(map[*poolCall]struct{})}
	handles.Lock()
	h := newHandle()
	handles.comms[h] = cm
	handles.Unlock()
	*out = C.ndma_comm_t(h)
	return C.NDMA_OK
}

//export ndmago_comm_free
func ndmago_comm_free(h C.ndma_comm_t) (rc C.int) {
	defer guard(&rc)
	handles.Lock()
	cm := handles.comms[uint64(h)]
	delete(handles.comms, uint64(h))
	handles.Unlock()
	if cm == nil {
		return argErr("no communicator %d (never created, or freed)", uint64(h))
	}
	// In-flight requests end (their context is canceled) before the
	// buffers they use are given back: wait for each.
	cm.mu.Lock()
	cm.closed = true
	var reqs []*request
	for r := range cm.inflight {
		reqs = append(reqs, r)
	}
	cm.mu.Unlock()
	for _, r := range reqs {
		r.cancel()
		r.wait()
	}
	cm.endPoolCalls()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := cm.c.Close(ctx)
	if cerr := cm.ep.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fail(err)
	}
	return C.NDMA_OK
}

//export ndmago_comm_set_algo
func ndmago_comm_set_algo(h C.ndma_comm_t, op, algo *C.char) (rc C.int) {
	defer guard(&rc)
	cm, err := lookupComm(h)
	if err != nil {
		return fail(err)
	}
	o := coll.Operation(cString(op))
	if _, ok := coll.Algorithms[o]; !ok {
		return argErr("operation %q: want allreduce, bcast, reduce, allgather, reducescatter or barrier", o)
	}
	a := coll.Algo(cString(algo))
	if a == "" || a == coll.AlgoAuto {
		cm.mu.Lock()
		delete(cm.algos, o)
		cm.mu.Unlock()
		return C.NDMA_OK
	}
	if _, err := coll.ParseAlgo(string(a)); err != nil {
		return fail(err)
	}
	if !coll.Supported(o, a) {
		return argErr("%s has no %s algorithm (it has %v)", o, a, coll.Algorithms[o])
	}
	cm.mu.Lock()
	cm.algos[o] = a
	cm.mu.Unlock()
	return C.NDMA_OK
}

//export ndmago_comm_set_deterministic
func ndmago_comm_set_deterministic(h C.ndma_comm_t, on C.int) (rc C.int) {
	defer guard(&rc)
	cm, err := lookupComm(h)
	if err != nil {
		return fail(err)
	}
	cm.mu.Lock()
	cm.deterministic = on != 0
	cm.mu.Unlock()
	return C.NDMA_OK
}

//export ndmago_comm_set_timeout
func ndmago_comm_set_timeout(h C.ndma_comm_t, ms C.int) (rc C.int) {
	defer guard(&rc)
	cm, err := lookupComm(h)
	if err != nil {
		return fail(err)
	}
	if ms < 0 {
		return argErr("negative timeout %d ms", int(ms))
	}
	cm.mu.Lock()
	cm.timeout = time.Duration(ms) * time.Millisecond
	cm.mu.Unlock()
	return C.NDMA_OK
}

//export ndmago_comm_rank
func ndmago_comm_rank(h C.ndma_comm_t, rank *C.int) (rc C.int) {
	defer guard(&rc)
	cm, err := lookupComm(h)
	if err != nil {
		return fail(err)
	}
	if rank == nil {
		return argErr("rank is NULL")
	}
	*rank = C.int(cm.c.Rank())
	return C.NDMA_OK
}

//export ndmago_comm_size
func ndmago_comm_size(h C.ndma_comm_t, size *C.int) (rc C.int) {
	defer guard(&rc)
	cm, err := lookupComm(h)
	if err != nil {
		return fail(err)
	}
	if size == nil {
		return argErr("size is NULL")
	}
	*size = C.int(cm.c.Size())
	return C.NDMA_OK
}

// run runs a collective: blocking when req is nil (under the
// communicator's timeout), else started with its handle stored in *req.
func (cm *comm) run(req *C.ndma_request_t, op coll.Operation, f func(ctx context.Context, opts []coll.CallOption) *coll.Request) C.int {
	if req != nil {
		handles.Lock()
		full := len(handles.reqs) >= maxRequests
		handles.Unlock()
		if full {
			return argErr("%d requests not yet waited for or tested complete", maxRequests)
		}
	}
	opts, timeout := cm.callOpts(op)
	// Cancelable always: ndma_comm_free cancels what is in flight.
	var ctx context.Context
	var cancel context.CancelFunc
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(context.Background(), timeout)
	} else {
		ctx, cancel = context.WithCancel(context.Background())
	}
	// Blocking calls are tracked like requests too, so that
	// ndma_comm_free from another thread waits until they no longer use
	// their buffers. A blocking call runs on the caller's goroutine
	// (coll.Inline), outside cm.mu: no other thread takes part in
	// starting it or in reporting its end.
	r := &request{cancel: cancel, c: cm}
	cm.mu.Lock()
	if cm.closed {
		cm.mu.Unlock()
		cancel()
		return fail(coll.ErrClosed)
	}
	cm.inflight[r] = struct{}{}
	if req == nil {
		r.done = make(chan struct{})
		cm.mu.Unlock()
		r.r = f(endpoint.Driving(coll.Inline(ctx)), opts)
		cm.forget(r)
		return r.result()
	}
	// A request stays in flight until ndma_wait or ndma_test finds it
	// complete (or the communicator is freed).
	r.r = f(ctx, opts)
	cm.mu.Unlock()
	handles.Lock()
	h := newHandle()
	handles.reqs[h] = r
	handles.Unlock()
	*req = C.ndma_request_t(h)
	return C.NDMA_OK
}

// forget takes r, done, off the calls in flight.
func (cm *comm) forget(r *request) {
	cm.mu.Lock()
	delete(cm.inflight, r)
	cm.mu.Unlock()
	if r.done != nil {
		close(r.done)
	}
}

// wait waits until r no longer uses its buffers.
func (r *request) wait() {
	if r.done != nil {
		<-r.done // a blocking call, on another thread
	} else {
		<-r.r.Done()
	}
}

// result releases the completed request r's context and returns its
// code; a call ndma_comm_free cancelled is NDMA_ERR_CLOSED.
func (r *request) result() C.int {
	_, err := r.r.Test() // first: the request's end stops its context's watch
	r.cancel()
	if err == nil {
		return C.NDMA_OK
	}
	r.c.mu.Lock()
	closed := r.c.closed
	r.c.mu.Unlock()
	if closed && errors.Is(err, context.Canceled) {
		err = fmt.Errorf("%w: freed while the call was in flight: %w", coll.ErrClosed, err)
	}
	return fail(err)
}

// cbytes is n bytes of C memory at p (nil for n == 0).
func cbytes(p unsafe.Pointer, n uintptr) []byte {
	if n == 0 || p == nil {
		return nil
	}
	return unsafe.Slice((*byte)(p), n)
}

// dtypeOf maps an ndma_dtype to its wire type and element size (0 for
// an unknown type).
func dtypeOf(dt C.int) (wire.Dtype, uintptr) {
	switch dt {
	case C.NDMA_FLOAT32:
		return wire.DtypeF32, 4
	case C.NDMA_FLOAT64:
		return wire.DtypeF64, 8
	case C.NDMA_INT32:
		return wire.DtypeI32, 4
	case C.NDMA_INT64:
		return wire.DtypeI64, 8
	}
	return 0, 0
}

func opOf(op C.int) (coll.ReduceOp, bool) {
	switch op {
	case C.NDMA_SUM:
		return coll.Sum, true
	case C.NDMA_PROD:
		return coll.Prod, true
	case C.NDMA_MIN:
		return coll.Min, true
	case C.NDMA_MAX:
		return coll.Max, true
	}
	return 0, false
}

// maxBytes bounds one call's buffer (the size of a C array in Go).
const maxBytes = 1 << 40

// Kinds of ndmago_reduce.
const (
	kindAllreduce     = 0
	kindReduce        = 1
	kindReduceScatter = 2
)

//export ndmago_reduce
func ndmago_reduce(h C.ndma_comm_t, kind C.int, send, recv unsafe.Pointer, count C.size_t, dtype, op C.int, root C.int, req *C.ndma_request_t) (rc C.int) {
	defer guard(&rc)
	cm, err := lookupComm(h)
	if err != nil {
		return fail(err)
	}
	dt, esize := dtypeOf(dtype)
	if esize == 0 {
		return argErr("unknown data type %d", int(dtype))
	}
	alu, ok := opOf(op)
	if !ok {
		return argErr("unknown reduction %d", int(op))
	}
	if uintptr(count) > maxBytes/esize {
		return argErr("count %d too large", uint64(count))
	}
	n := uintptr(count) * esize
	size := uintptr(cm.c.Size())
	switch kind {
	case kindAllreduce:
		if n > 0 && (recv == nil || send == nil) {
			return argErr("allreduce: send or recv is NULL")
		}
		s, r := cbytes(send, n), cbytes(recv, n)
		if send == recv {
			s = nil // in place
		}
		return cm.run(req, coll.OpAllreduce, func(ctx context.Context, opts []coll.CallOption) *coll.Request {
			return cm.c.IallreduceBytes(ctx, s, r, dt, alu, opts...)
		})
	case kindReduce:
		if root < 0 || int(root) >= cm.c.Size() {
			return argErr("reduce: root %d of %d ranks", int(root), cm.c.Size())
		}
		atRoot := int(root) == cm.c.Rank()
		if n > 0 && (send == nil || atRoot && recv == nil) {
			return argErr("reduce: send, or recv at the root, is NULL")
		}
		s, r := cbytes(send, n), []byte(nil)
		if atRoot {
			r = cbytes(recv, n)
			if send == recv {
				s = nil
			}
		}
		return cm.run(req, coll.OpReduce, func(ctx context.Context, opts []coll.CallOption) *coll.Request {
			return cm.c.IreduceBytes(ctx, s, r, dt, alu, int(root), opts...)
		})
	case kindReduceScatter:
		if n > 0 && (send == nil || recv == nil) {
			return argErr("reduce_scatter: send or recv is NULL")
		}
		if n > maxBytes/size {
			return argErr("count %d too large", uint64(count))
		}
		s, r := cbytes(send, n*size), cbytes(recv, n)
		return cm.run(req, coll.OpReduceScatter, func(ctx context.Context, opts []coll.CallOption) *coll.Request {
			return cm.c.IreduceScatterBytes(ctx, s, r, dt, alu, opts...)
		})
	}
	return argErr("unknown reduction kind %d", int(kind))
}

//export ndmago_bcast
func ndmago_bcast(h C.ndma_comm_t, buf unsafe.Pointer, n C.size_t, root C.int, req *C.ndma_request_t) (rc C.int) {
	defer guard(&rc)
	cm, err := lookupComm(h)
	if err != nil {
		return fail(err)
	}
	if root < 0 || int(root) >= cm.c.Size() {
		return argErr("bcast: root %d of %d ranks", int(root), cm.c.Size())
	}
	if n > 0 && buf == nil || uintptr(n) > maxBytes {
		return argErr("bcast: buf is NULL or too large")
	}
	b := cbytes(buf, uintptr(n))
	return cm.run(req, coll.OpBcast, func(ctx context.Context, opts []coll.CallOption) *coll.Request {
		return cm.c.Ibcast(ctx, b, int(root), opts...)
	})
}

//export ndmago_allgather
func ndmago_allgather(h C.ndma_comm_t, send, recv unsafe.Pointer, n C.size_t, req *C.ndma_request_t) (rc C.int) {
	defer guard(&rc)
	cm, err := lookupComm(h)
	if err != nil {
		return fail(err)
	}
	size := uintptr(cm.c.Size())
	if uintptr(n) > maxBytes/size {
		return argErr("allgather: %d bytes per rank too large", uint64(n))
	}
	if n > 0 && recv == nil {
		return argErr("allgather: recv is NULL")
	}
	var s []byte
	if send != nil {
		s = cbytes(send, uintptr(n))
		if s == nil {
			s = []byte{}
		}
	}
	r := cbytes(recv, uintptr(n)*size)
	return cm.run(req, coll.OpAllgather, func(ctx context.Context, opts []coll.CallOption) *coll.Request {
		return cm.c.Iallgather(ctx, s, r, opts...)
	})
}

//export ndmago_barrier
func ndmago_barrier(h C.ndma_comm_t, req *C.ndma_request_t) (rc C.int) {
	defer guard(&rc)
	cm, err := lookupComm(h)
	if err != nil {
		return fail(err)
	}
	return cm.run(req, coll.OpBarrier, func(ctx context.Context, opts []coll.CallOption) *coll.Request {
		return cm.c.Ibarrier(ctx, opts...)
	})
}

// lookupRequest returns the request of handle h.
func lookupRequest(h C.ndma_request_t) (*request, error) {
	handles.Lock()
	defer handles.Unlock()
	r := handles.reqs[uint64(h)]
	if r == nil {
		return nil, fmt.Errorf("%w: no request %d (never started, or already completed by ndma_wait or ndma_test)", coll.ErrArg, uint64(h))
	}
	return r, nil
}

// finish frees the completed request h and returns its result.
func finish(h C.ndma_request_t, r *request) C.int {
	handles.Lock()
	delete(handles.reqs, uint64(h))
	handles.Unlock()
	r.c.forget(r)
	return r.result()
}

//export ndmago_wait
func ndmago_wait(h C.ndma_request_t) (rc C.int) {
	defer guard(&rc)
	r, err := lookupRequest(h)
	if err != nil {
		return fail(err)
	}
	if r.r.Endpoint() {
		// A switch operation, completed as the endpoint steps its reply:
		// this thread reads the socket itself until then, as a blocking
		// call does.
		r.c.ep.Drive(endpoint.Driving(context.Background()), func() bool {
			select {
			case <-r.r.Done():
				return true
			default:
				return false
			}
		})
	}
	<-r.r.Done()
	return finish(h, r)
}

//export ndmago_request_notify
func ndmago_request_notify(h C.ndma_request_t, fn, arg unsafe.Pointer) (rc C.int) {
	defer guard(&rc)
	if fn == nil {
		return argErr("notify: fn is NULL")
	}
	r, err := lookupRequest(h)
	if err != nil {
		return fail(err)
	}
	handles.Lock()
	twice := r.notified
	r.notified = true
	handles.Unlock()
	if twice {
		return argErr("request %d already has a notification", uint64(h))
	}
	// fn and arg are C pointers, kept only until the call.
	go func() {
		<-r.r.Done()
		C.ndma_call_notify(fn, arg)
	}()
	return C.NDMA_OK
}

//export ndmago_test
func ndmago_test(h C.ndma_request_t, done *C.int) (rc C.int) {
	defer guard(&rc)
	if done == nil {
		return argErr("done is NULL")
	}
	r, err := lookupRequest(h)
	if err != nil {
		return fail(err)
	}
	select {
	case <-r.r.Done():
		*done = 1
		return finish(h, r)
	default:
		*done = 0
		return C.NDMA_OK
	}
}
