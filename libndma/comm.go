package main

/*
#include "ndma.h"
*/
import "C"

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/ndma/ndma/coll"
	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/transport"
)

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
	if strings.Contains(l.Switch, ",") {
		// A list: the in-network collectives shard over these switches.
		sws, err := coll.ParseSwitches(l.Switch)
		if err != nil {
			return fail(fmt.Errorf("ndma_config.switch_addr: %w", err))
		}
		l.Switch, l.Switches = sws[0], sws
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
	if cfgField(cfg, unsafe.Offsetof(cfg.hierarchy), unsafe.Sizeof(cfg.hierarchy)) {
		switch cfg.hierarchy {
		case C.NDMA_HIERARCHY_DEFAULT:
			l.Hierarchy = coll.DefaultHierarchy
		case C.NDMA_HIERARCHY_OFF:
			l.Hierarchy = coll.HierarchyOff
		case C.NDMA_HIERARCHY_AUTO:
			l.Hierarchy = coll.HierarchyAuto
		default:
			return argErr("hierarchy %d: want NDMA_HIERARCHY_AUTO (%d), NDMA_HIERARCHY_OFF (%d) or 0 (the default)",
				int(cfg.hierarchy), C.NDMA_HIERARCHY_AUTO, C.NDMA_HIERARCHY_OFF)
		}
	} else {
		l.Hierarchy = coll.DefaultHierarchy
	}
	if cfgField(cfg, unsafe.Offsetof(cfg.host_id), unsafe.Sizeof(cfg.host_id)) {
		l.HostID = cString(cfg.host_id)
	}
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

//export ndmago_comm_local_size
func ndmago_comm_local_size(h C.ndma_comm_t, size *C.int) (rc C.int) {
	defer guard(&rc)
	cm, err := lookupComm(h)
	if err != nil {
		return fail(err)
	}
	if size == nil {
		return argErr("size is NULL")
	}
	*size = C.int(max(1, len(cm.c.LocalRanks())))
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
