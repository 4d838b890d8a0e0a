package coll

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/wire"
)

// Two-level collectives. Ranks that share a host (the same host key:
// Config.HostID, else HostKey) share a memory segment (segment.go); with
// Config.Hierarchy set to HierarchyAuto, every collective (Barrier,
// Bcast, Reduce, Allreduce, Allgather, ReduceScatter, Gather, Scatter,
// Alltoall) runs in two levels: inside each host through that segment, between hosts by one leader per host (the host's lowest rank) on a
// communicator of the leaders (in-network or host algorithms, as
// chosen for the call), then inside each host again. A job on one host
// never touches the network for them.

// Hierarchy chooses whether collectives run in two levels (Config).
type Hierarchy int

const (
	// HierarchyOff (the zero value): every collective runs over the
	// network between all ranks, whether they share a host or not.
	HierarchyOff Hierarchy = iota
	// HierarchyAuto: the ranks exchange host keys when the communicator
	// is created; when some host has more than one rank, every
	// collective runs in two levels.
	HierarchyAuto
)

// DefaultHierarchy is the hierarchy of a launch that does not choose
// one: ParseEnv without NDMA_HIERARCHY (so FromEnv, libndma, libndma_mpi,
// the Python package and its PyTorch backend), libndma's ndma_config
// with hierarchy 0. Config's zero value stays HierarchyOff: a program
// that fills Config itself chooses.
const DefaultHierarchy = HierarchyAuto

// ParseHierarchy reads "auto" or "off" (NDMA_HIERARCHY); "" is
// DefaultHierarchy.
func ParseHierarchy(s string) (Hierarchy, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "auto":
		return HierarchyAuto, nil
	case "off":
		return HierarchyOff, nil
	case "":
		return DefaultHierarchy, nil
	}
	return HierarchyOff, fmt.Errorf("%w: hierarchy %q: want auto or off", ErrArg, s)
}

// HostKey returns the key that tells this host from others for
// Config.Hierarchy: the kernel's boot id, the host name and the /dev/shm
// this process sees (containers on one host each have their own), or ""
// where there is no /dev/shm to share.
func HostKey() string {
	ns := shmNamespace()
	if ns == "" {
		return ""
	}
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	host, _ := os.Hostname()
	return strings.TrimSpace(string(boot)) + "/" + host + "/" + ns
}

// hierarchy is a communicator's two-level state: its host's ranks, the
// shared segment and the leaders' communicator.
type hierarchy struct {
	local     []int         // world ranks on this host, ascending; local[0] leads
	me        int           // this rank's index in local
	leaders   *Communicator // the hosts' leaders (nil elsewhere, or with one host)
	hosts     int           // number of hosts
	hostOf    []int         // host index of every world rank
	lead      []int         // leader (world rank) of every host
	hostRanks [][]int       // every host's ranks, ascending
	maxLocal  int           // most ranks on one host
	seg       *segment      // nil when this rank is alone on its host
	world     *Communicator
	idle      time.Duration // Config.Liveness (0: no bound)
	pidns     uint64        // this process's PID namespace (0: unknown)

	mu     sync.Mutex
	last   chan struct{} // closed when the latest call so far ends
	broken error         // the failure that stopped the host's collectives
	closed bool

	// Owned by the call holding the turn.
	gen   uint64 // phases completed
	chunk uint64 // result regions written
	calls uint64 // calls made
	// stepped: the current call reached the leaders' step.
	stepped bool

	// silent, set by tests, stands for a crashed process: the rank
	// writes nothing more to the segment.
	silent atomic.Bool
}

// hostLayout groups the world's ranks by host key (32 bytes each, all
// zero: a host of its own). Hosts are numbered in the order of their
// lowest rank.
func hostLayout(keys []byte, n int) (hostOf, lead []int, local [][]int) {
	hostOf = make([]int, n)
	var zero [32]byte
	for r := range n {
		k := keys[32*r : 32*r+32]
		h := -1
		if !bytes.Equal(k, zero[:]) {
			for i, l := range lead {
				if bytes.Equal(keys[32*l:32*l+32], k) {
					h = i
					break
				}
			}
		}
		if h < 0 {
			h = len(lead)
			lead = append(lead, r)
			local = append(local, nil)
		}
		hostOf[r] = h
		local[h] = append(local[h], r)
	}
	return hostOf, lead, local
}

// hostDigest is the 32 bytes a rank tells the others of its host (all
// zero: nothing to share, a host of its own).
func hostDigest(hostID string) (d [32]byte) {
	key := hostID
	if key == "" {
		key = HostKey()
	}
	if shmNamespace() == "" || key == "" {
		return d // nothing to share
	}
	return sha256.Sum256([]byte("ndma host\x00" + key))
}

// setupRecord is what every rank tells the others when a communicator
// is created: its hierarchy, then its host digest (zero unless
// HierarchyAuto).
const setupRecord = 1 + 32

// agreeSetup exchanges the ranks' setup records and returns their host
// digests. Ranks that disagree on the hierarchy would wait for each
// other's collectives forever (one side in the segment, the other on
// the network): every rank fails the creation instead, naming which
// ranks chose what.
//
// The ranks first count who chose what with one Allreduce of two
// numbers (one aggregation at the switch, whatever the number of ranks);
// only when some chose HierarchyAuto do they exchange the records, which
// for N ranks posts N receives on each.
func (c *Communicator) agreeSetup(ctx context.Context, h Hierarchy, hostID string) ([]byte, error) {
	count := make([]byte, 16) // i64 little-endian: ranks off, ranks auto
	binary.LittleEndian.PutUint64(count[8*int(h):], 1)
	if err := c.AllreduceBytes(ctx, nil, count, wire.DtypeI64, Sum); err != nil {
		return nil, fmt.Errorf("coll: counting the ranks' setup: %w", err)
	}
	if auto := binary.LittleEndian.Uint64(count[8:]); auto == 0 {
		return make([]byte, 32*c.size), nil // every rank off: no host keys
	}
	mine := make([]byte, setupRecord)
	mine[0] = byte(h)
	if h == HierarchyAuto {
		d := hostDigest(hostID)
		copy(mine[1:], d[:])
	}
	all := make([]byte, setupRecord*c.size)
	if err := c.Allgather(ctx, mine, all); err != nil {
		return nil, fmt.Errorf("coll: exchanging the ranks' setup: %w", err)
	}
	var auto, off []int
	keys := make([]byte, 32*c.size)
	for r := range c.size {
		rec := all[r*setupRecord : (r+1)*setupRecord]
		if Hierarchy(rec[0]) == HierarchyAuto {
			auto = append(auto, r)
		} else {
			off = append(off, r)
		}
		copy(keys[32*r:], rec[1:])
	}
	if len(auto) > 0 && len(off) > 0 {
		return nil, fmt.Errorf("%w: the ranks disagree on two-level collectives (NDMA_HIERARCHY, Config.Hierarchy): auto on ranks %s, off on ranks %s; give every rank the same",
			ErrArg, rankList(auto), rankList(off))
	}
	return keys, nil
}

// rankList writes ranks (ascending) as runs, "0-3,7", at most 16 runs.
func rankList(ranks []int) string {
	var b strings.Builder
	runs := 0
	for i := 0; i < len(ranks); {
		j := i
		for j+1 < len(ranks) && ranks[j+1] == ranks[j]+1 {
			j++
		}
		if runs == 16 {
			b.WriteString(",…")
			break
		}
		if runs > 0 {
			b.WriteByte(',')
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", ranks[i], ranks[j])
		} else {
			fmt.Fprintf(&b, "%d", ranks[i])
		}
		runs++
		i = j + 1
	}
	return b.String()
}

// setupHierarchy, given every rank's host digest, builds the leaders'
// communicator and maps the host's segment when some host has more than
// one rank. Every rank calls it, in New.
func (c *Communicator) setupHierarchy(ctx context.Context, keys []byte) (*hierarchy, error) {
	hostOf, lead, locals := hostLayout(keys, c.size)
	if len(lead) == c.size {
		return nil, nil // a rank per host: nothing to share
	}
	for i, l := range locals {
		if len(l) > MaxLocalRanks {
			return nil, fmt.Errorf("%w: hierarchy: %d ranks share host %d (rank %d's), more than %d", ErrArg, len(l), i, lead[i], MaxLocalRanks)
		}
	}
	h := &hierarchy{hosts: len(lead), hostOf: hostOf, lead: lead, hostRanks: locals, local: locals[hostOf[c.rank]], world: c, idle: c.idle,
		last: closedChan}
	for _, l := range locals {
		h.maxLocal = max(h.maxLocal, len(l))
	}
	for i, r := range h.local {
		if r == c.rank {
			h.me = i
		}
	}
	if h.hosts > 1 {
		color := -1
		if h.me == 0 {
			color = 0
		}
		lc, err := c.Split(ctx, color, c.rank)
		if err != nil {
			return nil, fmt.Errorf("coll: hierarchy: the hosts' leaders: %w", err)
		}
		h.leaders = lc
		// A leader learns of a call another leader aborted while it
		// still waits for its own host (between), before it runs the
		// call: the leaders' abort receives are posted from the start.
		if lc != nil {
			lc.postAborts()
		}
	}
	if err := h.mapSegment(ctx); err != nil {
		if h.leaders != nil {
			h.leaders.Close(context.WithoutCancel(ctx))
		}
		return nil, err
	}
	return h, nil
}

// segNameLen is the fixed length of the message that carries a
// segment's name (zero-padded).
const segNameLen = 64

// testHookMapSegment, when set (by tests), runs before a rank that is
// not its host's leader maps the segment; an error stands for the rank
// dying there.
var testHookMapSegment func(worldRank int) error

// mapSegment: the host's leader creates the segment and sends its name
// to the other local ranks, which map it and answer; the leader unlinks
// it once all have answered (or failed), so the segment's name never
// outlives the setup and a crash later leaves nothing in /dev/shm.
func (h *hierarchy) mapSegment(ctx context.Context) error {
	c := h.world
	seq, err := c.call()
	if err != nil {
		return err
	}
	n := len(h.local)
	if n == 1 {
		return nil
	}
	size := segmentSize(n)
	tName, tAck := tag(seq, 0), tag(seq, 1)
	if h.me != 0 {
		name := make([]byte, segNameLen)
		if err := c.recv(ctx, h.local[0], tName, name); err != nil {
			return fmt.Errorf("coll: hierarchy: the host's segment: %w", err)
		}
		if testHookMapSegment != nil {
			if err := testHookMapSegment(c.rank); err != nil {
				return err
			}
		}
		seg, err := openSegment(string(bytes.TrimRight(name, "\x00")), size)
		ack := []byte{1}
		if err != nil {
			ack[0] = 0
		} else {
			seg.ranks = n
			h.seg = seg
			h.publishPid()
		}
		if serr := c.send(ctx, h.local[0], tAck, ack); serr != nil && err == nil {
			err = serr
		}
		if err != nil && h.seg != nil {
			h.seg.unmap()
			h.seg = nil
		}
		return err
	}
	seg, name, err := createSegment(size)
	if err != nil {
		return err
	}
	defer unlinkSegment(name)
	seg.ranks = n
	msg := make([]byte, segNameLen)
	copy(msg, name)
	var sends []*endpoint.Op
	for _, r := range h.local[1:] {
		op := c.sendOp(r, tName, msg)
		if err := c.ep.Start(op, nil); err != nil {
			seg.unmap()
			return err
		}
		sends = append(sends, op)
	}
	var errs []error
	ack := make([]byte, 1)
	for _, r := range h.local[1:] {
		switch err := c.recv(ctx, r, tAck, ack); {
		case err != nil:
			errs = append(errs, err)
		case ack[0] != 1:
			errs = append(errs, fmt.Errorf("coll: hierarchy: rank %d could not map the host's segment", r))
		}
		if len(errs) > 0 {
			break
		}
	}
	for _, op := range sends {
		if err := c.awaitOp(ctx, op); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		seg.unmap()
		return fmt.Errorf("coll: hierarchy: the host's segment: %w", err)
	}
	h.seg = seg
	h.publishPid()
	return nil
}

// publishPid writes this process's id and PID namespace into its line.
func (h *hierarchy) publishPid() {
	h.pidns = pidNamespace()
	h.seg.pidNS(h.me).Store(h.pidns)
	h.seg.pid(h.me).Store(uint64(os.Getpid()))
}

// close ends the hierarchy: once the last call ended (or ctx ends), the
// leaders' communicator is closed and the segment unmapped.
func (h *hierarchy) close(ctx context.Context) error {
	h.mu.Lock()
	h.closed = true
	last := h.last
	h.mu.Unlock()
	select {
	case <-last:
		if h.seg != nil {
			h.seg.unmap()
		}
	case <-ctx.Done():
		// A call still runs on the segment: leave it mapped.
	}
	if h.leaders != nil {
		return h.leaders.Close(ctx)
	}
	return nil
}

// turn reserves the next call's turn on the segment: calls take it in
// the order they were made (every rank makes them in the same order),
// one at a time. prev is closed when the call before ends; the call
// closes mine when it ends.
func (h *hierarchy) turn() (prev, mine chan struct{}, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, nil, ErrClosed
	}
	prev, mine = h.last, make(chan struct{})
	h.last = mine
	return prev, mine, nil
}

// run runs f in its turn (see turn), and stops the host's collectives
// for good if it fails: the local ranks no longer agree on where they
// are in the segment.
func (h *hierarchy) run(ctx context.Context, prev, mine chan struct{}, f func(ctx context.Context) error) error {
	select {
	case <-prev:
	case <-ctx.Done():
		err := ctx.Err()
		h.fail(err)
		go func() {
			<-prev
			close(mine)
		}()
		return err
	}
	defer close(mine)
	h.mu.Lock()
	broken := h.broken
	h.mu.Unlock()
	if broken != nil {
		return broken
	}
	h.stepped = false
	err := f(ctx)
	if err != nil {
		h.fail(err)
		h.tellLeaders(err)
	}
	return err
}
