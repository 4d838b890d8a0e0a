package kv

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/wire"
)

// Create makes a key space of layout l: a pool region of l.Size() bytes
// (shaped by o; its stripe must be a multiple of 32 bytes) with the
// header written. Start its owners (StartOwner) on the region.
//
// With l.Code set the key space is erasure-coded: the region is a
// pool/ec volume of l.Code.K+l.Code.M columns whose stripe is
// l.Code.Shard, holding (K+M)/K times l.Size() bytes; o may leave
// Stripe, Columns and Replicas zero (or give the same shape).
func Create(ctx context.Context, pc *pool.Client, l Layout, o pool.AllocOptions) (*pool.Region, error) {
	if err := l.Check(); err != nil {
		return nil, err
	}
	if l.Code.coded() {
		return createCoded(ctx, pc, l, o)
	}
	if o.Stripe%BucketBytes != 0 {
		return nil, fmt.Errorf("%w: a stripe of %d bytes is not a multiple of %d", ErrBadLayout, o.Stripe, BucketBytes)
	}
	reg, err := pc.Alloc(ctx, l.Size(), o)
	if err != nil {
		return nil, fmt.Errorf("kv: creating a key space of %d bytes: %w", l.Size(), err)
	}
	if _, err := reg.WriteAtContext(ctx, appendHeader(nil, l), 0); err != nil {
		_ = pc.Free(ctx, reg)
		return nil, fmt.Errorf("kv: writing the key space header: %w", err)
	}
	return reg, nil
}

// ClientConfig configures a client.
type ClientConfig struct {
	Switch string
	Fabric endpoint.FabricOptions
	Space  string
	// CacheEntries bounds the client's cache of where keys' buckets
	// are (zero: DefaultCacheEntries; negative: no cache). A GET of a
	// cached key reads its bucket and its value at once, one round
	// trip instead of two.
	CacheEntries int
	// OneSidedFrom is the value size from which Set writes a value
	// one-sidedly into space its owner reserves, rather than sending it
	// inline (zero: DefaultOneSidedFrom; negative: never). Erasure-coded
	// key spaces take values inline only.
	OneSidedFrom int
}

// Client reads a key space one-sidedly and sends its writes to the
// owners. Safe for concurrent use.
type Client struct {
	ep  *endpoint.Endpoint
	cfg ClientConfig
	reg *pool.Region
	mem store // reg, or the erasure-coded volume in it
	l   Layout
	id  uint64 // this client, in the owners' reply tables
	mu  sync.Mutex
	inc map[int]uint64 // owner rank: the incarnation last heard of
	// The requests in flight: win[i] tells whether request base+i is
	// finished; requests before base all are (the done mark is base-1).
	win  []bool
	base uint64
	loc  locCache
	st   clientCounters
	// tabs is, per shard, the table descriptor last read (generation
	// in the high 32 bits, tag in the low): only in a key space whose
	// tables grow.
	tabs []atomic.Uint64
	// spares are the grants of reserved slots the client keeps for its
	// next one-sided values (onesided.go), nspares their number, under
	// mu.
	spares  map[spareKey][]spare
	nspares int
	// corrupt are the entries whose values GETs found corrupt lately
	// (ErrCorrupt).
	corrupt corruptEntries
}

// newClient is a client of the key space cfg names, with its own id,
// before it knows the key space's region.
func newClient(ep *endpoint.Endpoint, cfg ClientConfig) *Client {
	c := &Client{ep: ep, cfg: cfg, inc: make(map[int]uint64)}
	for c.id == 0 {
		c.id = rand.Uint64()
	}
	return c
}

// Open asks an owner of the key space for its region, opens it and reads
// its layout.
func Open(ctx context.Context, ep *endpoint.Endpoint, pc *pool.Client, cfg ClientConfig) (*Client, error) {
	c := newClient(ep, cfg)
	c.loc.init(cfg.CacheEntries)
	var resp []byte
	var err error
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		resp, err = c.send(ctx, 0, &request{op: opMeta})
		if err == nil || !ownerPending(err) {
			break
		}
		if serr := sleep(ctx, wait); serr != nil {
			err = errors.Join(serr, err)
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("kv: asking the owners of %q: %w", cfg.Space, err)
	}
	st, _, body, err := parseReply(resp)
	if err != nil {
		return nil, err
	}
	if err := statusErr(st); err != nil {
		return nil, fmt.Errorf("kv: asking the owners of %q: %w", cfg.Space, err)
	}
	if len(body) != 12 {
		return nil, fmt.Errorf("%w: key space description of %d bytes", ErrBadRequest, len(body))
	}
	if c.reg, err = pc.Open(ctx, binary.LittleEndian.Uint32(body), binary.LittleEndian.Uint64(body[4:])); err != nil {
		return nil, fmt.Errorf("kv: opening key space %q: %w", cfg.Space, err)
	}
	if c.l, c.mem, err = openStore(ctx, c.reg); err != nil {
		return nil, err
	}
	if c.l.growable() {
		c.tabs = make([]atomic.Uint64, c.l.Shards)
	}
	return c, nil
}

// ownerPending reports whether err says no owner serves yet: none has
// registered, the one asked is busy, or the switch counted it dead (a
// standby takes its rank over, or it registers again). For Open's
// question only: a write failed with StatusMemberDead may have been
// applied (the switch fails what it forwarded to an owner it counts
// dead).
func ownerPending(err error) bool {
	return errors.Is(err, wire.StatusNotMember) || errors.Is(err, wire.StatusBusy) || errors.Is(err, wire.StatusMemberDead)
}

// Layout is the key space's geometry.
func (c *Client) Layout() Layout { return c.l }

// MaxValue is the largest value a key of klen bytes may have.
func (c *Client) MaxValue(klen int) int { return c.l.MaxValue(klen) }

// probeWindow is the buckets a GET reads at once.
const probeWindow = 8

// maxTorn bounds the reads of one GET that find torn data before it
// fails: writes to the key are coming faster than the key can be read.
const maxTorn = 1000

// ErrContended is returned by Get when every read of the key, maxTorn of
// them, raced a write to it.
var ErrContended = errors.New("kv: key rewritten during every read")

// ErrCorrupt is returned by Get when the value the key's entry points at
// does not check (its checksum, key or version) read after read while
// the entry stays the same: not a write racing the read (a value's
// space is reused only once no entry points at it) but a value written
// wrong, by a client that published space it did not fill, or damaged.
// The key reads again once it is written anew.
var ErrCorrupt = errors.New("kv: the key's value does not match its entry")

// A GET takes the key's value for corrupt (ErrCorrupt) when it found it
// so corruptReads times in a row, over at least corruptAfter, pointed at
// by the same entry; the client then answers ErrCorrupt at the first
// such read of that entry for corruptHold (a value that heals, as one
// read from erasure-coded shards while a write to their row is
// finished, reads again after that), remembering at most maxCorrupt
// entries.
const (
	corruptReads = 16
	corruptAfter = 10 * time.Millisecond
	corruptHold  = time.Second
	maxCorrupt   = 64
)

// corruptEntries are the entries whose values a GET found corrupt
// lately: until when each is taken for corrupt.
type corruptEntries struct {
	mu    sync.Mutex
	until map[bucket]time.Time
}

// known reports whether b was found corrupt within corruptHold.
func (e *corruptEntries) known(b bucket, now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.until[b]
	if ok && !now.Before(t) {
		delete(e.until, b)
		ok = false
	}
	return ok
}

// add takes b for corrupt for corruptHold, dropping the entry that
// expires first when maxCorrupt are kept.
func (e *corruptEntries) add(b bucket, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.until == nil {
		e.until = make(map[bucket]time.Time)
	}
	if _, ok := e.until[b]; !ok && len(e.until) >= maxCorrupt {
		var first bucket
		var at time.Time
		for k, t := range e.until {
			if at.IsZero() || t.Before(at) {
				first, at = k, t
			}
		}
		delete(e.until, first)
	}
	e.until[b] = now.Add(corruptHold)
}

// Get reads key's value and version one-sidedly from the memory nodes.
func (c *Client) Get(ctx context.Context, key []byte) ([]byte, uint64, error) {
	it, err := c.GetItem(ctx, key)
	return it.Value, it.Version, err
}

// Item is a key's value as GetItem reads it.
type Item struct {
	Value   []byte
	Version uint64
	// Flags are the 32 bits the last write gave (SetOptions.Flags).
	Flags uint32
	// Expires is when the value expires; the zero Time is never.
	Expires time.Time
}

// GetItem reads key's value, version, flags and expiry one-sidedly from
// the memory nodes. A value whose expiry has passed (by this host's
// clock) is not found.
func (c *Client) GetItem(ctx context.Context, key []byte) (Item, error) {
	if len(key) == 0 || len(key) > MaxKey {
		return Item{}, fmt.Errorf("%w: key of %d bytes (1 to %d)", ErrTooLarge, len(key), MaxKey)
	}
	p := c.l.place(key)
	var (
		bad   bucket // the entry whose value failed to check, same reads in a row
		same  int
		since time.Time
	)
	for range maxTorn {
		r, err := c.getCached(ctx, p, key)
		var tr tornRecord
		if errors.As(err, &tr) {
			now := time.Now()
			if same == 0 || tr.b != bad {
				bad, same, since = tr.b, 0, now
			}
			same++
			if c.corrupt.known(tr.b, now) || same >= corruptReads && now.Sub(since) >= corruptAfter {
				c.corrupt.add(tr.b, now)
				c.st.corrupt.Add(1)
				return Item{}, fmt.Errorf("%w: key %q, version %d, %d bytes at %#x", ErrCorrupt, key, tr.b.ver, tr.b.len, tr.b.addr)
			}
		} else {
			same = 0
		}
		if !errors.Is(err, errTorn) {
			if err != nil {
				return Item{}, err
			}
			if expired(r.m.exp, time.Now().UnixNano()) {
				return Item{}, ErrNotFound
			}
			it := Item{Value: r.val, Version: r.ver, Flags: r.m.flags}
			if r.m.exp != 0 {
				it.Expires = time.Unix(0, r.m.exp)
			}
			return it, nil
		}
		if err := sleep(ctx, 10*time.Microsecond); err != nil {
			return Item{}, err
		}
	}
	return Item{}, ErrContended
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// tabOf is the table descriptor of shard s last read.
func (c *Client) tabOf(s int) tableDesc {
	if c.tabs == nil {
		return tableDesc{}
	}
	v := c.tabs[s].Load()
	return tableDesc{gen: int(v >> 32), tag: uint32(v)}
}

// readTable reads ps[i] at offs[i] from shard s's table of descriptor
// d, all at once; in a key space whose tables grow, the shard's
// descriptor is read with them, and when it names another table than d
// the client keeps it and the read is torn (to be done again).
func (c *Client) readTable(ctx context.Context, s int, d tableDesc, ps [][]byte, offs []uint64) []error {
	var dp [BucketBytes]byte
	if c.tabs != nil {
		ps, offs = append(ps, dp[:]), append(offs, c.l.descAddr(s))
	}
	c.st.reads.Add(uint64(len(ps)))
	errs := c.mem.readVec(ctx, ps, offs)
	if c.tabs == nil {
		return errs
	}
	last := len(errs) - 1
	errs, derr := errs[:last], errs[last]
	if derr == nil {
		var nd tableDesc
		if nd, derr = c.l.parseDesc(dp[:]); derr == nil && !nd.sameTable(d) {
			c.tabs[s].Store(uint64(nd.gen)<<32 | uint64(nd.tag))
			derr = errTorn
		}
	}
	if derr != nil {
		for i := range errs {
			errs[i] = derr
		}
	}
	return errs
}

// get walks the probe path once, in the table of descriptor d (the
// first window is read with the shard's descriptor).
func (c *Client) get(ctx context.Context, p place, key []byte, d tableDesc) (record, error) {
	var win [probeWindow * BucketBytes]byte
	nb := c.l.tableBuckets(d.gen)
	home := c.l.home(p.hash, nb)
	for scanned := 0; scanned < nb; {
		pos := (home + scanned) % nb
		n := min(probeWindow, nb-scanned, nb-pos)
		w := win[:n*BucketBytes]
		off := c.l.tableAddr(p.shard, d.gen, pos)
		var err error
		if scanned == 0 {
			err = c.readTable(ctx, p.shard, d, [][]byte{w}, []uint64{off})[0]
		} else {
			c.st.reads.Add(1)
			err = c.mem.readAt(ctx, w, off)
		}
		if err != nil {
			return record{}, err
		}
		for j := range n {
			b, err := parseBucketTag(w[j*BucketBytes:], d.tag)
			if err != nil {
				return record{}, err
			}
			if b.empty() {
				return record{}, ErrNotFound
			}
			if !b.live() || b.hash != p.hash {
				continue
			}
			r, err := c.readRecord(ctx, b)
			if err != nil {
				return record{}, err
			}
			if bytes.Equal(r.key, key) {
				c.loc.put(key, loc{pos: pos + j, b: b, tag: d.tag})
				return r, nil
			}
		}
		scanned += n
	}
	return record{}, ErrNotFound
}

// readRecord reads and checks the value record bucket b points at.
func (c *Client) readRecord(ctx context.Context, b bucket) (record, error) {
	rec := make([]byte, b.len)
	c.st.reads.Add(1)
	if err := c.mem.readAt(ctx, rec, b.addr); err != nil {
		return record{}, err
	}
	return checkRecord(rec, b)
}

// checkRecord parses rec, read where bucket b points: errTorn unless it
// is a whole record of b's version.
func checkRecord(rec []byte, b bucket) (record, error) {
	r, err := parseRecord(rec)
	if err != nil || r.ver != b.ver {
		return record{}, tornRecord{b}
	}
	return r, nil
}

// SetOptions are a stored value's expiry and flags.
type SetOptions struct {
	// TTL is how long the value lives, from when its owner stores it;
	// zero: until it is overwritten or deleted. Readers compare the
	// expiry with their own clock: hosts' clocks should agree (NTP)
	// to well under the TTLs used.
	TTL time.Duration
	// Flags are 32 bits kept with the value and returned by GetItem
	// (memcached's client flags).
	Flags uint32
}

func (o SetOptions) check() error {
	if o.TTL < 0 {
		return fmt.Errorf("%w: a negative TTL (%v)", ErrBadRequest, o.TTL)
	}
	return nil
}

// Set stores val under key and returns its new version.
func (c *Client) Set(ctx context.Context, key, val []byte) (uint64, error) {
	return c.SetWith(ctx, key, val, SetOptions{})
}

// SetWith stores val under key with the expiry and flags of o.
func (c *Client) SetWith(ctx context.Context, key, val []byte, o SetOptions) (uint64, error) {
	return c.store(ctx, opSet, key, val, 0, o)
}

// Add stores val under key if the key is absent (else ErrExists).
func (c *Client) Add(ctx context.Context, key, val []byte) (uint64, error) {
	return c.AddWith(ctx, key, val, SetOptions{})
}

// AddWith is Add with the expiry and flags of o. An expired key is
// absent.
func (c *Client) AddWith(ctx context.Context, key, val []byte, o SetOptions) (uint64, error) {
	return c.store(ctx, opAdd, key, val, 0, o)
}

// Replace stores val under key if the key is present (else
// ErrNotFound).
func (c *Client) Replace(ctx context.Context, key, val []byte, o SetOptions) (uint64, error) {
	return c.store(ctx, opReplace, key, val, 0, o)
}

// CompareAndSwap stores val under key if the key's version is ver (else
// ErrExists, or ErrNotFound), and returns the new version.
func (c *Client) CompareAndSwap(ctx context.Context, key, val []byte, ver uint64) (uint64, error) {
	return c.CompareAndSwapWith(ctx, key, val, ver, SetOptions{})
}

// CompareAndSwapWith is CompareAndSwap with the expiry and flags of o.
func (c *Client) CompareAndSwapWith(ctx context.Context, key, val []byte, ver uint64, o SetOptions) (uint64, error) {
	return c.store(ctx, opCAS, key, val, ver, o)
}

// Append adds val after key's value (ErrNotFound if absent), keeping its
// expiry and flags.
func (c *Client) Append(ctx context.Context, key, val []byte) (uint64, error) {
	return c.store(ctx, opAppend, key, val, 0, SetOptions{})
}

// Prepend adds val before key's value (ErrNotFound if absent), keeping
// its expiry and flags.
func (c *Client) Prepend(ctx context.Context, key, val []byte) (uint64, error) {
	return c.store(ctx, opPrepend, key, val, 0, SetOptions{})
}

// Touch gives key's value a new time to live (zero: no expiry), keeping
// value and flags; ErrNotFound if the key is absent.
func (c *Client) Touch(ctx context.Context, key []byte, ttl time.Duration) (uint64, error) {
	return c.store(ctx, opTouch, key, nil, 0, SetOptions{TTL: ttl})
}

func (c *Client) store(ctx context.Context, op byte, key, val []byte, ver uint64, o SetOptions) (uint64, error) {
	if err := o.check(); err != nil {
		return 0, err
	}
	if op == opSet && c.oneSided(len(val)) && len(key) > 0 && len(key) <= MaxKey && len(val) <= c.l.MaxValue(len(key)) {
		if nv, done, err := c.setOneSided(ctx, key, val, o); done {
			return nv, err
		}
	}
	_, nv, err := c.write(ctx, &request{op: op, key: key, val: val, ver: ver, ttl: int64(o.TTL), flags: o.Flags})
	return nv, err
}

// oneSided reports whether Set writes a value of n bytes one-sidedly.
func (c *Client) oneSided(n int) bool {
	from := c.cfg.OneSidedFrom
	if from == 0 {
		from = DefaultOneSidedFrom
	}
	return from > 0 && n >= from && c.mem.vol == nil
}

// Delete removes key (ErrNotFound if absent).
func (c *Client) Delete(ctx context.Context, key []byte) error {
	_, _, err := c.write(ctx, &request{op: opDelete, key: key})
	return err
}

// Incr adds delta to key's value, a decimal integer, and returns the sum.
func (c *Client) Incr(ctx context.Context, key []byte, delta int64) (int64, error) {
	body, _, err := c.write(ctx, &request{op: opIncr, key: key, delta: delta})
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(body), 10, 64)
}

func (c *Client) write(ctx context.Context, r *request) ([]byte, uint64, error) {
	if len(r.key) == 0 || len(r.key) > MaxKey {
		return nil, 0, fmt.Errorf("%w: key of %d bytes (1 to %d)", ErrTooLarge, len(r.key), MaxKey)
	}
	if max := c.l.MaxValue(len(r.key)); len(r.val) > max {
		return nil, 0, fmt.Errorf("%w: value of %d bytes (at most %d with this key)", ErrTooLarge, len(r.val), max)
	}
	return c.writeShard(ctx, c.l.place(r.key).shard, r)
}

// writeShard sends write request r to the owner of shard until it
// answers or ctx ends, and returns its answer.
func (c *Client) writeShard(ctx context.Context, shard int, r *request) ([]byte, uint64, error) {
	rank := c.l.owner(shard)
	r.client, r.seq = c.id, c.begin()
	defer c.finish(r.seq)
	sent := false // a copy may have reached an owner
	wait := time.Millisecond
	for {
		c.mu.Lock()
		r.inc = c.inc[rank]
		r.done = c.base - 1
		c.mu.Unlock()
		resp, err := c.send(ctx, uint64(shard), r)
		if err == nil {
			st, ver, body, perr := parseReply(resp)
			switch {
			case perr != nil:
				return nil, 0, perr
			case st == stStale:
				// Another incarnation of the owner: it did not apply
				// this copy; an earlier one may have reached the old
				// incarnation, which is gone.
				c.mu.Lock()
				c.inc[rank] = ver
				c.mu.Unlock()
				if sent {
					return nil, 0, fmt.Errorf("%w: the owner of shard %d restarted", ErrUnknownOutcome, shard)
				}
				continue
			case st == stBusy:
			default:
				return body, ver, statusErr(st)
			}
		} else if !errors.Is(err, wire.StatusNotMember) && !errors.Is(err, wire.StatusBusy) {
			// (StatusMemberDead included: the switch fails a request it
			// had forwarded to an owner it then counted dead.)
			// No answer: this copy may have been applied. Send it
			// again: the owner answers a copy it applied from its
			// table of replies.
			sent = sent || r.inc != 0
		}
		if serr := sleep(ctx, wait); serr != nil {
			if sent {
				return nil, 0, fmt.Errorf("%w: %w", ErrUnknownOutcome, errors.Join(serr, err))
			}
			return nil, 0, fmt.Errorf("kv: no owner of shard %d answers: %w", shard, errors.Join(serr, err))
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// begin numbers a new request.
func (c *Client) begin() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.base == 0 {
		c.base = 1
	}
	c.win = append(c.win, false)
	return c.base + uint64(len(c.win)) - 1
}

// finish marks request seq finished (answered, or given up): once every
// request before it is too, owners may forget their replies.
func (c *Client) finish(seq uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.win[seq-c.base] = true
	n := 0
	for n < len(c.win) && c.win[n] {
		n++
	}
	if n > 0 {
		c.win = c.win[n:]
		c.base += uint64(n)
		if len(c.win) == 0 {
			c.win = nil // let the array go
		}
	}
}

// send sends r once to the owner of shard (by key affinity) and returns
// its reply.
func (c *Client) send(ctx context.Context, shard uint64, r *request) ([]byte, error) {
	return c.ep.Anycast(ctx, c.cfg.Switch, ServiceName(c.cfg.Space), shard, r.append(nil), c.cfg.Fabric)
}
