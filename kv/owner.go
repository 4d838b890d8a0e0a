package kv

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/pool/ec"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// ServiceName is the anycast service of a key space's owners: on a
// sealed fabric, the credentials named kv-SPACE, kv-SPACE/INSTANCE and
// kv-SPACE/RANK (role member) may serve it.
func ServiceName(space string) string { return "kv-" + space }

// DefaultWriteTimeout bounds an owner's write of one value or bucket to
// the pool when OwnerConfig.WriteTimeout is zero.
const DefaultWriteTimeout = 5 * time.Second

// OwnerConfig configures an owner.
type OwnerConfig struct {
	// Switch is the switch's address; Fabric the options for reaching
	// it.
	Switch string
	Fabric endpoint.FabricOptions
	// Space names the key space (its service is ServiceName(Space)).
	Space string
	// Rank is this owner's rank, 0 to the layout's Owners-1: it owns
	// the shards Layout assigns to it.
	Rank int
	// WriteTimeout bounds each pool write (zero: DefaultWriteTimeout).
	WriteTimeout time.Duration
	// Check is how often the owner asks the switch whether it still
	// lists it, and registers again when not (the switch restarted, or
	// counted it dead while it was cut off). Zero means a second.
	Check time.Duration
	// Lease is how long after the switch last confirmed this owner's
	// membership (a heartbeat answered) it goes on writing the region:
	// beyond that it answers busy until a heartbeat is answered again.
	// An owner that registers (at start, or taking the rank over from
	// one the switch counted dead) writes only Lease plus FenceMargin
	// after the switch answered it, so two processes holding the same
	// rank never write at once. Zero: DefaultLease.
	Lease time.Duration
	// Standby makes StartOwner return once the shards are read, without
	// waiting for the rank: while another process holds it, this one
	// waits, and takes the rank over when the switch counts the other
	// dead.
	Standby bool
	// Logger receives the owner's log (nil: slog.Default()).
	Logger *slog.Logger
	// Incarnation names this owner process to clients (requests for
	// another are refused) and makes its fencing tokens differ from
	// another process's that takes the same counter: it must differ
	// from every other process's of the key space. Zero: drawn at random,
	// as it should be outside a simulation that replays from its seed.
	Incarnation uint64
	// GrowAt is the load (keys over buckets) past which the owner grows
	// a shard's table to twice its buckets, up to the layout's
	// MaxBuckets (a layout without it never grows); 1: only when full
	// (a new key finds no free bucket). A table at MaxBuckets refuses
	// new keys once full (ErrFull). Zero: DefaultGrowAt.
	GrowAt float64
	// Clients are the scopes, besides the key space's own (the scope of
	// ServiceName(Space): its owners' credentials, kv-SPACE/NAME), whose
	// processes may use the key space on a sealed fabric: the owner
	// tells only them where the key space lies and applies only their
	// writes, and answers every other caller ErrDenied (the switch
	// certifies each request's scope: endpoint.Caller). On a fabric
	// without identities every caller may.
	Clients []string
}

// Owner serves the writes of its shards of a key space: it is the only
// process that writes their buckets and values.
type Owner struct {
	cfg    OwnerConfig
	log    *slog.Logger
	reg    *pool.Region
	mem    store // reg, or the erasure-coded volume in it
	l      Layout
	lo, hi int
	shards []*shard
	ep     *endpoint.Endpoint
	sc     endpoint.ServiceConfig
	// allow are the tags of the scopes that may use the key space on a
	// sealed fabric (OwnerConfig.Clients and the space's own).
	allow []uint64
	// gate orders the goroutine that registers the owner (StartOwner's,
	// then supervise) as the shards' gates order their lock holders.
	gate  *endpoint.Gate
	mu    sync.Mutex
	svc   *endpoint.Service // under mu
	stats OwnerStats        // under mu
	stop  context.CancelFunc
	done  chan struct{}
	// inc tells this incarnation of the owner from earlier and later
	// ones: a request names the one it is for, so a request an earlier
	// incarnation may have applied is never applied again by this one.
	inc     uint64
	replies replies // under repMu
	repMu   chan struct{}
	// raiseMu is held by the handler raising the fence (lease.go).
	raiseMu chan struct{}
	// rebuilding is held while a rebuild request runs: one at a time,
	// so that a flood of them (any client the space serves may send
	// them) is refused at once rather than queued on the shards' locks
	// in front of the writes; after one, the next waits as long as it
	// took (rebuildAfter).
	rebuilding chan struct{}
	// rebuildAfter is when the owner takes its next rebuild request
	// (under mu).
	rebuildAfter time.Time
	// gen counts the owner's registrations, and the writes refused for
	// their fence (under mu): a shard loaded under an earlier one is
	// read again before its next write, since another process may have
	// held the rank in between.
	gen uint64
	// activeAt is when the current registration may start writing
	// (under mu).
	activeAt time.Time
	// The owner's fence (lease.go), under mu: the token it raised for
	// registration fenceGen (0: none yet), the key space's view whose
	// writes carry it, and the highest token counter it knows of.
	fence    pool.Fence
	fenceGen uint64
	wreg     *store
	fenceCtr uint64
	// builds counts the bigger tables the owner started (their tags
	// derive from it), under mu.
	builds uint64
	// Reservations of one-sided values (onesided.go): the last id
	// handed out, and under mu how many are held, all and per client.
	resvID     atomic.Uint64
	reserved   int
	reservedBy map[uint64]int
	// beforeWrite, set by tests (under mu), runs in each pool write
	// after the lease check passed and before the write is sent, and
	// returns the context to send it under: a test's pause there that
	// the write's deadline does not catch (as a pause inside the
	// endpoint, after the write was posted, is not caught) is the one
	// the fence guards against.
	beforeWrite func(ctx context.Context, off uint64, n int) context.Context
}

// OwnerStats counts an owner's work.
type OwnerStats struct {
	Writes, Refused, Failed uint64
	// Degraded counts pool writes that reached fewer copies than the
	// key space keeps (a memory node down): written, not failed.
	Degraded uint64
	// Batches counts the SetMulti requests applied (their keys are
	// counted in Writes, Refused and Failed).
	Batches uint64
	// Registrations counts the times the owner took its rank (at
	// start, after a switch restart, or over from another process).
	Registrations uint64
	// Denied counts the requests refused for their caller's scope
	// (OwnerConfig.Clients).
	Denied uint64
	// Scrubbed counts the rows of an erasure-coded key space whose
	// parity the owner recomputed from the data when it took their
	// shard (Owner.scrub).
	Scrubbed uint64
	// Rebuilt counts the rows of an erasure-coded key space in which the
	// owner rebuilt a lost shard column (RebuildShards, while owners
	// serve), and RebuildsDeferred the rebuild requests it answered busy
	// because rebuilding had taken half its time (the client sends them
	// again).
	Rebuilt, RebuildsDeferred uint64
	// Reserved counts the slots the owner handed clients for one-sided
	// values, OneSided the values it published from them, and
	// ReservationsExpired those whose time ran out unpublished.
	Reserved, OneSided, ReservationsExpired uint64
	// Resynced counts the bytes of a two-copy key space the owner wrote
	// back, as it read them, when it loaded a shard it took over or
	// whose last write failed, so that both copies hold what readers
	// read (Owner.load).
	Resynced uint64
	// LeaseLapsed counts the writes refused, or cut short, because the
	// switch had not confirmed the owner's membership for Lease.
	LeaseLapsed uint64
	// Fenced counts the pool writes refused because the rank's fence
	// holds a higher token than this owner's (a newer holder raised it):
	// never applied, never resent; the owner raises its fence again
	// (if it still holds the rank) and reads its shards again before
	// its next write.
	Fenced uint64
	// FenceToken is the fencing token the owner's writes carry (0: none
	// raised yet for its current registration).
	FenceToken uint64
	// Serving reports whether the owner holds its rank and may write.
	Serving bool
	// Expired counts the expired values the owner freed (when a write
	// touched their key, or its sweep found them).
	Expired uint64
	// Keys counts the keys with a value, expired ones not yet freed
	// included.
	Keys int
	// Buckets is the buckets of the owner's shards' tables (Keys over
	// Buckets is their load).
	Buckets int
	// Growths counts the tables the owner grew (switched to one of
	// twice the buckets); Growing the shards whose bigger table it is
	// writing now.
	Growths uint64
	Growing int
	Heap    HeapStats // summed over the owner's shards
}

type shard struct {
	// lock serializes the shard's writes: a channel, not a mutex, so a
	// writer waiting behind one that waits on the network blocks
	// durably (inside a synctest bubble time then moves on).
	lock chan struct{}
	// gate orders the shard's lock holder among the owner's goroutines
	// woken at one instant of a simulated network (endpoint.Gate): it
	// passes the gate once it holds the lock, and after each pool
	// operation.
	gate    *endpoint.Gate
	id      int
	gen     uint64         // the owner's registration it was loaded under
	b       []bucket       // the owner's copy of the shard's buckets
	exp     []int64        // per bucket: its value's expiry (0: never)
	keys    []string       // per bucket: its live key
	idx     map[string]int // live key → bucket
	sweep   int            // the next bucket the sweep looks at
	heap    *slabs
	nextVer uint64    // versions are unique in a shard
	dirty   bool      // a bucket write failed: the region may differ from b
	dirtyAt time.Time // when it did
	// tab is the table in use (b holds its buckets); grow the bigger
	// one being written, if any (grow.go).
	tab  tableDesc
	grow *growth
	// The slots handed to clients for one-sided values (onesided.go):
	// by reservation, their bytes, and those ended unpublished.
	resv          map[uint64]*reservation
	reservedBytes uint64
	parked        []parked
}

// StartOwner loads the owner's shards of the key space in region reg
// (Create made it) and registers it with the switch as member Rank of
// the space's service.
func StartOwner(ctx context.Context, ep *endpoint.Endpoint, reg *pool.Region, cfg OwnerConfig) (*Owner, error) {
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.Check == 0 {
		cfg.Check = time.Second
	}
	if cfg.Lease == 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.GrowAt == 0 {
		cfg.GrowAt = DefaultGrowAt
	}
	if cfg.Lease < 0 || cfg.WriteTimeout < 0 || cfg.Check < 0 {
		return nil, fmt.Errorf("kv: owner: negative Lease, WriteTimeout or Check")
	}
	if !(cfg.GrowAt > 0 && cfg.GrowAt <= 1) {
		return nil, fmt.Errorf("kv: owner: GrowAt %v (want a load above 0, at most 1)", cfg.GrowAt)
	}
	own, _ := secure.NameScopes(ServiceName(cfg.Space))
	allow := []uint64{secure.ScopeTag(own)}
	for _, c := range cfg.Clients {
		if n, err := secure.ParseName(secure.RoleClient, c); err != nil || n.Scope != c {
			return nil, fmt.Errorf("kv: owner: client scope %q: want a label (A-Z a-z 0-9 - _)", c)
		}
		allow = append(allow, secure.ScopeTag(c))
	}
	o := &Owner{cfg: cfg, log: cfg.Logger, reg: reg, ep: ep, repMu: make(chan struct{}, 1), raiseMu: make(chan struct{}, 1), rebuilding: make(chan struct{}, 1), reservedBy: make(map[uint64]int), inc: cfg.Incarnation,
		allow: allow}
	for o.inc == 0 {
		o.inc = rand.Uint64()
	}
	if o.log == nil {
		o.log = slog.Default()
	}
	var err error
	if o.l, o.mem, err = openStore(ctx, reg); err != nil {
		return nil, err
	}
	if cfg.Rank < 0 || cfg.Rank >= o.l.Owners {
		return nil, fmt.Errorf("kv: owner rank %d: the key space has %d owners", cfg.Rank, o.l.Owners)
	}
	o.lo, o.hi = o.l.shardsOf(cfg.Rank)
	o.gate = ep.NewGate()
	for s := o.lo; s < o.hi; s++ {
		sh := &shard{id: s, lock: make(chan struct{}, 1), gate: ep.NewGate(), heap: newSlabs(o.l.heapAddr(s), o.l.HeapBytes, o.l.PageBytes)}
		if err := o.load(ctx, sh); err != nil {
			return nil, err
		}
		o.shards = append(o.shards, sh)
	}
	o.sc = endpoint.ServiceConfig{Name: ServiceName(cfg.Space), Size: o.l.Owners, Policy: ctrl.PolicyKeyAffinity}
	for r := range o.l.Owners {
		if lo, hi := o.l.shardsOf(r); lo < hi {
			o.sc.Ranges = append(o.sc.Ranges, ctrl.KeyRange{Start: uint64(lo), End: uint64(hi), Owner: r})
		}
	}
	if !cfg.Standby {
		if err := o.register(ctx); err != nil {
			return nil, err
		}
	}
	sctx, stop := context.WithCancel(context.Background())
	o.stop, o.done = stop, make(chan struct{})
	go o.supervise(sctx)
	return o, nil
}

// register makes the owner member Rank of the space's service, waiting
// while the switch still counts a previous incarnation alive (BUSY).
func (o *Owner) register(ctx context.Context) error {
	o.mu.Lock()
	old := o.svc
	o.svc = nil
	o.mu.Unlock()
	if old != nil {
		old.Close()
	}
	for {
		svc, err := o.ep.RegisterService(ctx, o.cfg.Switch, o.sc, o.cfg.Rank, o.handle, o.cfg.Fabric)
		o.gate.Pass()
		if err == nil {
			o.mu.Lock()
			o.svc = svc
			o.gen++
			o.activeAt = time.Now().Add(o.cfg.Lease + FenceMargin)
			o.stats.Registrations++
			o.mu.Unlock()
			o.log.Info("kv: owner holds its rank", "space", o.cfg.Space, "rank", o.cfg.Rank, "writes_from", o.activeAt)
			return nil
		}
		if !errors.Is(err, wire.StatusBusy) {
			return fmt.Errorf("kv: owner %d of %q: %w", o.cfg.Rank, o.cfg.Space, err)
		}
		serr := sleep(ctx, 200*time.Millisecond)
		o.gate.Pass()
		if serr != nil {
			return fmt.Errorf("kv: owner %d of %q: %w", o.cfg.Rank, o.cfg.Space, err)
		}
	}
}

// supervise registers the owner again when the switch no longer lists
// it.
func (o *Owner) supervise(ctx context.Context) {
	defer close(o.done)
	t := time.NewTicker(o.cfg.Check)
	defer t.Stop()
	for first := true; ; first = false {
		if !first { // a standby tries for its rank at once
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			o.gate.Pass()
			o.sweepExpired(ctx)
		}
		cctx, cancel := context.WithTimeout(ctx, o.cfg.Check)
		ms, err := o.ep.ServiceMembers(cctx, o.cfg.Switch, o.sc.Name, o.cfg.Fabric)
		o.gate.Pass()
		listed := err == nil && slices.ContainsFunc(ms, func(m ctrl.MemberInfo) bool {
			return int(m.ID) == o.cfg.Rank && m.Addr.Port() == o.ep.LocalAddr().Port()
		})
		if !listed && ctx.Err() == nil {
			o.mu.Lock()
			holding := o.svc != nil
			o.mu.Unlock()
			if holding { // not a standby's routine try
				o.log.Info("kv: registering again", "space", o.cfg.Space, "rank", o.cfg.Rank, "err", err)
			}
			if err := o.register(cctx); errors.Is(err, wire.StatusBusy) {
				o.log.Debug("kv: standing by: another process holds the rank", "space", o.cfg.Space, "rank", o.cfg.Rank)
			} else if err != nil {
				o.log.Warn("kv: register", "space", o.cfg.Space, "rank", o.cfg.Rank, "err", err)
			}
		}
		cancel()
	}
}

// Close stops serving; the switch hands nothing to the owner any more
// once its heartbeats stop.
func (o *Owner) Close() {
	o.stop()
	<-o.done
	o.mu.Lock()
	svc := o.svc
	o.svc = nil
	o.mu.Unlock()
	if svc != nil {
		svc.Close()
	}
}

// Stats returns the owner's counters.
func (o *Owner) Stats() OwnerStats {
	o.mu.Lock()
	st := o.stats
	if o.fencedWritesLocked() != nil {
		st.FenceToken = o.fence.Token
	}
	o.mu.Unlock()
	_, st.Serving = o.lease(time.Now())
	for _, sh := range o.shards {
		sh.lock <- struct{}{}
		st.Keys += len(sh.idx)
		st.Buckets += len(sh.b)
		if sh.grow != nil {
			st.Growing++
		}
		h := sh.heap.stats()
		st.Heap.Bytes += h.Bytes
		st.Heap.UsedBytes += h.UsedBytes
		st.Heap.UsedSlots += h.UsedSlots
		st.Heap.Pages += h.Pages
		<-sh.lock
	}
	return st
}

// loadChunk is the buckets an owner reads at once when it loads a shard.
const loadChunk = 2048

// load reads shard sh's buckets and live values from the region and
// rebuilds its index and allocator. A value that does not check (lost
// with a memory node's memory) is reported and its key dropped.
func (o *Owner) load(ctx context.Context, sh *shard) error {
	gen := o.generation()
	taken := sh.gen != gen
	// In a key space of two copies, the writes of the shard's last
	// writer whose outcome is unknown (the previous holder's, or this
	// owner's own failed one) may have reached one copy only: one
	// forwarded just before the new holder's fence raise may reach one
	// copy before the raise and the other after it, which refuses it;
	// one lost on the way to a copy fails before it is sent again. Reads
	// go to the first copy that answers, so readers would see the
	// value change when that copy's node drops out, and change back
	// when it returns. The fence raised, no such write of an earlier
	// holder lands any more; one of this owner's own, failed, is given
	// FenceMargin from its failure to leave the network (as the lease
	// gives an earlier holder's). Then what the shard is read from is
	// written back to both copies.
	resync := (taken || sh.dirty) && o.mem.vol == nil && o.redundant()
	if d := time.Until(sh.dirtyAt.Add(FenceMargin)); resync && !taken && d > 0 {
		if err := sleep(ctx, d); err != nil {
			return fmt.Errorf("kv: loading shard %d: %w", sh.id, err)
		}
		sh.gate.Pass()
	}
	sh.grow = nil
	if taken {
		o.dropReservations(sh)
	}
	if o.mem.vol != nil {
		// A write of this owner's cut short in a coded key space is
		// finished before the shard is read, so that the owner reads
		// what the region will hold (a chain finished after the read
		// would change a bucket under it). Taken at a new registration,
		// the rows may have had another writer since: their chains are
		// not sent again.
		if taken {
			o.mem.vol.ForgetCuts()
		} else {
			o.finishCutChains(ctx, sh)
		}
	}
	var (
		err  error
		desc []byte
	)
	sh.tab, desc, err = o.readDescBytes(ctx, sh.id)
	sh.gate.Pass()
	if err == nil && resync && desc != nil {
		err = o.writeBack(ctx, sh, desc, o.l.descAddr(sh.id))
	}
	if err != nil {
		return fmt.Errorf("kv: loading shard %d: %w", sh.id, err)
	}
	nb := o.l.tableBuckets(sh.tab.gen)
	sh.b = make([]bucket, nb)
	sh.exp = make([]int64, nb)
	sh.keys = make([]string, nb)
	sh.idx = make(map[string]int)
	sh.nextVer = 1
	sh.sweep = 0
	buf := make([]byte, loadChunk*BucketBytes)
	for i := 0; i < nb; i += loadChunk {
		n := min(loadChunk, nb-i)
		p := buf[:n*BucketBytes]
		addr := o.l.tableAddr(sh.id, sh.tab.gen, i)
		err := o.mem.readAt(ctx, p, addr)
		sh.gate.Pass()
		if err == nil && resync {
			err = o.writeBack(ctx, sh, p, addr)
		}
		if err != nil {
			return fmt.Errorf("kv: loading shard %d: %w", sh.id, err)
		}
		for j := range n {
			b, err := parseBucketTag(p[j*BucketBytes:], sh.tab.tag)
			if err != nil {
				return fmt.Errorf("kv: loading shard %d: bucket %d does not check", sh.id, i+j)
			}
			sh.b[i+j] = b
			sh.nextVer = max(sh.nextVer, b.ver+1)
		}
	}
	used := make(map[uint64]int)
	for i, b := range sh.b {
		if !b.live() {
			continue
		}
		rec := make([]byte, b.len)
		err := o.mem.readAt(ctx, rec, b.addr)
		sh.gate.Pass()
		if err == nil && resync {
			err = o.writeBack(ctx, sh, rec, b.addr)
		}
		if err != nil {
			return fmt.Errorf("kv: loading shard %d: %w", sh.id, err)
		}
		r, err := parseRecord(rec)
		if err != nil || r.ver != b.ver || o.l.place(r.key).hash != b.hash {
			o.log.Warn("kv: a value does not check; its key is dropped", "shard", sh.id, "bucket", i)
			sh.b[i] = bucket{hash: b.hash, ver: b.ver}
			continue
		}
		sh.idx[string(r.key)] = i
		sh.keys[i] = string(r.key)
		sh.exp[i] = r.m.exp
		used[b.addr] = int(b.len)
	}
	sh.nextVer = max(sh.nextVer, sh.tab.floor)
	if !taken {
		sh.keepReserved(used)
	}
	if err := sh.heap.rebuild(used); err != nil {
		return fmt.Errorf("kv: loading shard %d: %w", sh.id, err)
	}
	if taken {
		o.scrub(ctx, sh)
	}
	sh.dirty = false
	sh.gen = gen
	return nil
}

// writeBack writes p, just read at off, back with the owner's fence
// (Owner.load), and counts it.
func (o *Owner) writeBack(ctx context.Context, sh *shard, p []byte, off uint64) error {
	wctx, cancel := context.WithTimeout(ctx, o.cfg.WriteTimeout)
	defer cancel()
	if err := o.write(wctx, sh, p, off); err != nil {
		return fmt.Errorf("writing back %d bytes at %d to both copies: %w", len(p), off, err)
	}
	o.mu.Lock()
	o.stats.Resynced += uint64(len(p))
	o.mu.Unlock()
	return nil
}

// scrub, in an erasure-coded key space, recomputes the parity of every
// row of shard sh (its tables and its heap) from the data, with the
// owner's fence, when the owner takes the shard at a new registration:
// the process that wrote the shard before may have died in the middle
// of a chain, leaving a row's parity out of step with its data, and the
// list of such pieces it kept died with it (ec.Volume.Scrub). Rows it
// cannot repair now stay recorded in this owner's volume and are
// repaired before it writes them.
func (o *Owner) scrub(ctx context.Context, sh *shard) {
	o.mu.Lock()
	w := o.fencedWritesLocked()
	o.mu.Unlock()
	if w == nil || w.vol == nil {
		return // not coded, or not holding the rank (the next load scrubs)
	}
	for _, sp := range o.l.shardSpans(sh.id) {
		n, err := w.vol.Scrub(ctx, int64(sp[0]), int64(sp[1]), sh.gate.Pass)
		o.mu.Lock()
		o.stats.Scrubbed += uint64(n)
		o.mu.Unlock()
		if err != nil {
			o.log.Warn("kv: scrubbing a shard taken over", "shard", sh.id, "err", err)
		}
	}
}

// rebuild serves an opRebuild request for shard key (the anycast key):
// it rebuilds the request's column in the request's rows of that shard
// under the shard's lock, with the owner's fence, each write ending
// with its lease. A request sent again rebuilds the rows again, which
// does no harm; a rebuild cut short answers stFailed, and the caller
// sends it again.
func (o *Owner) rebuild(key uint64, r *request) []byte {
	col, off, n, ok := parseRebuild(r.val)
	if !ok || o.mem.vol == nil || col >= o.l.Code.K+o.l.Code.M || key < uint64(o.lo) || key >= uint64(o.hi) || !o.l.inShard(int(key), off, n) {
		return appendReply(nil, stBad, 0, nil)
	}
	if r.inc != o.inc {
		return appendReply(nil, stStale, o.inc, nil)
	}
	select {
	case o.rebuilding <- struct{}{}:
		defer func() { <-o.rebuilding }()
	default:
		return appendReply(nil, stBusy, 0, nil) // the client sends it again
	}
	o.mu.Lock()
	after := o.rebuildAfter
	if time.Now().Before(after) {
		o.stats.RebuildsDeferred++
	}
	o.mu.Unlock()
	if time.Now().Before(after) {
		return appendReply(nil, stBusy, 0, nil)
	}
	sh := o.shards[int(key)-o.lo]
	sh.lock <- struct{}{}
	defer func() { <-sh.lock }()
	sh.gate.Pass()
	// Rebuilding takes the owner at most half its time, however many
	// requests come: the next is answered busy for as long as this one
	// held the shard.
	start := time.Now()
	defer func() {
		o.mu.Lock()
		o.rebuildAfter = time.Now().Add(time.Since(start))
		o.mu.Unlock()
	}()
	end, ok := o.lease(time.Now())
	if !ok || o.raiseFence(sh) != nil {
		return appendReply(nil, stBusy, 0, nil)
	}
	o.mu.Lock()
	w := o.fencedWritesLocked()
	o.mu.Unlock()
	if w == nil {
		return appendReply(nil, stBusy, 0, nil)
	}
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	rows, err := w.vol.RebuildRows(ctx, col, int64(off), int64(n), sh.gate.Pass)
	o.mu.Lock()
	o.stats.Rebuilt += uint64(rows)
	o.mu.Unlock()
	if err != nil {
		if errors.Is(err, pool.ErrFenced) {
			o.fenced(err)
		}
		o.log.Warn("kv: rebuilding a shard column", "shard", sh.id, "column", col, "err", err)
		if errors.Is(err, ec.ErrNotRebuilding) {
			return appendReply(nil, stBad, 0, nil)
		}
		return appendReply(nil, stFailed, 0, nil)
	}
	return appendReply(nil, stOK, 0, nil)
}

// handle serves one anycast request.
func (o *Owner) handle(key uint64, who endpoint.Caller, b []byte) ([]byte, error) {
	if o.ep.Identity() != nil && !slices.Contains(o.allow, uint64(who)) {
		o.mu.Lock()
		o.stats.Denied++
		o.mu.Unlock()
		return appendReply(nil, stDenied, 0, nil), nil
	}
	r, err := parseRequest(b)
	if err != nil {
		return appendReply(nil, stBad, 0, nil), nil
	}
	if r.op == opMeta {
		body := binary.LittleEndian.AppendUint32(nil, o.reg.ID())
		return appendReply(nil, stOK, 0, binary.LittleEndian.AppendUint64(body, o.reg.Key())), nil
	}
	if r.op == opRebuild {
		return o.rebuild(key, &r), nil
	}
	if len(r.key) == 0 || len(r.key) > MaxKey {
		return appendReply(nil, stBad, 0, nil), nil
	}
	p := o.l.place(r.key)
	if p.shard < o.lo || p.shard >= o.hi {
		return appendReply(nil, stBad, 0, nil), nil
	}
	if r.inc != o.inc {
		return appendReply(nil, stStale, o.inc, nil), nil
	}
	sh := o.shards[p.shard-o.lo]
	sh.lock <- struct{}{}
	defer func() { <-sh.lock }()
	sh.gate.Pass()
	if _, ok := o.lease(time.Now()); !ok || o.raiseFence(sh) != nil {
		// Not holding the rank yet, or no longer sure of it, or its
		// fence not raised: nothing applied, the client sends the
		// request again.
		return appendReply(nil, stBusy, 0, nil), nil
	}
	// A request sent again is answered from the table; the shard's lock
	// orders it after the first copy's apply.
	k := replyKey{r.client, r.seq}
	o.repMu <- struct{}{}
	v, cached := o.replies.check(k, r.done, time.Now())
	<-o.repMu
	switch v {
	case replyCached:
		return cached, nil
	case replyDone, replyFull:
		// Given up by its client, or no room: not applied.
		return appendReply(nil, stBusy, 0, nil), nil
	}
	var (
		st   byte
		ver  uint64
		body []byte
	)
	if r.op == opSetBatch {
		st, body = o.applyBatch(sh, p.shard, &r)
	} else {
		st, ver, body = o.apply(sh, p, &r)
		if r.op != opReserve {
			o.count(st)
		}
	}
	o.afterWrite(sh)
	reply := appendReply(nil, st, ver, body)
	// A failed write's outcome is unknown to the owner too: a copy of
	// the request sent again hears that, and is not applied again.
	o.repMu <- struct{}{}
	o.replies.put(k, reply, time.Now())
	<-o.repMu
	return reply, nil
}

// count adds a write's result to the owner's counters.
func (o *Owner) count(st byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch st {
	case stOK:
		o.stats.Writes++
	case stFailed:
		o.stats.Failed++
	default:
		o.stats.Refused++
	}
}

// apply executes a write on a locked shard. A key whose value has
// expired is absent: its value is freed first.
func (o *Owner) apply(sh *shard, p place, r *request) (st byte, ver uint64, body []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*o.cfg.WriteTimeout)
	defer cancel()
	if gen := o.generation(); sh.dirty || sh.gen != gen {
		if err := o.load(ctx, sh); err != nil {
			o.log.Warn("kv: reloading a shard after a failed write", "shard", sh.id, "err", err)
			return stFailed, 0, nil
		}
	}
	o.endReservations(sh, time.Now())
	now := time.Now().UnixNano()
	i, found := sh.idx[string(r.key)]
	if found && expired(sh.exp[i], now) {
		if st, _, _ := o.expire(ctx, sh, i); st != stOK {
			return st, 0, nil
		}
		found = false
	}
	var cur bucket
	if found {
		cur = sh.b[i]
	}
	val, m := r.val, meta{flags: r.flags}
	if r.ttl > 0 {
		m.exp = now + r.ttl
	}
	var (
		pre  *reservation // a value the client wrote (opPublish)
		preN int          // its record's length
	)
	switch r.op {
	case opReserve:
		return o.reserve(sh, r, time.Now())
	case opPublish:
		if pre, preN, m, st = o.publishReserved(sh, r, time.Now()); st != stOK {
			return st, 0, nil
		}
		val = nil
	case opSet:
	case opAdd:
		if found {
			return stExists, cur.ver, nil
		}
	case opReplace:
		if !found {
			return stNotFound, 0, nil
		}
	case opCAS:
		if !found {
			return stNotFound, 0, nil
		}
		if cur.ver != r.ver {
			return stExists, cur.ver, nil
		}
	case opDelete:
		if !found {
			return stNotFound, 0, nil
		}
		return o.publish(ctx, sh, i, bucket{hash: p.hash, ver: sh.nextVer}, nil, meta{}, r.key)
	case opIncr, opAppend, opPrepend, opTouch:
		if !found {
			return stNotFound, 0, nil
		}
		if st, val, m, body = o.modify(ctx, sh, cur, r, m); st != stOK {
			return st, cur.ver, nil
		}
	default:
		return stBad, 0, nil
	}
	if len(val) > o.l.MaxValue(len(r.key)) {
		return stTooLarge, 0, nil
	}
	if !found {
		// A full table grows at once, when it may.
		if i = o.free(sh, p); i < 0 && o.mayGrow(sh) {
			if !o.growNow(ctx, sh) {
				sh.freeReserved(pre)
				return stFailed, 0, nil // a pool write failed: nothing applied
			}
			i = o.free(sh, p)
		}
		if i < 0 {
			sh.freeReserved(pre)
			return stFull, 0, nil
		}
	}
	if pre != nil {
		st, ver, _ = o.publish(ctx, sh, i, bucket{hash: p.hash, ver: pre.ver, addr: pre.addr, len: uint32(preN)}, nil, m, r.key)
		if st != stOK {
			// The bucket may hold it: the shard's next load tells.
			sh.parked = append(sh.parked, parked{addr: pre.addr, n: preN, at: time.Now()})
			return st, ver, nil
		}
		o.mu.Lock()
		o.stats.OneSided++
		o.mu.Unlock()
		// The next slot of the class, so that the client's next such
		// value needs no reservation of its own.
		if g, gst := o.reserveSlot(sh, r.client, pre.n, time.Now()); gst == stOK {
			body = appendGrant(nil, g)
		}
		return st, ver, body
	}
	st, ver, _ = o.publish(ctx, sh, i, bucket{hash: p.hash, ver: sh.nextVer}, val, m, r.key)
	return st, ver, body
}

// modify computes the new value and meta of a write that changes the
// present value cur: Incr, Append, Prepend (which keep its expiry and
// flags) or Touch (which keeps its value and flags and takes m's
// expiry).
func (o *Owner) modify(ctx context.Context, sh *shard, cur bucket, r *request, m meta) (st byte, val []byte, nm meta, body []byte) {
	old, err := o.value(ctx, sh, cur)
	if err != nil {
		return stFailed, nil, meta{}, nil
	}
	switch r.op {
	case opIncr:
		n, err := strconv.ParseInt(string(bytes.TrimSpace(old.val)), 10, 64)
		sum := n + r.delta
		if err != nil || (r.delta > 0 && sum < n) || (r.delta < 0 && sum > n) {
			return stNotInt, nil, meta{}, nil
		}
		val = strconv.AppendInt(nil, sum, 10)
		return stOK, val, old.m, val
	case opAppend:
		return stOK, append(bytes.Clone(old.val), r.val...), old.m, nil
	case opPrepend:
		return stOK, append(bytes.Clone(r.val), old.val...), old.m, nil
	}
	return stOK, bytes.Clone(old.val), meta{exp: m.exp, flags: old.m.flags}, nil // opTouch
}

// expire frees the expired value of bucket i: the key becomes a deleted
// one.
func (o *Owner) expire(ctx context.Context, sh *shard, i int) (byte, uint64, []byte) {
	st, ver, body := o.publish(ctx, sh, i, bucket{hash: sh.b[i].hash, ver: sh.nextVer}, nil, meta{}, []byte(sh.keys[i]))
	if st == stOK {
		o.mu.Lock()
		o.stats.Expired++
		o.mu.Unlock()
	}
	return st, ver, body
}

// finishCutChains, in an erasure-coded key space, puts right the rows
// of shard sh whose write chain was cut short (ec.Volume.Repair): such a
// chain can be finished by sending it again only while the memory nodes
// remember it, and the shard may not be written again before that.
func (o *Owner) finishCutChains(ctx context.Context, sh *shard) {
	if o.mem.vol == nil || o.mem.vol.Unsure() == 0 {
		return
	}
	o.mu.Lock()
	w := o.fencedWritesLocked()
	o.mu.Unlock()
	if w == nil {
		return
	}
	for _, sp := range o.l.shardSpans(sh.id) {
		w.vol.Repair(ctx, int64(sp[0]), int64(sp[1]))
		sh.gate.Pass()
	}
}

// sweepBuckets is the buckets of each shard the sweep looks at per
// Check interval: a shard of Buckets buckets is swept in
// Buckets/sweepBuckets intervals.
const sweepBuckets = 256

// sweepExpired frees the expired values among the next sweepBuckets
// buckets of each shard. First, in a key space with redundancy, it
// loads each shard the owner has not read since it took the rank or
// since a write of it failed (Owner.load makes its copies or parity
// agree), so that no shard waits for a write to be repaired.
func (o *Owner) sweepExpired(ctx context.Context) {
	for _, sh := range o.shards {
		select {
		case sh.lock <- struct{}{}:
		case <-ctx.Done():
			return
		}
		sh.gate.Pass()
		now := time.Now().UnixNano()
		_, serving := o.lease(time.Now())
		wctx, cancel := context.WithTimeout(ctx, 4*o.cfg.WriteTimeout)
		if serving && o.redundant() && (sh.dirty || sh.gen != o.generation()) && o.raiseFence(sh) == nil {
			// Taken over, or its last write failed: in a key space with
			// redundancy the shard is read (and its copies or parity
			// made to agree) now, not at its next write.
			if err := o.load(wctx, sh); err != nil {
				o.log.Warn("kv: loading a shard", "shard", sh.id, "err", err)
			}
		}
		current := serving && sh.gen == o.generation()
		o.endReservations(sh, time.Now())
		if current && !sh.dirty {
			o.finishCutChains(wctx, sh)
		}
		for range min(sweepBuckets, len(sh.b)) {
			i := sh.sweep
			sh.sweep = (sh.sweep + 1) % len(sh.b)
			if current && !sh.dirty && sh.b[i].live() && expired(sh.exp[i], now) {
				o.expire(wctx, sh, i)
			}
		}
		if current && !sh.dirty {
			o.growStep(wctx, sh, sweepGrowChunks)
		}
		cancel()
		<-sh.lock
	}
}

// redundant reports whether the key space keeps its bytes twice or
// erasure-coded: what a shard's last writer left may then disagree
// between copies or with the parity (Owner.load).
func (o *Owner) redundant() bool { return o.mem.vol != nil || o.reg.Spec().Replicas > 1 }

// free is the first bucket on p's probe path that holds no live key,
// or -1.
func (o *Owner) free(sh *shard, p place) int { return o.freeIn(sh.b, p.hash) }

// freeIn is the first bucket of table b on the probe path of hash h
// that holds no live key, or -1.
func (o *Owner) freeIn(b []bucket, h uint64) int {
	n := len(b)
	home := o.l.home(h, n)
	for k := range n {
		if i := (home + k) % n; !b[i].live() {
			return i
		}
	}
	return -1
}

// value reads the live record of bucket b of locked shard sh.
func (o *Owner) value(ctx context.Context, sh *shard, b bucket) (record, error) {
	rec := make([]byte, b.len)
	err := o.mem.readAt(ctx, rec, b.addr)
	sh.gate.Pass()
	if err != nil {
		return record{}, err
	}
	r, err := parseRecord(rec)
	if err == nil && r.ver != b.ver {
		err = errTorn
	}
	return r, err
}

// publish makes bucket i of sh nb: with a value (val non-nil) written
// first into a fresh slot, or a tombstone. The old value's slot is freed
// once the bucket is written.
func (o *Owner) publish(ctx context.Context, sh *shard, i int, nb bucket, val []byte, m meta, key []byte) (byte, uint64, []byte) {
	old := sh.b[i]
	if val != nil {
		rec := appendRecord(nil, nb.ver, m, key, val)
		addr, ok := sh.heap.alloc(len(rec))
		if !ok {
			return stFull, 0, nil
		}
		wctx, cancel := context.WithTimeout(ctx, o.cfg.WriteTimeout)
		err := o.write(wctx, sh, rec, addr)
		cancel()
		if err != nil {
			sh.heap.free(addr, len(rec))
			o.log.Warn("kv: writing a value failed", "shard", sh.id, "err", err)
			return stFailed, 0, nil
		}
		nb.addr, nb.len = addr, uint32(len(rec))
	}
	sh.nextVer++ // never reused, whatever the write's outcome
	// A bigger table being written gets the bucket first, so that it
	// never shows a value older than the table in use does.
	o.mirror(ctx, sh, key, nb, m.exp)
	var p [BucketBytes]byte
	nb.putTag(p[:], sh.tab.tag)
	wctx, cancel := context.WithTimeout(ctx, o.cfg.WriteTimeout)
	err := o.write(wctx, sh, p[:], o.l.tableAddr(sh.id, sh.tab.gen, i))
	cancel()
	if err != nil {
		// The bucket may or may not have changed: learn which from the
		// region before the next write.
		sh.dirty, sh.dirtyAt = true, time.Now()
		o.log.Warn("kv: publishing a bucket failed; the shard is read again before its next write", "shard", sh.id, "err", err)
		return stFailed, 0, nil
	}
	if old.live() {
		sh.heap.free(old.addr, int(old.len))
	}
	sh.b[i] = nb
	sh.exp[i] = m.exp
	if nb.live() {
		sh.idx[string(key)] = i
		sh.keys[i] = string(key)
	} else {
		delete(sh.idx, string(key))
		sh.keys[i] = ""
	}
	return stOK, nb.ver, nil
}

// write writes p at off in the key space's region or its coded volume,
// fenced by the owner's token. A write that reached fewer copies
// or shards than the key space keeps, because a memory node is dead
// (pool.ErrDegraded), wrote the data: it succeeds, and is counted. A
// write refused for its fence (pool.ErrFenced) was not applied: the
// owner lost its rank to a newer holder, or must raise its fence again
// (fenced).
func (o *Owner) write(ctx context.Context, sh *shard, p []byte, off uint64) error {
	end, ok := o.lease(time.Now())
	o.mu.Lock()
	w, hook := o.fencedWritesLocked(), o.beforeWrite
	if !ok || w == nil {
		o.stats.LeaseLapsed++
		o.mu.Unlock()
		return errLeaseLapsed
	}
	o.mu.Unlock()
	// The write ends when the lease does: after that another process
	// may hold the rank.
	ctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	if hook != nil {
		ctx = hook(ctx, off, len(p))
	}
	err := w.writeAt(ctx, p, off)
	sh.gate.Pass()
	if errors.Is(err, pool.ErrFenced) {
		o.fenced(err)
		return err
	}
	if err != nil && !time.Now().Before(end) {
		o.mu.Lock()
		o.stats.LeaseLapsed++
		o.mu.Unlock()
		return fmt.Errorf("%w: %w", errLeaseLapsed, err)
	}
	if errors.Is(err, pool.ErrDegraded) {
		o.mu.Lock()
		o.stats.Degraded++
		o.mu.Unlock()
		return nil
	}
	return err
}
