package kv

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/ndma/ndma/pool"
)

// One-sided values. A large value sent inline crosses the network twice
// (client to owner, owner to the memory nodes) and passes through the
// owner's process. From ClientConfig.OneSidedFrom bytes on, Set writes
// the value record itself into a slot of the shard's heap the key's
// owner reserved for it, one-sidedly and under the owner's fence, and
// then asks the owner to publish it (opPublish), which writes the
// bucket as for any write. The value's bytes cross the network once and
// never pass through the owner.
//
// A reservation (opReserve) is a slot of one size class in one shard,
// with the version its value will have (versions are unique in a shard;
// they are not ordered per key: a value published after another write
// to its key may carry a lower version than the one it replaces). Each
// publish is answered with the next slot of the same class and shard
// (a spare), so that a client writing such values steadily asks for
// none: a Set then takes the one-sided write and one round trip to the
// owner, as many as inline.
//
// The owner keeps a reservation until it is published or until its
// time (the write timeout) runs out; the slot is freed FenceMargin after
// that, when no datagram of the client's write can still be on its way
// (the client stops writing when the time runs out, as it measures it
// from before it asked). A new holder of the rank raises a higher fence,
// so a write of a reservation it never made is refused by the memory
// nodes. A reservation is refused (the value goes inline) in an
// erasure-coded key space (a row has one writer), and past the bounds
// below; publishing one that is gone is refused too (the client writes
// the value again, inline). A publish comes after the client's write
// was acknowledged whole: a memory node answers a copy of one of its
// datagrams from its reply cache rather than applying it again, so the
// slot of a value that is not published after all (its key's table
// full) is free at once.

// Requests of one-sided values.
const (
	// opReserve asks for a slot of the shard of the request's key for a
	// record of the length the value field gives (u32). The reply's
	// body is a grant (appendGrant).
	opReserve = 13
	// opPublish publishes a record the client wrote into a reserved
	// slot under the request's key: the value field is the reservation
	// (u64), the record's length (u32) and its expiry (i64, Unix ns, 0:
	// none); the flags are the request's. The reply's body is a spare
	// grant of the same class, or empty.
	opPublish = 14
)

// publishReqLen is an opPublish request's value.
const publishReqLen = 8 + 4 + 8

// Statuses of one-sided values.
const (
	// stInline: this owner takes no one-sided value now (an
	// erasure-coded key space, or too many reservations): send the
	// value inline.
	stInline = 11
	// stRetry: the reservation is gone (its time ran out, or the owner
	// took the shard again) or does not fit the record: nothing
	// published; write the value again.
	stRetry = 12
)

// Bounds of an owner's reservations.
const (
	// MaxReservations bounds the reservations an owner keeps.
	MaxReservations = 1024
	// MaxClientReservations bounds those of one client.
	MaxClientReservations = 64
	// reservedShare is the share of a shard's heap reservations may
	// hold (1/reservedShare).
	reservedShare = 8
	// maxSpares bounds the spare grants a client keeps.
	maxSpares = 32
)

// DefaultOneSidedFrom is the value size from which Set writes a value
// one-sidedly when ClientConfig.OneSidedFrom is zero: measured on
// loopback, from 16 KiB on a SET is no slower one-sided and the store's
// processes spend less CPU on it (docs/BENCHMARKS.md, "Key-value
// store").
const DefaultOneSidedFrom = 16 << 10

// grantLen is a grant's bytes.
const grantLen = 8 + 8 + 4 + 8 + 8 + 8

// grant is a reserved slot as the owner hands it out: where it is, the
// version its value gets, the fence to write under, the reservation's
// id, and how long it stays (ttl, from when the owner took the request).
type grant struct {
	addr  uint64
	ver   uint64
	fence pool.Fence
	id    uint64
	ttl   time.Duration
}

func appendGrant(b []byte, g *grant) []byte {
	le := binary.LittleEndian
	b = le.AppendUint64(b, g.addr)
	b = le.AppendUint64(b, g.ver)
	b = le.AppendUint32(b, g.fence.ID)
	b = le.AppendUint64(b, g.fence.Token)
	b = le.AppendUint64(b, g.id)
	return le.AppendUint64(b, uint64(g.ttl))
}

func parseGrant(b []byte) (grant, error) {
	if len(b) != grantLen {
		return grant{}, fmt.Errorf("%w: a reservation of %d bytes", ErrBadRequest, len(b))
	}
	le := binary.LittleEndian
	g := grant{addr: le.Uint64(b), ver: le.Uint64(b[8:]), fence: pool.Fence{ID: le.Uint32(b[16:]), Token: le.Uint64(b[20:])},
		id: le.Uint64(b[28:]), ttl: time.Duration(le.Uint64(b[36:]))}
	if g.ttl <= 0 || g.fence.Token == 0 || g.ver == 0 {
		return grant{}, fmt.Errorf("%w: a reservation without time, fence or version", ErrBadRequest)
	}
	return g, nil
}

// reservation is a slot an owner handed a client for a value.
type reservation struct {
	client uint64
	addr   uint64
	n      int // bytes asked for: the slot is of their class
	ver    uint64
	until  time.Time // the client writes no longer
}

// parked is a slot of a reservation that ended unpublished: freed once
// no write of it can still arrive.
type parked struct {
	addr uint64
	n    int
	at   time.Time
}

// reserveSlot reserves a slot of shard sh (locked and loaded) for a
// record of n bytes for client, or returns the status to answer.
func (o *Owner) reserveSlot(sh *shard, client uint64, n int, now time.Time) (*grant, byte) {
	o.mu.Lock()
	f := o.fence
	full := o.reserved >= MaxReservations || o.reservedBy[client] >= MaxClientReservations
	o.mu.Unlock()
	if o.mem.vol != nil || f.Token == 0 || full || sh.reservedBytes+uint64(n) > sh.heap.page*uint64(sh.heap.pages)/reservedShare {
		return nil, stInline
	}
	addr, ok := sh.heap.alloc(n)
	if !ok {
		return nil, stFull
	}
	id := o.resvID.Add(1)
	res := &reservation{client: client, addr: addr, n: n, ver: sh.nextVer, until: now.Add(o.cfg.WriteTimeout)}
	sh.nextVer++ // the value's, never reused
	if sh.resv == nil {
		sh.resv = make(map[uint64]*reservation)
	}
	sh.resv[id] = res
	sh.reservedBytes += uint64(n)
	o.mu.Lock()
	o.reserved++
	o.reservedBy[client]++
	o.stats.Reserved++
	o.mu.Unlock()
	return &grant{addr: addr, ver: res.ver, fence: f, id: id, ttl: o.cfg.WriteTimeout}, stOK
}

// reserve serves an opReserve for shard sh (locked and loaded).
func (o *Owner) reserve(sh *shard, r *request, now time.Time) (byte, uint64, []byte) {
	if len(r.val) != 4 {
		return stBad, 0, nil
	}
	n := int(binary.LittleEndian.Uint32(r.val))
	if n < recordLen(len(r.key), 0) || n > int(o.l.PageBytes) {
		return stTooLarge, 0, nil
	}
	g, st := o.reserveSlot(sh, r.client, n, now)
	if st != stOK {
		return st, 0, nil
	}
	return stOK, g.ver, appendGrant(nil, g)
}

// takeReservation removes reservation id of shard sh and returns it (nil
// if there is none).
func (o *Owner) takeReservation(sh *shard, id uint64) *reservation {
	res := sh.resv[id]
	if res == nil {
		return nil
	}
	delete(sh.resv, id)
	sh.reservedBytes -= uint64(res.n)
	o.mu.Lock()
	o.reserved--
	if o.reservedBy[res.client]--; o.reservedBy[res.client] <= 0 {
		delete(o.reservedBy, res.client)
	}
	o.mu.Unlock()
	return res
}

// publishReserved serves an opPublish for shard sh (locked and
// loaded): it takes the reservation the request names and returns it
// with the record's length and meta, or returns the status to answer at
// once. The value is published whatever was written to the key
// meanwhile: a Set takes effect when it is published.
func (o *Owner) publishReserved(sh *shard, r *request, now time.Time) (*reservation, int, meta, byte) {
	if len(r.val) != publishReqLen {
		return nil, 0, meta{}, stBad
	}
	le := binary.LittleEndian
	id, n, exp := le.Uint64(r.val), int(le.Uint32(r.val[8:])), int64(le.Uint64(r.val[12:]))
	res := sh.resv[id]
	if res == nil || res.client != r.client {
		return nil, 0, meta{}, stRetry
	}
	if n < recordLen(len(r.key), 0) || n > int(o.l.PageBytes) || classOf(n) != classOf(res.n) || exp < 0 {
		// Not a record this slot holds: the reservation stays, for
		// its time.
		return nil, 0, meta{}, stBad
	}
	o.takeReservation(sh, id)
	if !now.Before(res.until) {
		// Too late: the client stopped writing, and may not have
		// finished. The slot is freed once no write can still land.
		sh.parkReserved(res)
		return nil, 0, meta{}, stRetry
	}
	return res, n, meta{exp: exp, flags: r.flags}, stOK
}

// parkReserved parks the slot of reservation res (nil: none), taken
// for a publish whose bucket write failed (the bucket may hold it: the
// shard's next load tells), or whose time ran out.
func (sh *shard) parkReserved(res *reservation) {
	if res != nil {
		sh.parked = append(sh.parked, parked{addr: res.addr, n: res.n, at: time.Now()})
	}
}

// freeReserved frees the slot of reservation res (nil: none), taken
// for a publish that wrote no bucket.
func (sh *shard) freeReserved(res *reservation) {
	if res != nil {
		sh.heap.free(res.addr, res.n)
	}
}

// endReservations ends the reservations of shard sh whose time ran
// out, and frees the slots of those ended FenceMargin ago.
func (o *Owner) endReservations(sh *shard, now time.Time) {
	// (In the order of their ids: the slots freed are handed out again
	// in that order, which a simulation's replay must repeat.)
	for _, id := range slices.Sorted(maps.Keys(sh.resv)) {
		if res := sh.resv[id]; !now.Before(res.until) {
			o.takeReservation(sh, id)
			sh.parked = append(sh.parked, parked{addr: res.addr, n: res.n, at: res.until})
			o.mu.Lock()
			o.stats.ReservationsExpired++
			o.mu.Unlock()
		}
	}
	keep := sh.parked[:0]
	for _, pk := range sh.parked {
		if now.Sub(pk.at) >= FenceMargin {
			sh.heap.free(pk.addr, pk.n)
		} else {
			keep = append(keep, pk)
		}
	}
	clear(sh.parked[len(keep):])
	sh.parked = keep
}

// dropReservations forgets every reservation of shard sh, and the
// parked slots, when it is loaded under a new registration: the new
// fence refuses their writes, and the loaded heap holds only published
// values.
func (o *Owner) dropReservations(sh *shard) {
	for id := range sh.resv {
		o.takeReservation(sh, id)
	}
	sh.parked = nil
}

// keepReserved adds the slots of shard sh's reservations and parked
// slots to used (the slots of the values its buckets hold), and raises
// its next version past theirs, when it is loaded again under the same
// fence: a write of a reservation may still land. A parked slot a
// bucket holds (its publish failed after the bucket was written) is the
// value's now.
func (sh *shard) keepReserved(used map[uint64]int) {
	for _, res := range sh.resv {
		used[res.addr] = res.n
		sh.nextVer = max(sh.nextVer, res.ver+1)
	}
	keep := sh.parked[:0]
	for _, pk := range sh.parked {
		if _, live := used[pk.addr]; !live {
			used[pk.addr] = pk.n
			keep = append(keep, pk)
		}
	}
	clear(sh.parked[len(keep):])
	sh.parked = keep
}

// spareKey names spare grants: their shard and size class. A client
// keeps several of one key when it writes such values concurrently
// (each publish brings one).
type spareKey struct{ shard, class int }

// spare is a grant a client keeps for a next value of that shard and
// class, and when its time runs out (measured from before the request
// that brought it).
type spare struct {
	g     grant
	until time.Time
}

// takeSpare returns a spare grant for k with at least half its time
// left, and forgets it (and those with less).
func (c *Client) takeSpare(k spareKey, now time.Time) (grant, time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for sps := c.spares[k]; len(sps) > 0; sps = c.spares[k] {
		sp := sps[len(sps)-1]
		if len(sps) == 1 {
			delete(c.spares, k)
		} else {
			c.spares[k] = sps[:len(sps)-1]
		}
		c.nspares--
		if sp.until.Sub(now) >= sp.g.ttl/2 {
			return sp.g, sp.until, true
		}
		// (Its owner lets it go when its time runs out.)
	}
	return grant{}, time.Time{}, false
}

// putSpare keeps a spare grant for k, unless the client keeps
// maxSpares already (its owner lets it go when its time runs out).
func (c *Client) putSpare(k spareKey, g grant, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nspares >= maxSpares {
		return
	}
	if c.spares == nil {
		c.spares = make(map[spareKey][]spare)
	}
	c.spares[k] = append(c.spares[k], spare{g, until})
	c.nspares++
}

// setOneSided stores val under key by a one-sided write into a
// reserved slot (a spare, or one it asks for) and a publish. It reports
// false, with nothing written, when the value should go inline instead
// (the owner refused the reservation, or it was lost before its publish
// applied).
func (c *Client) setOneSided(ctx context.Context, key, val []byte, o SetOptions) (uint64, bool, error) {
	shard := c.l.place(key).shard
	n := recordLen(len(key), len(val))
	k := spareKey{shard, classOf(n)}
	start := time.Now()
	g, until, ok := c.takeSpare(k, start)
	if !ok {
		c.st.reservations.Add(1)
		body, _, err := c.writeShard(ctx, shard, &request{op: opReserve, key: key, val: binary.LittleEndian.AppendUint32(nil, uint32(n))})
		switch {
		case errors.Is(err, errInline), errors.Is(err, ErrUnknownOutcome):
			// (No reservation is known to exist: nothing is published.)
			return 0, false, nil
		case err != nil:
			return 0, true, err
		}
		if g, err = parseGrant(body); err != nil {
			return 0, true, err
		}
		// The owner keeps the slot for g.ttl from when it took the
		// request, which is after start.
		until = start.Add(g.ttl)
	}
	var exp int64
	if o.TTL > 0 {
		exp = time.Now().Add(o.TTL).UnixNano()
	}
	rec := appendRecord(nil, g.ver, meta{exp: exp, flags: o.Flags}, key, val)
	wctx, cancel := context.WithDeadline(ctx, until)
	_, err := c.reg.Fenced(g.fence).WriteAtContext(wctx, rec, int64(g.addr))
	cancel()
	if err != nil && !errors.Is(err, pool.ErrDegraded) {
		if ctx.Err() != nil {
			return 0, true, ctx.Err()
		}
		return 0, false, nil // the slot is the owner's again in time
	}
	pub := binary.LittleEndian.AppendUint64(nil, g.id)
	pub = binary.LittleEndian.AppendUint32(pub, uint32(n))
	pub = binary.LittleEndian.AppendUint64(pub, uint64(exp))
	start = time.Now()
	body, nv, err := c.writeShard(ctx, shard, &request{op: opPublish, key: key, val: pub, flags: o.Flags})
	if errors.Is(err, errInline) {
		return 0, false, nil
	}
	if err == nil {
		c.st.oneSided.Add(1)
		if sg, perr := parseGrant(body); perr == nil {
			c.putSpare(k, sg, start.Add(sg.ttl))
		}
	}
	return nv, true, err
}

// errInline is writeShard's error for stInline and stRetry: the value
// goes inline.
var errInline = errors.New("kv: write the value inline")
