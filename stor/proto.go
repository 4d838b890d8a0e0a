package stor

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/ndma/ndma/wire"
)

// Requests a storage node serves (first byte of an anycast request or of a
// write group's multicast). The numbers are part of the wire format.
const (
	opInfo     = 1  // node summary
	opCreate   = 2  // JSON Descriptor
	opRemove   = 3  // name; force byte
	opList     = 4  // descriptors the node holds
	opStat     = 5  // name → JSON NodeVolume
	opLease    = 6  // JSON leaseReq → JSON leaseResp
	opJoin     = 7  // JSON joinReq: join a write group
	opRead     = 8  // name, off u64, len u32, minVer u64 → ver u64, data
	opVersions = 9  // name → u64 per extent
	opMissing  = 10 // JSON missingReq: a replica missed writes, or caught up
	// Controller-forwarding mode: a client sends these to a Gateway, which
	// sends opWriteOne/opFlushOne to each replica and opRead to one.
	opWriteOne = 11 // name, holder u64, ver u64, off u64, data: one replica's copy of a write
	opFlushOne = 12 // name, holder u64: make the volume's writes durable on this node
	opGwWrite  = 13 // to a gateway: as opWriteOne, for every replica
	opGwFlush  = 14 // to a gateway: as opFlushOne, for every node of the volume
	opGen      = 15 // JSON genReq: the writer's new data generation
	opForce    = 16 // JSON forceReq: an operator declares this node's copy current
	opCatalog  = 17 // JSON CatalogEntry: record a volume (or its removal) in the node's catalog
	opCatList  = 18 // → JSON []CatalogEntry: the node's catalog
	opEnroll   = 19 // JSON enrollReq: a copy that caught up from this node's joins its generation → JSON members
	opWrite    = 20 // multicast: ver u64, off u64, data
	opFlush    = 21 // multicast: make every write so far durable, then contribute to an aggregation
)

// Code is a storage node's answer to a request (the first byte of every
// reply). The numbers are part of the wire format.
type Code uint8

// Answers.
const (
	CodeOK         Code = 0
	CodeNoVolume   Code = 1  // the node holds no volume of that name
	CodeExists     Code = 2  // a different volume of that name exists
	CodeOutOfRange Code = 3  // offset or length outside the volume, or not held by this node
	CodeStaleEpoch Code = 4  // a lease epoch older than the node's
	CodeLeaseHeld  Code = 5  // another client holds the volume's write lease
	CodeNoSpace    Code = 6  // the node's capacity or disk is full
	CodeIO         Code = 7  // the backing store failed
	CodeBadRequest Code = 8  // a request that does not parse or names nothing valid
	CodeNotReady   Code = 9  // the volume is being resynced on this node, or its copy is older than asked for
	CodeTooLarge   Code = 10 // more bytes than one request carries (MaxIO)
	CodeWrongNode  Code = 11 // a request for another node (a stale service id after a switch restart)
	CodeDenied     Code = 12 // the requester's certified scope is neither the volume's owner nor the storage service's
)

// Errors the client returns for the codes (errors.Is matches them; the
// error also names the node).
var (
	ErrNoVolume   = errors.New("stor: no such volume")
	ErrExists     = errors.New("stor: volume exists with another shape")
	ErrOutOfRange = errors.New("stor: out of range")
	ErrStaleEpoch = errors.New("stor: stale lease epoch")
	ErrLeaseHeld  = errors.New("stor: volume leased by another writer")
	ErrNoSpace    = errors.New("stor: no space on storage node")
	ErrIO         = errors.New("stor: storage node I/O error")
	ErrBadRequest = errors.New("stor: bad request")
	ErrNotReady   = errors.New("stor: replica not ready")
	ErrTooLarge   = errors.New("stor: request too large")
	ErrWrongNode  = errors.New("stor: request reached the wrong node")
	ErrDenied     = errors.New("stor: volume of another scope")
	// ErrNoReplica: no live replica could serve a read or take a write.
	ErrNoReplica = errors.New("stor: no live replica")
	// ErrReadOnly: a write on a volume opened without a lease.
	ErrReadOnly = errors.New("stor: volume opened read-only")
)

var codeErrs = [...]error{
	CodeNoVolume: ErrNoVolume, CodeExists: ErrExists, CodeOutOfRange: ErrOutOfRange,
	CodeStaleEpoch: ErrStaleEpoch, CodeLeaseHeld: ErrLeaseHeld, CodeNoSpace: ErrNoSpace,
	CodeIO: ErrIO, CodeBadRequest: ErrBadRequest, CodeNotReady: ErrNotReady, CodeTooLarge: ErrTooLarge,
	CodeWrongNode: ErrWrongNode, CodeDenied: ErrDenied,
}

// Err is the error for c (nil for CodeOK).
func (c Code) Err() error {
	if c == CodeOK {
		return nil
	}
	if int(c) < len(codeErrs) && codeErrs[c] != nil {
		return codeErrs[c]
	}
	return fmt.Errorf("%w: unknown answer %d", ErrBadRequest, uint8(c))
}

// NodeError is a storage node's refusal.
type NodeError struct {
	Node int
	Op   string
	Code Code
	Msg  string // the node's detail, may be empty
}

func (e *NodeError) Error() string {
	s := fmt.Sprintf("stor: node %d: %s: %v", e.Node, e.Op, e.Code.Err())
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	return s
}

// Unwrap returns the code's error.
func (e *NodeError) Unwrap() error { return e.Code.Err() }

// codeOf maps an error of the node's store to the code it answers.
func codeOf(err error) Code {
	for c, e := range codeErrs {
		if e != nil && errors.Is(err, e) {
			return Code(c)
		}
	}
	return CodeIO
}

// refusal is a reply with code c and an explanation.
func refusal(c Code, msg string) []byte {
	return append([]byte{byte(c)}, msg...)
}

// enc builds a request or reply.
type enc struct{ b []byte }

func (e *enc) u8(v uint8)   { e.b = append(e.b, v) }
func (e *enc) u32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *enc) u64(v uint64) { e.b = binary.BigEndian.AppendUint64(e.b, v) }
func (e *enc) str(s string) {
	e.u8(uint8(len(s)))
	e.b = append(e.b, s...)
}

// dec parses one; any short read sets bad and yields zeros.
type dec struct {
	b   []byte
	bad bool
}

func (d *dec) take(n int) []byte {
	if d.bad || len(d.b) < n {
		d.bad = true
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *dec) u8() uint8 {
	if v := d.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (d *dec) u32() uint32 {
	if v := d.take(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (d *dec) u64() uint64 {
	if v := d.take(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func (d *dec) str() string {
	n := d.u8()
	return string(d.take(int(n)))
}

// readReq is an opRead request.
type readReq struct {
	Name   string
	Off    uint64
	Len    uint32
	MinVer uint64
}

func (r *readReq) append(b []byte) []byte {
	e := enc{b}
	e.u8(opRead)
	e.str(r.Name)
	e.u64(r.Off)
	e.u32(r.Len)
	e.u64(r.MinVer)
	return e.b
}

func parseRead(b []byte) (readReq, bool) {
	d := dec{b: b[1:]}
	r := readReq{Name: d.str(), Off: d.u64(), Len: d.u32(), MinVer: d.u64()}
	return r, !d.bad && len(d.b) == 0
}

// writeHdr is the head of an opWrite multicast; the data follows.
const writeHdr = 1 + 8 + 8

func appendWrite(b []byte, ver, off uint64, data []byte) []byte {
	e := enc{b}
	e.u8(opWrite)
	e.u64(ver)
	e.u64(off)
	return append(e.b, data...)
}

// oneReq is an opWriteOne/opGwWrite (with data) or opFlushOne/opGwFlush
// request.
type oneReq struct {
	Name     string
	Holder   uint64
	Ver, Off uint64
	Data     []byte
}

func (r *oneReq) append(b []byte, op uint8) []byte {
	e := enc{b}
	e.u8(op)
	e.str(r.Name)
	e.u64(r.Holder)
	if op == opWriteOne || op == opGwWrite {
		e.u64(r.Ver)
		e.u64(r.Off)
		e.b = append(e.b, r.Data...)
	}
	return e.b
}

func parseOne(b []byte) (oneReq, bool) {
	op := b[0]
	d := dec{b: b[1:]}
	r := oneReq{Name: d.str(), Holder: d.u64()}
	if op == opWriteOne || op == opGwWrite {
		r.Ver, r.Off = d.u64(), d.u64()
		r.Data = d.b
		d.b = nil
	}
	return r, !d.bad && len(d.b) == 0
}

// draws are a client's or a node's random numbers: from a generator of
// the seed its options give (ClientOptions.Seed, NodeConfig.Seed), so that
// a simulated run replays, or else from the system's.
type draws struct {
	mu sync.Mutex
	r  *rand.Rand // nil: the system's
}

func newDraws(seed uint64) *draws {
	if seed == 0 {
		return &draws{}
	}
	return &draws{r: rand.New(rand.NewPCG(seed, seed^0x5354_4f52))}
}

func (d *draws) uint64() uint64 {
	if d.r == nil {
		return rand.Uint64()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.r.Uint64()
}

// n is a duration in [0, max).
func (d *draws) n(max time.Duration) time.Duration {
	if d.r == nil {
		return rand.N(max)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return time.Duration(d.r.Int64N(int64(max)))
}

// A request the switch answers BUSY (a relay queue is full: retry later)
// or MEMBER_DEAD (the service's member was counted dead, as a node or
// gateway whose heartbeats waited behind its data can be, and registers
// again within a second or two) is sent again after a backoff from
// busyBackoff doubling to busyBackoffMax, until its context ends.
const (
	busyBackoff    = time.Millisecond
	busyBackoffMax = 200 * time.Millisecond
	// deadRetry bounds the resending of MEMBER_DEAD: longer than a
	// member takes to register again.
	deadRetry = 3 * time.Second
)

// retryBusy calls f until it does not fail with wire.StatusBusy (nor,
// with dead, wire.StatusMemberDead: for a service that has other members
// or registers again, not for one node's own service), or ctx ends.
// The backoff's jitter is drawn from r.
func retryBusy(ctx context.Context, r *draws, dead bool, f func() ([]byte, error)) ([]byte, error) {
	wait := busyBackoff
	var deadSince time.Time
	for {
		b, err := f()
		passGate(ctx)
		if err == nil || !errors.Is(err, wire.StatusBusy) && !(dead && errors.Is(err, wire.StatusMemberDead)) {
			return b, err
		}
		if errors.Is(err, wire.StatusMemberDead) {
			if deadSince.IsZero() {
				deadSince = time.Now()
			} else if time.Since(deadSince) > deadRetry {
				return b, err // no member came back
			}
		}
		// Up to twice the backoff, at random, so that clients refused
		// together do not come back together.
		t := time.NewTimer(wait + r.n(wait))
		select {
		case <-ctx.Done():
			t.Stop()
			return b, err
		case <-t.C:
		}
		passGate(ctx)
		wait = min(2*wait, busyBackoffMax)
	}
}
