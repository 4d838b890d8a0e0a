package fabric

// Control messages
//
// A control message is the payload of a packet with opcode CONTROL (0x08):
// requests from an endpoint to the forwarding node, and its responses with
// the header's RESP flag set. They travel reliably through the transport, so
// a message may span several packets. All integers are big-endian.
//
//  0                   1                   2                   3
//  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
// +---------------+---------------+-------------------------------+
// |     Type      |     Flags     |                               |  0
// +---------------+---------------+                               +
// |              Fields of Type, in the order below ...           |
// +---------------------------------------------------------------+
// |                                                               |
// +                                                               +
// |           Tag: HMAC-SHA256(fabric token, every byte           |
// +             from Type to the end of the fields)               +
// |             truncated to its first 16 bytes                   |
// +                                                               +
// |                                                               |
// +---------------------------------------------------------------+
//
// Type: 1 JOIN, 2 LEAVE, 3 DESTROY, 4 HEARTBEAT, 5 REGISTER, 6 LOOKUP,
// 7 POOLNODE, 8 POOLCREATE, 9 POOLOPEN, 10 POOLFREE, 11 POOLSTAT,
// 12 POOLGRANT, 13 POOLREVOKE, 14 POOLREBUILD, 15 POOLREBUILDGO,
// 16 POOLREBUILT, 17 JOINSTATUS.
// Flags: bit 0 RESP (a response); bits 1–7 must be zero.
//
// Field encodings:
//
//	u8, u16, u32, u64  unsigned integers of 1, 2, 4, 8 bytes
//	i32                two's complement, 4 bytes
//	rank               u16: 0xFFFF = any rank (-1), else the rank
//	name               u8 length (1..64) + that many bytes
//	member             u16 id, u8 family (4 or 6), 4 or 16 address
//	                   bytes, u16 UDP port (9 or 21 bytes in all)
//	range              u64 start, u64 end, i32 owner, u8 replica count
//	                   (0..8) + that many i32 replica ranks
//	list of X          u16 count + count × X
//	pool               u64 size (1..2^48), u64 stripe (64..2^30, a
//	                   multiple of 8), u16 columns (0..256; 0 in a
//	                   request: every live memory node), u8 replicas
//	                   (1..2), u8 permissions (bits read, write, atomic,
//	                   vector; not 0)
//	poolnode           u16 id, address as in member, u64 capacity,
//	                   u64 used, u8 alive (0 or 1)
//	poolregion         u32 region, pool
//	ranks              u16 size (0..4096), then (size+7)/8 bytes: bit
//	                   r%8 (least significant first) of byte r/8 is rank
//	                   r; the bits past size are zero
//
// Fields by type (request → response):
//
//	JOIN       job name, size u16 (1..4096), rank (any, or < size),
//	           mtu u16 (160..65507: the sender's largest datagram)
//	           → group u32, member u16, epoch u64, list of member (≤ 4096)
//	LEAVE      group u32, member u16  → (no fields)
//	DESTROY    group u32              → (no fields)
//	HEARTBEAT  group u32, member u16
//	           → epoch u64, list of u16 dead member ids (≤ 4096)
//	REGISTER   service name, policy u8, size u16 (1..4096: members the
//	           service will have), rank (any, or < size), list of range
//	           (≤ 4096), mtu u16 → group u32, member u16
//	LOOKUP     service name, mtu u16 → group u32, list of member (≤ 4096)
//	POOLNODE   key u64 (the node's region lent to the pool), capacity u64
//	           (bytes, not 0), incarnation u64 (random per start of the
//	           node) → node u16
//	POOLCREATE pool → region u32, key u64, pool (columns as chosen)
//	POOLOPEN   region u32, key u64 → pool
//	POOLFREE   region u32, key u64 → (no fields)
//	POOLSTAT   (no fields) → list of poolnode (≤ 1024), list of
//	           poolregion (≤ 4096; region keys are never listed),
//	           refused u64
//	POOLGRANT  region u32, key u64, perm u8, base u64, length u64
//	           (switch → memory node) → (no fields)
//	POOLREVOKE region u32, key u64 (switch → memory node) → (no fields)
//	POOLREBUILD region u32, key u64, pool, base u64, length u64, column
//	           u16 (switch → restarted memory node) → (no fields)
//	POOLREBUILDGO region u32, key u64, column u16 (switch → node) → (no
//	           fields)
//	POOLREBUILT region u32, key u64, column u16, failed u8 (0 or 1)
//	           (node → switch) → (no fields)
//	JOINSTATUS job name → ranks (the job's size and the ranks that
//	           joined its rendezvous; size 0: no rendezvous for the job)
//
// A receiver first checks that the message is at least 16 bytes long, then
// verifies the tag in constant time (a bad tag is answered with status
// AUTH), and only then decodes the fields: an unknown type or flag, a count
// or value out of range, a truncated field or trailing bytes make the
// message malformed.

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"math/bits"
	"net/netip"
	"slices"
	"sync"

	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/poolmap"
)

// CtrlType says what a control message asks for (or answers, with Resp).
// The numbers are part of the wire format.
type CtrlType uint8

// Control message types.
const (
	// CtrlJoin registers the sender as a member of job Job of Size members
	// at Rank (CtrlRankAny: the switch picks one). The response, sent when
	// all Size members have joined, carries the Group, the sender's Member
	// id, the Members table and the group's Epoch.
	CtrlJoin CtrlType = 1
	// CtrlLeave removes Member from Group. The response has no fields.
	CtrlLeave CtrlType = 2
	// CtrlDestroy tears Group down. The response has no fields.
	CtrlDestroy CtrlType = 3
	// CtrlHeartbeat tells the switch that Member of Group is alive. The
	// response carries the group's Epoch and the ids of its Dead members.
	CtrlHeartbeat CtrlType = 4
	// CtrlRegister registers the sender as a member of anycast service
	// group Service of Size members, with selection Policy, the key Ranges
	// it serves and its Rank (CtrlRankAny: the switch picks one). The
	// response carries the service's Group and the sender's Member id.
	CtrlRegister CtrlType = 5
	// CtrlLookup asks for service group Service. The response carries its
	// Group and Members table.
	CtrlLookup CtrlType = 6
	// CtrlPoolNode registers the sender, a memory node, as lending
	// Capacity bytes of its region Key to the pool (sent again as its
	// heartbeat), with the Epoch of its incarnation: a node that comes
	// back with another one restarted and lost its memory. The response
	// carries its Node id and the switch's own incarnation in Epoch: a node
	// that has not yet reported its grants to that incarnation sends
	// CtrlPoolReport. Capacity 0 says the node stops lending (it shuts
	// down): it is dead at once, and forgotten if it holds no copies.
	CtrlPoolNode CtrlType = 7
	// CtrlPoolCreate creates a pool region as Pool asks. The response
	// carries its Region id, its Key and the Pool as created.
	CtrlPoolCreate CtrlType = 8
	// CtrlPoolOpen asks for region Region's layout, proving access with
	// its Key. The response carries the Pool.
	CtrlPoolOpen CtrlType = 9
	// CtrlPoolFree frees region Region (Key must open it). The response
	// has no fields.
	CtrlPoolFree CtrlType = 10
	// CtrlPoolStat asks for the pool's memory nodes and regions (without
	// their keys). The response carries PoolNodes and PoolRegions.
	CtrlPoolStat CtrlType = 11
	// CtrlPoolGrant, from the switch to a memory node, gives column Node
	// of pool region Region (accesses carry Key and may do Pool.Perm) the
	// Length bytes at Base of the node's lent region. The node zeroes them
	// first. Pool (the region's shape), Homes (where every column lives)
	// and Epoch (the region's) are the switch's map record, which the node
	// keeps and reports back (CtrlPoolReport). The response has no fields.
	CtrlPoolGrant CtrlType = 12
	// CtrlPoolRevoke, from the switch to a memory node, takes region
	// Region's grant (Key) back. The response has no fields.
	CtrlPoolRevoke CtrlType = 13
	// CtrlPoolRebuild, from the switch to a restarted memory node, grants
	// it again the Length bytes at Base for column Node of region Region
	// (Key, Pool: its shape and permissions; Homes and Epoch as in
	// CtrlPoolGrant), to be rebuilt from the other copies: the node zeroes
	// them and remembers which bytes clients write from now on. The
	// response has no fields.
	CtrlPoolRebuild CtrlType = 14
	// CtrlPoolRebuildGo, from the switch, tells the node to copy column
	// Node of region Region (Key) from the other copies, reading the
	// region through the switch and filling only bytes no client has
	// written since the rebuild grant. The response has no fields.
	CtrlPoolRebuildGo CtrlType = 15
	// CtrlPoolRebuilt, from the memory node to the switch, reports the
	// rebuild of column Node of region Region (Key) done, or failed with
	// Failed set. The response has no fields.
	CtrlPoolRebuilt CtrlType = 16
	// CtrlJoinStatus asks what the rendezvous of job Job holds: a joiner
	// whose wait ended says who is missing. The response carries the
	// job's Size and the ranks that Joined, or Size 0 when the switch
	// holds no rendezvous for the job (none was started, it expired, or
	// the group formed).
	CtrlJoinStatus CtrlType = 17
	// CtrlPoolReport, from a memory node to the switch, lists the grants
	// the node holds (Reports), so that a switch that restarted rebuilds
	// its map of the pool from the nodes. A node sends it when the
	// switch's incarnation (CtrlPoolNode's response) is one it has not
	// reported to, in as many messages as its grants need, the last one
	// with Final set. The response has no fields.
	CtrlPoolReport CtrlType = 18
	// CtrlPoolEpoch, from the switch to a memory node, sets the Epoch of
	// region Region's grant (Key): the region's other copy missed writes
	// and this one is the current one. The response has no fields.
	CtrlPoolEpoch CtrlType = 19
	ctrlLastType           = CtrlPoolEpoch
)

var ctrlTypeNames = [...]string{
	CtrlJoin: "join", CtrlLeave: "leave", CtrlDestroy: "destroy",
	CtrlHeartbeat: "heartbeat", CtrlRegister: "register", CtrlLookup: "lookup",
	CtrlPoolNode: "poolnode", CtrlPoolCreate: "poolcreate", CtrlPoolOpen: "poolopen",
	CtrlPoolFree: "poolfree", CtrlPoolStat: "poolstat",
	CtrlPoolGrant: "poolgrant", CtrlPoolRevoke: "poolrevoke",
	CtrlPoolRebuild: "poolrebuild", CtrlPoolRebuildGo: "poolrebuildgo", CtrlPoolRebuilt: "poolrebuilt",
	CtrlJoinStatus: "joinstatus", CtrlPoolReport: "poolreport", CtrlPoolEpoch: "poolepoch",
}

// CarriesMTU reports whether requests of type t carry the sender's MTU
// (Join, Register, Lookup).
func (t CtrlType) CarriesMTU() bool {
	return t == CtrlJoin || t == CtrlRegister || t == CtrlLookup
}

// String is the short lower-case name of the type, or "ctrl(N)" for a
// number this version does not define.
func (t CtrlType) String() string {
	if t != 0 && int(t) < len(ctrlTypeNames) && ctrlTypeNames[t] != "" {
		return ctrlTypeNames[t]
	}
	return fmt.Sprintf("ctrl(%d)", uint8(t))
}

// Limits of control message fields. They are part of the wire format: a
// message beyond them is malformed.
const (
	CtrlTagLen         = 16             // length of the authentication tag, in bytes
	CtrlMaxName        = 64             // longest Job or Service name, in bytes (the shortest is 1)
	CtrlMaxSize        = 4096           // largest Join or Register Size (ranks are below Size)
	CtrlMaxMembers     = 4096           // most entries in Members and in Dead
	CtrlMaxRanges      = 4096           // most entries in Ranges
	CtrlMaxReplicas    = 8              // most Replicas of one CtrlRange
	CtrlMaxPoolNodes   = MaxPoolNodes   // most entries in PoolNodes
	CtrlMaxPoolRegions = MaxPoolRegions // most entries in PoolRegions
	CtrlMaxReports     = MaxPoolRegions // most entries in Reports
	CtrlRankAny        = -1             // Rank: let the switch choose
	// CtrlMinMTU and CtrlMaxMTU bound MTU in Join, Register and Lookup
	// requests, in bytes: what a transport accepts as its MTU.
	CtrlMinMTU = transport.MinMTU
	CtrlMaxMTU = transport.MaxMTU
)

// ctrlRankAnyWire is CtrlRankAny on the wire.
const ctrlRankAnyWire = 0xFFFF

// ctrlFlagResp is bit 0 of the flags byte.
const ctrlFlagResp = 1 << 0

// Errors. ParseCtrl and AppendCtrl wrap ErrCtrlMalformed with a detail;
// compare with errors.Is.
var (
	// ErrCtrlAuth means the tag does not match the message under the
	// fabric token: the switch answers it with wire.StatusAuth.
	ErrCtrlAuth = errors.New("fabric: control message authentication failed")
	// ErrCtrlMalformed means the bytes (or, from AppendCtrl, the fields)
	// are not a valid control message.
	ErrCtrlMalformed = errors.New("fabric: malformed control message")
)

// MemberInfo is one entry of a group's member table.
type MemberInfo struct {
	ID   uint16         // member id within the group
	Addr netip.AddrPort // the member's UDP address: IPv4 or IPv6, no zone
}

// CtrlRange is a range of keys a service member serves (for the key-owner
// anycast policy). The codec carries the values as they are; their meaning
// and consistency are checked by the switch.
type CtrlRange struct {
	Start, End uint64  // the key range
	Owner      int32   // rank of the member that owns it
	Replicas   []int32 // ranks holding replicas; at most CtrlMaxReplicas
}

// PoolSpec is a pool region's shape: what CtrlPoolCreate asks for and what
// CtrlPoolCreate, CtrlPoolOpen and CtrlPoolStat report.
type PoolSpec struct {
	Region   uint32 // region id (responses and PoolRegions)
	Size     uint64 // bytes, 1..MaxRegionSize
	Stripe   uint64 // interleave unit in bytes: a multiple of 8, poolmap.MinStripe..MaxStripe
	Columns  int    // memory nodes it spans, 1..MaxColumns; 0 in a request: all live ones
	Replicas int    // copies of every byte, 1 or 2
	Perm     uint8  // wire.Perm bits the region allows, not 0
	// PoolStat's regions only: columns whose copy is lost (stale, or on a
	// restarted node) and, of those, the ones being rebuilt; columns on
	// memory nodes the switch counts dead (not lost: the node may come
	// back with its copy); and the region's health from those.
	Lost, Rebuilding int
	Down             int
	Health           PoolHealth
}

// PoolHealth is what a pool region's readers can expect.
type PoolHealth uint8

// Pool region health, from best to worst.
const (
	// HealthOK: every copy of every byte is in place.
	HealthOK PoolHealth = 0
	// HealthDegraded: every byte is readable, but some copy is lost, on a
	// dead node or being rebuilt (a second failure may lose data).
	HealthDegraded PoolHealth = 1
	// HealthUnavailable: some bytes have no copy on a live node, but not
	// every copy of them is lost: they come back with their node.
	HealthUnavailable PoolHealth = 2
	// HealthLost: every copy of some bytes is lost (their nodes restarted
	// or never reported them): those bytes are gone.
	HealthLost PoolHealth = 3
)

func (h PoolHealth) String() string {
	switch h {
	case HealthOK:
		return "ok"
	case HealthDegraded:
		return "degraded"
	case HealthUnavailable:
		return "unavailable"
	case HealthLost:
		return "lost"
	}
	return fmt.Sprintf("health(%d)", uint8(h))
}

// PoolHome is where one column of a pool region lives: the memory node's
// address and the extent's offset in the node's lent region.
type PoolHome struct {
	Addr netip.AddrPort // IPv4 or IPv6, no zone
	Base uint64
}

// PoolReport is one grant a memory node holds, as CtrlPoolReport carries
// it: column Column of region Region, shaped Pool (Region unused), the
// Length bytes at Base of the node's lent region, the region's Epoch as
// the switch last set it, the digest of the region's key (PoolKeyDigest:
// the key itself never leaves the node), where every column lives, and
// whether the copy is being rebuilt (incomplete) or took writes its other
// copy missed since Epoch was set (Degraded).
type PoolReport struct {
	Region     uint32
	Column     uint16
	Pool       PoolSpec
	Base       uint64
	Length     uint64
	Epoch      uint64
	Digest     [PoolDigestLen]byte
	Rebuilding bool
	Degraded   bool
	Homes      []PoolHome // by column: Pool.Columns entries
}

// PoolDigestLen is the length of a region key's digest, in bytes.
const PoolDigestLen = 16

// PoolKeyDigest is the digest of region's key that memory nodes report:
// SHA-256 over a label, the region id and the key, cut to PoolDigestLen
// bytes. A switch that knows only the digest learns the key from the
// first request that carries it.
func PoolKeyDigest(region uint32, key uint64) [PoolDigestLen]byte {
	var b [len(poolDigestLabel) + 12]byte
	copy(b[:], poolDigestLabel)
	binary.BigEndian.PutUint32(b[len(poolDigestLabel):], region)
	binary.BigEndian.PutUint64(b[len(poolDigestLabel)+4:], key)
	sum := sha256.Sum256(b[:])
	return [PoolDigestLen]byte(sum[:PoolDigestLen])
}

const poolDigestLabel = "ndma pool region key\x00"

// PoolNodeInfo is one memory node of the pool, as CtrlPoolStat reports it.
type PoolNodeInfo struct {
	ID       uint16
	Addr     netip.AddrPort
	Capacity uint64 // bytes lent to the pool
	Used     uint64 // bytes given to regions
	Alive    bool
	Requests uint64 // pool requests forwarded to it since the switch started (one per copy and chain hop)
	Bytes    uint64 // their payload bytes (requests only: read data comes back from the node)
}

// CtrlMsg is one control request or response. Only the fields its Type and
// Resp use are encoded (see the layout at the top of this file); the others
// are ignored by AppendCtrl and zeroed by ParseCtrl.
type CtrlMsg struct {
	Type    CtrlType
	Resp    bool         // a response (flags bit 0)
	Job     string       // Join and JoinStatus requests: job name, 1..CtrlMaxName bytes
	Service string       // Register and Lookup requests: service name, 1..CtrlMaxName bytes
	Size    int          // Join and Register requests: number of members, 1..CtrlMaxSize; JoinStatus response: the job's, 0..CtrlMaxSize (0: no rendezvous)
	Rank    int          // Join and Register requests: CtrlRankAny or 0..Size-1
	Group   uint32       // group id
	Member  uint16       // member id within Group
	Epoch   uint64       // Join and Heartbeat responses: group membership epoch; PoolNode request: the node's incarnation; PoolNode response: the switch's; PoolGrant, PoolRebuild, PoolEpoch requests: the region's epoch
	Policy  uint8        // Register request: anycast selection policy, interpreted by the switch
	Ranges  []CtrlRange  // Register request: at most CtrlMaxRanges
	Members []MemberInfo // Join and Lookup responses: at most CtrlMaxMembers
	Dead    []uint16     // Heartbeat response: ids of dead members, at most CtrlMaxMembers
	// JoinStatus response: the ranks that joined, as a bit set of
	// (Size+7)/8 bytes: bit r%8 (least significant first) of byte r/8 is
	// rank r; the bits past Size are zero. JoinedRanks lists them.
	Joined []byte
	// Join, Register and Lookup requests: the largest datagram the sender
	// sends, in bytes (its transport MTU), CtrlMinMTU..CtrlMaxMTU. The
	// switch refuses a sender whose datagrams it could not send back,
	// and a job member whose MTU differs from the others' (their
	// messages would be cut into fragments that do not line up).
	MTU int

	Region      uint32         // PoolOpen, PoolFree, PoolGrant, PoolRevoke, PoolEpoch requests, PoolCreate response
	Key         uint64         // PoolNode request (the node's region), PoolOpen and PoolFree requests, PoolCreate response (the new region's key)
	Capacity    uint64         // PoolNode request
	Node        uint16         // PoolNode response; PoolGrant, PoolRebuild, PoolRebuildGo, PoolRebuilt: the column
	Pool        PoolSpec       // PoolCreate request and response, PoolOpen response
	PoolNodes   []PoolNodeInfo // PoolStat response: at most CtrlMaxPoolNodes
	PoolRegions []PoolSpec     // PoolStat response: at most CtrlMaxPoolRegions
	PoolRefused uint64         // PoolStat response: pool requests the switch refused since it started
	Failed      bool           // PoolRebuilt request: the rebuild failed
	Base        uint64         // PoolGrant request: offset of the extent in the node's lent region
	Length      uint64         // PoolGrant request: bytes of the extent, not 0
	Homes       []PoolHome     // PoolGrant and PoolRebuild requests: Pool.Columns entries
	Reports     []PoolReport   // PoolReport request: at most CtrlMaxReports
	Final       bool           // PoolReport request: the last of the node's report
}

// AppendCtrl encodes m, appends HMAC-SHA256(token, encoded)[:CtrlTagLen]
// and returns the extended slice. A nil or empty token is allowed here (the
// tag is then computed with an empty key): the configurations above it
// (Config, the endpoint's FabricOptions) refuse one unless Insecure is
// set (CheckToken). As with any
// HMAC key, a token shorter than 64 bytes is padded with zero bytes, so
// tokens that differ only in trailing zero bytes are the same key.
//
// If a field is out of range (a name too long or empty, a size or rank out
// of range, a list too long, an invalid or zoned address, an unknown type)
// it returns dst unchanged and an error wrapping ErrCtrlMalformed:
// everything AppendCtrl accepts, ParseCtrl accepts.
func AppendCtrl(dst []byte, m *CtrlMsg, token []byte) ([]byte, error) {
	if err := m.validate(); err != nil {
		return dst, err
	}
	start := len(dst)
	b := m.appendFields(dst)
	mac := getCtrlMAC(token)
	b = append(b, mac.tag(b[start:])...)
	ctrlMACPool.Put(mac)
	return b, nil
}

// ParseCtrl verifies the tag of control message b under token and decodes
// it into m. It checks the tag first, in constant time, over everything but
// the last CtrlTagLen bytes, so any change to the bytes is ErrCtrlAuth; a
// message shorter than the tag, or one whose fields do not decode, is an
// error wrapping ErrCtrlMalformed.
//
// m's slices (and the Replicas of its Ranges) are reused up to their
// capacity and its strings are kept when the names are equal, so parsing
// into the same CtrlMsg repeatedly does not allocate; a caller that keeps
// any of them across calls must copy them first. On error m's contents are
// unspecified. ParseCtrl never panics and does not retain b.
func ParseCtrl(b []byte, m *CtrlMsg, token []byte) error {
	if len(b) < CtrlTagLen {
		return fmt.Errorf("%w: %d bytes, shorter than the tag", ErrCtrlMalformed, len(b))
	}
	body, tag := b[:len(b)-CtrlTagLen], b[len(b)-CtrlTagLen:]
	mac := getCtrlMAC(token)
	ok := hmac.Equal(mac.tag(body), tag)
	ctrlMACPool.Put(mac)
	if !ok {
		return ErrCtrlAuth
	}
	return m.decode(body)
}

// validateMTU checks the MTU field of a Join, Register or Lookup request.
func validateMTU(mtu int) error {
	if mtu < CtrlMinMTU || mtu > CtrlMaxMTU {
		return ctrlErrorf("mtu %d not in %d..%d", mtu, CtrlMinMTU, CtrlMaxMTU)
	}
	return nil
}

// keyState describes a region key in an error without showing it (a key
// is a capability): whether it is zero.
func keyState(key uint64) string {
	if key == 0 {
		return "key zero"
	}
	return "key set"
}

func ctrlErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCtrlMalformed}, args...)...)
}

// validate checks the fields m's type uses against the limits.
func (m *CtrlMsg) validate() error {
	switch m.Type {
	case CtrlJoin:
		if m.Resp {
			return validateMembers(m.Members)
		}
		if err := validateName("job", m.Job); err != nil {
			return err
		}
		if m.Size < 1 || m.Size > CtrlMaxSize {
			return ctrlErrorf("job size %d not in 1..%d", m.Size, CtrlMaxSize)
		}
		if m.Rank != CtrlRankAny && (m.Rank < 0 || m.Rank >= m.Size) {
			return ctrlErrorf("rank %d not in 0..%d", m.Rank, m.Size-1)
		}
		return validateMTU(m.MTU)
	case CtrlLeave, CtrlDestroy:
	case CtrlHeartbeat:
		if m.Resp && len(m.Dead) > CtrlMaxMembers {
			return ctrlErrorf("%d dead members > %d", len(m.Dead), CtrlMaxMembers)
		}
	case CtrlRegister:
		if m.Resp {
			return nil
		}
		if err := validateName("service", m.Service); err != nil {
			return err
		}
		if m.Size < 1 || m.Size > CtrlMaxSize {
			return ctrlErrorf("size %d not in 1..%d", m.Size, CtrlMaxSize)
		}
		if m.Rank != CtrlRankAny && (m.Rank < 0 || m.Rank >= m.Size) {
			return ctrlErrorf("rank %d not in 0..%d", m.Rank, m.Size-1)
		}
		if len(m.Ranges) > CtrlMaxRanges {
			return ctrlErrorf("%d ranges > %d", len(m.Ranges), CtrlMaxRanges)
		}
		for i := range m.Ranges {
			if n := len(m.Ranges[i].Replicas); n > CtrlMaxReplicas {
				return ctrlErrorf("range %d: %d replicas > %d", i, n, CtrlMaxReplicas)
			}
		}
		return validateMTU(m.MTU)
	case CtrlLookup:
		if m.Resp {
			return validateMembers(m.Members)
		}
		if err := validateName("service", m.Service); err != nil {
			return err
		}
		return validateMTU(m.MTU)
	case CtrlPoolNode:
		if !m.Resp && m.Key == 0 {
			return ctrlErrorf("pool node: %s: want a non-zero key", keyState(m.Key))
		}
	case CtrlPoolCreate:
		return validatePool(&m.Pool, !m.Resp)
	case CtrlPoolOpen:
		if m.Resp {
			return validatePool(&m.Pool, false)
		}
	case CtrlPoolFree, CtrlPoolRevoke, CtrlPoolRebuildGo, CtrlPoolRebuilt:
	case CtrlPoolRebuild, CtrlPoolGrant:
		if m.Resp {
			return nil
		}
		if m.Region == 0 || m.Key == 0 || m.Length == 0 {
			return ctrlErrorf("%v: region %d, %s, length %d: want all non-zero", m.Type, m.Region, keyState(m.Key), m.Length)
		}
		if err := validatePool(&m.Pool, false); err != nil {
			return err
		}
		if m.Pool.Perm&^uint8(wire.PermAll) != 0 {
			return ctrlErrorf("%v: perm %#x", m.Type, m.Pool.Perm)
		}
		if int(m.Node) >= m.Pool.Columns {
			return ctrlErrorf("%v: column %d of %d", m.Type, m.Node, m.Pool.Columns)
		}
		return validateHomes(m.Homes, m.Pool.Columns)
	case CtrlPoolEpoch:
		if !m.Resp && (m.Region == 0 || m.Key == 0) {
			return ctrlErrorf("pool epoch: region %d, %s: want both non-zero", m.Region, keyState(m.Key))
		}
	case CtrlPoolReport:
		if m.Resp {
			return nil
		}
		if len(m.Reports) > CtrlMaxReports {
			return ctrlErrorf("%d reports > %d", len(m.Reports), CtrlMaxReports)
		}
		for i := range m.Reports {
			if err := m.Reports[i].validate(); err != nil {
				return err
			}
		}
	case CtrlJoinStatus:
		if !m.Resp {
			return validateName("job", m.Job)
		}
		return validateRanks(m.Size, m.Joined)
	case CtrlPoolStat:
		if !m.Resp {
			return nil
		}
		if len(m.PoolNodes) > CtrlMaxPoolNodes || len(m.PoolRegions) > CtrlMaxPoolRegions {
			return ctrlErrorf("%d pool nodes (max %d), %d regions (max %d)", len(m.PoolNodes), CtrlMaxPoolNodes, len(m.PoolRegions), CtrlMaxPoolRegions)
		}
		for i := range m.PoolNodes {
			if a := m.PoolNodes[i].Addr.Addr(); !a.IsValid() || a.Zone() != "" {
				return ctrlErrorf("pool node %d: address %v is invalid or has a zone", m.PoolNodes[i].ID, m.PoolNodes[i].Addr)
			}
		}
		for i := range m.PoolRegions {
			p := &m.PoolRegions[i]
			if err := validatePool(p, false); err != nil {
				return err
			}
			if p.Lost < 0 || p.Lost > p.Columns || p.Rebuilding < 0 || p.Rebuilding > p.Lost {
				return ctrlErrorf("pool region %d: %d lost, %d rebuilding of %d columns", p.Region, p.Lost, p.Rebuilding, p.Columns)
			}
		}
	default:
		return ctrlErrorf("unknown type %d", uint8(m.Type))
	}
	return nil
}

// validateHomes checks a region's homes: one per column, valid unzoned
// addresses.
func validateHomes(hs []PoolHome, columns int) error {
	if len(hs) != columns {
		return ctrlErrorf("%d homes for %d columns", len(hs), columns)
	}
	for i := range hs {
		if a := hs[i].Addr.Addr(); !a.IsValid() || a.Zone() != "" {
			return ctrlErrorf("home %d: address %v is invalid or has a zone", i, hs[i].Addr)
		}
	}
	return nil
}

// validate checks a report entry's fields.
func (p *PoolReport) validate() error {
	if p.Region == 0 || p.Length == 0 {
		return ctrlErrorf("pool report: region %d, length %d: want both non-zero", p.Region, p.Length)
	}
	if err := validatePool(&p.Pool, false); err != nil {
		return err
	}
	if int(p.Column) >= p.Pool.Columns {
		return ctrlErrorf("pool report: region %d: column %d of %d", p.Region, p.Column, p.Pool.Columns)
	}
	return validateHomes(p.Homes, p.Pool.Columns)
}

// validatePool checks a pool shape's ranges; request allows Columns 0.
func validatePool(p *PoolSpec, request bool) error {
	minCols := 1
	if request {
		minCols = 0
	}
	switch {
	case p.Size < 1 || p.Size > poolmap.MaxRegionSize:
		return ctrlErrorf("pool size %d not in 1..%d", p.Size, uint64(poolmap.MaxRegionSize))
	case p.Stripe < poolmap.MinStripe || p.Stripe > poolmap.MaxStripe || p.Stripe%8 != 0:
		return ctrlErrorf("pool stripe %d: want a multiple of 8 in %d..%d", p.Stripe, poolmap.MinStripe, poolmap.MaxStripe)
	case p.Columns < minCols || p.Columns > poolmap.MaxColumns:
		return ctrlErrorf("pool columns %d not in %d..%d", p.Columns, minCols, poolmap.MaxColumns)
	case p.Replicas < 1 || p.Replicas > poolmap.MaxReplicas:
		return ctrlErrorf("pool replicas %d not in 1..%d", p.Replicas, poolmap.MaxReplicas)
	case p.Perm == 0 || p.Perm&^0x0f != 0:
		return ctrlErrorf("pool permissions %#x: want a non-zero set of the 4 bits", p.Perm)
	}
	return nil
}

// validateRanks checks a ranks field: size in 0..CtrlMaxSize, a bit set
// of (size+7)/8 bytes with no bit past size.
func validateRanks(size int, set []byte) error {
	if size < 0 || size > CtrlMaxSize {
		return ctrlErrorf("job size %d not in 0..%d", size, CtrlMaxSize)
	}
	if len(set) != (size+7)/8 {
		return ctrlErrorf("%d bytes of ranks for size %d, want %d", len(set), size, (size+7)/8)
	}
	if size%8 != 0 && set[len(set)-1]>>(size%8) != 0 {
		return ctrlErrorf("ranks set past size %d", size)
	}
	return nil
}

// JoinedRanks lists the ranks of a JoinStatus response's Joined set, in
// increasing order.
func (m *CtrlMsg) JoinedRanks() []int {
	var ranks []int
	for i, b := range m.Joined {
		for ; b != 0; b &= b - 1 {
			ranks = append(ranks, 8*i+bits.TrailingZeros8(b))
		}
	}
	return ranks
}

func validateName(what, s string) error {
	if len(s) < 1 || len(s) > CtrlMaxName {
		return ctrlErrorf("%s name of %d bytes not in 1..%d", what, len(s), CtrlMaxName)
	}
	return nil
}

func validateMembers(ms []MemberInfo) error {
	if len(ms) > CtrlMaxMembers {
		return ctrlErrorf("%d members > %d", len(ms), CtrlMaxMembers)
	}
	for i := range ms {
		a := ms[i].Addr.Addr()
		if !a.IsValid() || a.Zone() != "" {
			return ctrlErrorf("member %d: address %v is invalid or has a zone", ms[i].ID, ms[i].Addr)
		}
	}
	return nil
}

// appendFields appends the type, flags and fields of m, which validate
// accepted.
func (m *CtrlMsg) appendFields(b []byte) []byte {
	var flags byte
	if m.Resp {
		flags |= ctrlFlagResp
	}
	b = append(b, byte(m.Type), flags)
	be := binary.BigEndian
	switch {
	case m.Type == CtrlJoin && !m.Resp:
		b = appendName(b, m.Job)
		b = be.AppendUint16(b, uint16(m.Size))
		b = appendRank(b, m.Rank)
		b = be.AppendUint16(b, uint16(m.MTU))
	case m.Type == CtrlJoin:
		b = be.AppendUint32(b, m.Group)
		b = be.AppendUint16(b, m.Member)
		b = be.AppendUint64(b, m.Epoch)
		b = appendMembers(b, m.Members)
	case m.Type == CtrlLeave && !m.Resp, m.Type == CtrlHeartbeat && !m.Resp:
		b = be.AppendUint32(b, m.Group)
		b = be.AppendUint16(b, m.Member)
	case m.Type == CtrlDestroy && !m.Resp:
		b = be.AppendUint32(b, m.Group)
	case m.Type == CtrlHeartbeat && m.Resp:
		b = be.AppendUint64(b, m.Epoch)
		b = be.AppendUint16(b, uint16(len(m.Dead)))
		for _, id := range m.Dead {
			b = be.AppendUint16(b, id)
		}
	case m.Type == CtrlRegister && !m.Resp:
		b = appendName(b, m.Service)
		b = append(b, m.Policy)
		b = be.AppendUint16(b, uint16(m.Size))
		b = appendRank(b, m.Rank)
		b = be.AppendUint16(b, uint16(len(m.Ranges)))
		for i := range m.Ranges {
			r := &m.Ranges[i]
			b = be.AppendUint64(b, r.Start)
			b = be.AppendUint64(b, r.End)
			b = be.AppendUint32(b, uint32(r.Owner))
			b = append(b, byte(len(r.Replicas)))
			for _, x := range r.Replicas {
				b = be.AppendUint32(b, uint32(x))
			}
		}
		b = be.AppendUint16(b, uint16(m.MTU))
	case m.Type == CtrlRegister:
		b = be.AppendUint32(b, m.Group)
		b = be.AppendUint16(b, m.Member)
	case m.Type == CtrlLookup && !m.Resp:
		b = appendName(b, m.Service)
		b = be.AppendUint16(b, uint16(m.MTU))
	case m.Type == CtrlLookup:
		b = be.AppendUint32(b, m.Group)
		b = appendMembers(b, m.Members)
	case m.Type == CtrlPoolNode && !m.Resp:
		b = be.AppendUint64(b, m.Key)
		b = be.AppendUint64(b, m.Capacity)
		b = be.AppendUint64(b, m.Epoch)
	case m.Type == CtrlPoolNode:
		b = be.AppendUint16(b, m.Node)
		b = be.AppendUint64(b, m.Epoch)
	case m.Type == CtrlPoolCreate && !m.Resp:
		b = appendPool(b, &m.Pool)
	case m.Type == CtrlPoolCreate:
		b = be.AppendUint32(b, m.Region)
		b = be.AppendUint64(b, m.Key)
		b = appendPool(b, &m.Pool)
	case m.Type == CtrlPoolOpen && !m.Resp, m.Type == CtrlPoolFree && !m.Resp, m.Type == CtrlPoolRevoke && !m.Resp:
		b = be.AppendUint32(b, m.Region)
		b = be.AppendUint64(b, m.Key)
	case (m.Type == CtrlPoolRebuildGo || m.Type == CtrlPoolRebuilt) && !m.Resp:
		b = be.AppendUint32(b, m.Region)
		b = be.AppendUint64(b, m.Key)
		b = be.AppendUint16(b, m.Node)
		if m.Type == CtrlPoolRebuilt {
			failed := byte(0)
			if m.Failed {
				failed = 1
			}
			b = append(b, failed)
		}
	case (m.Type == CtrlPoolRebuild || m.Type == CtrlPoolGrant) && !m.Resp:
		b = be.AppendUint32(b, m.Region)
		b = be.AppendUint64(b, m.Key)
		b = appendPool(b, &m.Pool)
		b = be.AppendUint64(b, m.Base)
		b = be.AppendUint64(b, m.Length)
		b = be.AppendUint16(b, m.Node)
		b = be.AppendUint64(b, m.Epoch)
		b = appendHomes(b, m.Homes)
	case m.Type == CtrlPoolEpoch && !m.Resp:
		b = be.AppendUint32(b, m.Region)
		b = be.AppendUint64(b, m.Key)
		b = be.AppendUint64(b, m.Epoch)
	case m.Type == CtrlPoolReport && !m.Resp:
		b = appendBool(b, m.Final)
		b = be.AppendUint16(b, uint16(len(m.Reports)))
		for i := range m.Reports {
			p := &m.Reports[i]
			b = be.AppendUint32(b, p.Region)
			b = be.AppendUint16(b, p.Column)
			b = appendPool(b, &p.Pool)
			b = be.AppendUint64(b, p.Base)
			b = be.AppendUint64(b, p.Length)
			b = be.AppendUint64(b, p.Epoch)
			b = append(b, p.Digest[:]...)
			b = appendBool(b, p.Rebuilding)
			b = appendBool(b, p.Degraded)
			b = appendHomes(b, p.Homes)
		}
	case m.Type == CtrlPoolOpen:
		b = appendPool(b, &m.Pool)
	case m.Type == CtrlJoinStatus && !m.Resp:
		b = appendName(b, m.Job)
	case m.Type == CtrlJoinStatus:
		b = be.AppendUint16(b, uint16(m.Size))
		b = append(b, m.Joined...)
	case m.Type == CtrlPoolStat && m.Resp:
		b = be.AppendUint16(b, uint16(len(m.PoolNodes)))
		for i := range m.PoolNodes {
			n := &m.PoolNodes[i]
			b = appendMember(b, n.ID, n.Addr)
			b = be.AppendUint64(b, n.Capacity)
			b = be.AppendUint64(b, n.Used)
			alive := byte(0)
			if n.Alive {
				alive = 1
			}
			b = append(b, alive)
			b = be.AppendUint64(b, n.Requests)
			b = be.AppendUint64(b, n.Bytes)
		}
		b = be.AppendUint16(b, uint16(len(m.PoolRegions)))
		for i := range m.PoolRegions {
			b = be.AppendUint32(b, m.PoolRegions[i].Region)
			b = appendPool(b, &m.PoolRegions[i])
			b = be.AppendUint16(b, uint16(m.PoolRegions[i].Lost))
			b = be.AppendUint16(b, uint16(m.PoolRegions[i].Rebuilding))
			b = be.AppendUint16(b, uint16(m.PoolRegions[i].Down))
			b = append(b, byte(m.PoolRegions[i].Health))
		}
		b = be.AppendUint64(b, m.PoolRefused)
	}
	return b
}

func appendPool(b []byte, p *PoolSpec) []byte {
	be := binary.BigEndian
	b = be.AppendUint64(b, p.Size)
	b = be.AppendUint64(b, p.Stripe)
	b = be.AppendUint16(b, uint16(p.Columns))
	return append(b, byte(p.Replicas), p.Perm)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// appendHomes appends a region's homes (their count is the region's
// columns, which the message carries): address as in a member entry
// (with the column as its id), then the base.
func appendHomes(b []byte, hs []PoolHome) []byte {
	for i := range hs {
		b = appendMember(b, uint16(i), hs[i].Addr)
		b = binary.BigEndian.AppendUint64(b, hs[i].Base)
	}
	return b
}

func appendName(b []byte, s string) []byte {
	b = append(b, byte(len(s)))
	return append(b, s...)
}

func appendRank(b []byte, rank int) []byte {
	if rank == CtrlRankAny {
		return binary.BigEndian.AppendUint16(b, ctrlRankAnyWire)
	}
	return binary.BigEndian.AppendUint16(b, uint16(rank))
}

func appendMembers(b []byte, ms []MemberInfo) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(ms)))
	for i := range ms {
		b = appendMember(b, ms[i].ID, ms[i].Addr)
	}
	return b
}

// appendMember appends one member entry: id, family, address, port.
func appendMember(b []byte, id uint16, ap netip.AddrPort) []byte {
	be := binary.BigEndian
	b = be.AppendUint16(b, id)
	a := ap.Addr()
	if a.Is4() {
		a4 := a.As4()
		b = append(b, 4)
		b = append(b, a4[:]...)
	} else {
		a16 := a.As16()
		b = append(b, 6)
		b = append(b, a16[:]...)
	}
	return be.AppendUint16(b, ap.Port())
}

// ctrlReader consumes fields from the front of b. The first failure sets err
// and every later read returns zero values.
type ctrlReader struct {
	b   []byte
	err error
}

func (r *ctrlReader) take(n int, what string) ([]byte, bool) {
	if r.err != nil {
		return nil, false
	}
	if len(r.b) < n {
		r.err = ctrlErrorf("truncated in %s", what)
		return nil, false
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s, true
}

func (r *ctrlReader) u8(what string) uint8 {
	if s, ok := r.take(1, what); ok {
		return s[0]
	}
	return 0
}

func (r *ctrlReader) u16(what string) uint16 {
	if s, ok := r.take(2, what); ok {
		return binary.BigEndian.Uint16(s)
	}
	return 0
}

func (r *ctrlReader) u32(what string) uint32 {
	if s, ok := r.take(4, what); ok {
		return binary.BigEndian.Uint32(s)
	}
	return 0
}

func (r *ctrlReader) u64(what string) uint64 {
	if s, ok := r.take(8, what); ok {
		return binary.BigEndian.Uint64(s)
	}
	return 0
}

// name reads a name field; it returns old, without allocating, when the
// bytes equal it.
func (r *ctrlReader) name(what, old string) string {
	n := int(r.u8(what))
	if r.err != nil {
		return ""
	}
	if n < 1 || n > CtrlMaxName {
		r.err = ctrlErrorf("%s name of %d bytes not in 1..%d", what, n, CtrlMaxName)
		return ""
	}
	s, ok := r.take(n, what)
	if !ok {
		return ""
	}
	if string(s) == old {
		return old
	}
	return string(s)
}

// rank reads a rank field and checks it is CtrlRankAny or below limit.
func (r *ctrlReader) rank(limit int) int {
	v := r.u16("rank")
	if r.err != nil {
		return 0
	}
	if v == ctrlRankAnyWire {
		return CtrlRankAny
	}
	if int(v) >= limit {
		r.err = ctrlErrorf("rank %d not in 0..%d", v, limit-1)
	}
	return int(v)
}

// mtu reads the MTU field of a Join, Register or Lookup request and
// checks its range.
func (r *ctrlReader) mtu() int {
	v := int(r.u16("mtu"))
	if r.err == nil {
		r.err = validateMTU(v)
	}
	return v
}

// count reads a list count, checks it against limit and that the rest of
// the message can hold that many items of at least minItem bytes, so that
// no allocation exceeds what the input justifies.
func (r *ctrlReader) count(what string, limit, minItem int) int {
	n := int(r.u16(what))
	if r.err != nil {
		return 0
	}
	if n > limit {
		r.err = ctrlErrorf("%d %s > %d", n, what, limit)
		return 0
	}
	if n*minItem > len(r.b) {
		r.err = ctrlErrorf("truncated in %s", what)
		return 0
	}
	return n
}

// ctrlMinMember is the encoded size of an IPv4 member entry.
const ctrlMinMember = 2 + 1 + 4 + 2

func (r *ctrlReader) members(dst []MemberInfo) []MemberInfo {
	n := r.count("members", CtrlMaxMembers, ctrlMinMember)
	dst = slices.Grow(dst[:0], n)
	for range n {
		id, ap := r.member()
		if r.err != nil {
			return dst
		}
		dst = append(dst, MemberInfo{ID: id, Addr: ap})
	}
	return dst
}

// member reads one member entry.
func (r *ctrlReader) member() (uint16, netip.AddrPort) {
	id := r.u16("member")
	var addr netip.Addr
	switch fam := r.u8("member"); fam {
	case 4:
		if s, ok := r.take(4, "member"); ok {
			addr = netip.AddrFrom4([4]byte(s))
		}
	case 6:
		if s, ok := r.take(16, "member"); ok {
			addr = netip.AddrFrom16([16]byte(s))
		}
	default:
		if r.err == nil {
			r.err = ctrlErrorf("member %d: address family %d", id, fam)
		}
	}
	port := r.u16("member")
	return id, netip.AddrPortFrom(addr, port)
}

// pool reads a pool shape and checks it (request: Columns may be 0).
func (r *ctrlReader) pool(p *PoolSpec, request bool) {
	p.Size = r.u64("pool")
	p.Stripe = r.u64("pool")
	p.Columns = int(r.u16("pool"))
	p.Replicas = int(r.u8("pool"))
	p.Perm = r.u8("pool")
	if r.err == nil {
		r.err = validatePool(p, request)
	}
}

// ctrlMinPoolNode and ctrlMinPoolRegion are the encoded sizes of a pool
// node (IPv4) and of a pool region entry.
const (
	ctrlMinPoolNode   = ctrlMinMember + 8 + 8 + 1 + 8 + 8
	ctrlMinPoolRegion = 4 + 8 + 8 + 2 + 1 + 1 + 2 + 2 + 2 + 1
	// ctrlMinHome is an IPv4 home, ctrlMinReport a report entry with one.
	ctrlMinHome   = ctrlMinMember + 8
	ctrlMinReport = 4 + 2 + 20 + 8 + 8 + 8 + PoolDigestLen + 1 + 1 + ctrlMinHome
)

// bool reads a 0 or 1 byte.
func (r *ctrlReader) bool(what string) bool {
	v := r.u8(what)
	if r.err == nil && v > 1 {
		r.err = ctrlErrorf("%s: %d is not a boolean", what, v)
	}
	return v == 1
}

// homes reads columns homes (checked by the caller's validate); the
// count must fit in what is left of the message.
func (r *ctrlReader) homes(dst []PoolHome, columns int) []PoolHome {
	if r.err != nil {
		return dst
	}
	if columns*ctrlMinHome > len(r.b) {
		r.err = ctrlErrorf("truncated in homes")
		return dst
	}
	dst = slices.Grow(dst[:0], columns)
	for range columns {
		_, ap := r.member()
		base := r.u64("home")
		if r.err != nil {
			return dst
		}
		dst = append(dst, PoolHome{Addr: ap, Base: base})
	}
	return dst
}

// ctrlMinRange is the encoded size of a range without replicas.
const ctrlMinRange = 8 + 8 + 4 + 1

func (r *ctrlReader) ranges(dst []CtrlRange) []CtrlRange {
	n := r.count("ranges", CtrlMaxRanges, ctrlMinRange)
	if cap(dst) < n {
		dst = make([]CtrlRange, 0, n)
	}
	// Reslicing within the capacity keeps the old elements' Replicas
	// arrays for reuse.
	dst = dst[:n]
	for i := range dst {
		x := &dst[i]
		x.Start = r.u64("range")
		x.End = r.u64("range")
		x.Owner = int32(r.u32("range"))
		k := int(r.u8("range"))
		if r.err == nil && k > CtrlMaxReplicas {
			r.err = ctrlErrorf("range %d: %d replicas > %d", i, k, CtrlMaxReplicas)
		}
		if r.err != nil {
			return dst[:i]
		}
		if len(r.b) < 4*k {
			r.err = ctrlErrorf("truncated in range")
			return dst[:i]
		}
		reps := slices.Grow(x.Replicas[:0], k)
		for range k {
			reps = append(reps, int32(r.u32("range")))
		}
		x.Replicas = reps
	}
	return dst
}

// decode parses the type, flags and fields in b (the message without its
// tag) into m.
func (m *CtrlMsg) decode(b []byte) error {
	if len(b) < 2 {
		return ctrlErrorf("%d bytes before the tag, need at least 2", len(b))
	}
	typ, flags := CtrlType(b[0]), b[1]
	if typ < CtrlJoin || typ > ctrlLastType || ctrlTypeNames[typ] == "" {
		return ctrlErrorf("unknown type %d", uint8(typ))
	}
	if flags&^ctrlFlagResp != 0 {
		return ctrlErrorf("unknown flags 0x%02x", flags)
	}
	job, service := m.Job, m.Service
	*m = CtrlMsg{
		Type:        typ,
		Resp:        flags&ctrlFlagResp != 0,
		Ranges:      m.Ranges[:0],
		Members:     m.Members[:0],
		Dead:        m.Dead[:0],
		Joined:      m.Joined[:0],
		PoolNodes:   m.PoolNodes[:0],
		PoolRegions: m.PoolRegions[:0],
	}
	r := ctrlReader{b: b[2:]}
	switch {
	case typ == CtrlJoin && !m.Resp:
		m.Job = r.name("job", job)
		m.Size = int(r.u16("size"))
		if r.err == nil && (m.Size < 1 || m.Size > CtrlMaxSize) {
			r.err = ctrlErrorf("job size %d not in 1..%d", m.Size, CtrlMaxSize)
		}
		m.Rank = r.rank(m.Size)
		m.MTU = r.mtu()
	case typ == CtrlJoin:
		m.Group = r.u32("group")
		m.Member = r.u16("member")
		m.Epoch = r.u64("epoch")
		m.Members = r.members(m.Members)
	case typ == CtrlLeave && !m.Resp, typ == CtrlHeartbeat && !m.Resp:
		m.Group = r.u32("group")
		m.Member = r.u16("member")
	case typ == CtrlDestroy && !m.Resp:
		m.Group = r.u32("group")
	case typ == CtrlHeartbeat && m.Resp:
		m.Epoch = r.u64("epoch")
		n := r.count("dead members", CtrlMaxMembers, 2)
		dead := slices.Grow(m.Dead, n)
		for range n {
			dead = append(dead, r.u16("dead members"))
		}
		m.Dead = dead
	case typ == CtrlRegister && !m.Resp:
		m.Service = r.name("service", service)
		m.Policy = r.u8("policy")
		m.Size = int(r.u16("size"))
		if r.err == nil && (m.Size < 1 || m.Size > CtrlMaxSize) {
			r.err = ctrlErrorf("size %d not in 1..%d", m.Size, CtrlMaxSize)
		}
		m.Rank = r.rank(m.Size)
		m.Ranges = r.ranges(m.Ranges)
		m.MTU = r.mtu()
	case typ == CtrlRegister:
		m.Group = r.u32("group")
		m.Member = r.u16("member")
	case typ == CtrlLookup && !m.Resp:
		m.Service = r.name("service", service)
		m.MTU = r.mtu()
	case typ == CtrlLookup:
		m.Group = r.u32("group")
		m.Members = r.members(m.Members)
	case typ == CtrlPoolNode && !m.Resp:
		m.Key = r.u64("key")
		m.Capacity = r.u64("capacity")
		m.Epoch = r.u64("incarnation")
		if r.err == nil && m.Key == 0 {
			r.err = ctrlErrorf("pool node: %s: want a non-zero key", keyState(m.Key))
		}
	case typ == CtrlPoolNode:
		m.Node = r.u16("node")
		m.Epoch = r.u64("incarnation")
	case typ == CtrlPoolCreate && !m.Resp:
		r.pool(&m.Pool, true)
	case typ == CtrlPoolCreate:
		m.Region = r.u32("region")
		m.Key = r.u64("key")
		r.pool(&m.Pool, false)
	case typ == CtrlPoolOpen && !m.Resp, typ == CtrlPoolFree && !m.Resp, typ == CtrlPoolRevoke && !m.Resp:
		m.Region = r.u32("region")
		m.Key = r.u64("key")
	case (typ == CtrlPoolRebuildGo || typ == CtrlPoolRebuilt) && !m.Resp:
		m.Region = r.u32("region")
		m.Key = r.u64("key")
		m.Node = r.u16("column")
		if typ == CtrlPoolRebuilt {
			switch f := r.u8("failed"); f {
			case 0, 1:
				m.Failed = f == 1
			default:
				if r.err == nil {
					r.err = ctrlErrorf("pool rebuilt: failed %d", f)
				}
			}
		}
	case (typ == CtrlPoolRebuild || typ == CtrlPoolGrant) && !m.Resp:
		m.Region = r.u32("region")
		m.Key = r.u64("key")
		r.pool(&m.Pool, false)
		m.Base = r.u64("base")
		m.Length = r.u64("length")
		m.Node = r.u16("column")
		m.Epoch = r.u64("epoch")
		m.Homes = r.homes(nil, m.Pool.Columns)
		if r.err == nil {
			r.err = m.validate()
		}
	case typ == CtrlPoolEpoch && !m.Resp:
		m.Region = r.u32("region")
		m.Key = r.u64("key")
		m.Epoch = r.u64("epoch")
		if r.err == nil {
			r.err = m.validate()
		}
	case typ == CtrlPoolReport && !m.Resp:
		m.Final = r.bool("final")
		n := r.count("reports", CtrlMaxReports, ctrlMinReport)
		reps := make([]PoolReport, 0, n)
		for range n {
			var p PoolReport
			p.Region = r.u32("report")
			p.Column = r.u16("report")
			r.pool(&p.Pool, false)
			p.Base = r.u64("report")
			p.Length = r.u64("report")
			p.Epoch = r.u64("report")
			if s, ok := r.take(PoolDigestLen, "report"); ok {
				p.Digest = [PoolDigestLen]byte(s)
			}
			p.Rebuilding = r.bool("report")
			p.Degraded = r.bool("report")
			p.Homes = r.homes(nil, p.Pool.Columns)
			if r.err == nil {
				r.err = p.validate()
			}
			if r.err != nil {
				break
			}
			reps = append(reps, p)
		}
		m.Reports = reps
	case typ == CtrlPoolOpen:
		r.pool(&m.Pool, false)
	case typ == CtrlJoinStatus && !m.Resp:
		m.Job = r.name("job", job)
	case typ == CtrlJoinStatus:
		m.Size = int(r.u16("size"))
		if r.err == nil && m.Size > CtrlMaxSize {
			r.err = ctrlErrorf("job size %d not in 0..%d", m.Size, CtrlMaxSize)
		}
		if set, ok := r.take((m.Size+7)/8, "joined ranks"); ok {
			m.Joined = append(m.Joined, set...)
			r.err = validateRanks(m.Size, m.Joined)
		}
	case typ == CtrlPoolStat && m.Resp:
		n := r.count("pool nodes", CtrlMaxPoolNodes, ctrlMinPoolNode)
		nodes := slices.Grow(m.PoolNodes, n)
		for range n {
			id, ap := r.member()
			info := PoolNodeInfo{ID: id, Addr: ap, Capacity: r.u64("pool node"), Used: r.u64("pool node")}
			switch alive := r.u8("pool node"); alive {
			case 0, 1:
				info.Alive = alive == 1
			default:
				if r.err == nil {
					r.err = ctrlErrorf("pool node %d: alive %d", id, alive)
				}
			}
			info.Requests, info.Bytes = r.u64("pool node"), r.u64("pool node")
			if r.err != nil {
				break
			}
			nodes = append(nodes, info)
		}
		m.PoolNodes = nodes
		k := r.count("pool regions", CtrlMaxPoolRegions, ctrlMinPoolRegion)
		regs := slices.Grow(m.PoolRegions, k)
		for range k {
			var p PoolSpec
			p.Region = r.u32("pool region")
			r.pool(&p, false)
			p.Lost, p.Rebuilding = int(r.u16("pool region")), int(r.u16("pool region"))
			p.Down, p.Health = int(r.u16("pool region")), PoolHealth(r.u8("pool region"))
			if r.err == nil && (p.Lost > p.Columns || p.Rebuilding > p.Lost || p.Down > p.Columns || p.Health > HealthLost) {
				r.err = ctrlErrorf("pool region %d: %d lost, %d rebuilding, %d down of %d columns, health %d", p.Region, p.Lost, p.Rebuilding, p.Down, p.Columns, p.Health)
			}
			if r.err != nil {
				break
			}
			regs = append(regs, p)
		}
		m.PoolRegions = regs
		m.PoolRefused = r.u64("pool refused")
	}
	if r.err != nil {
		return r.err
	}
	if len(r.b) != 0 {
		return ctrlErrorf("%d trailing bytes after %v fields", len(r.b), typ)
	}
	return nil
}

// ctrlMAC is an HMAC-SHA256 keyed with one token, kept in ctrlMACPool so
// that computing a tag does not allocate in the steady state.
type ctrlMAC struct {
	key []byte
	h   hash.Hash
	sum [sha256.Size]byte
}

var ctrlMACPool sync.Pool

// getCtrlMAC returns a reset HMAC keyed with token; the caller puts it back
// in ctrlMACPool when done.
func getCtrlMAC(token []byte) *ctrlMAC {
	if c, ok := ctrlMACPool.Get().(*ctrlMAC); ok && bytes.Equal(c.key, token) {
		c.h.Reset()
		return c
	}
	return &ctrlMAC{key: bytes.Clone(token), h: hmac.New(sha256.New, token)}
}

// tag returns the truncated HMAC of msg; it is valid until c is reused.
func (c *ctrlMAC) tag(msg []byte) []byte {
	c.h.Write(msg)
	return c.h.Sum(c.sum[:0])[:CtrlTagLen]
}
