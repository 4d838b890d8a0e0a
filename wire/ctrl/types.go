package ctrl

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"

	"github.com/ndma/ndma/wire"
)

// Type says what a control message asks for (or answers, with Resp).
// The numbers are part of the wire format.
type Type uint8

// Control message types.
const (
	// Join registers the sender as a member of job Job of Size members
	// at Rank (RankAny: the switch picks one). The response, sent when
	// all Size members have joined, carries the Group, the sender's Member
	// id, the Members table and the group's Epoch.
	Join Type = 1
	// Leave removes Member from Group. The response has no fields.
	Leave Type = 2
	// Destroy tears Group down. The response has no fields.
	Destroy Type = 3
	// Heartbeat tells the switch that Member of Group is alive. The
	// response carries the group's Epoch and the ids of its Dead members.
	Heartbeat Type = 4
	// Register registers the sender as a member of anycast service
	// group Service of Size members, with selection Policy, the key Ranges
	// it serves and its Rank (RankAny: the switch picks one). The
	// response carries the service's Group and the sender's Member id.
	Register Type = 5
	// Lookup asks for service group Service. The response carries its
	// Group and Members table.
	Lookup Type = 6
	// PoolNode registers the sender, a memory node, as lending
	// Capacity bytes of its region Key to the pool (sent again as its
	// heartbeat), with the Epoch of its incarnation: a node that comes
	// back with another one restarted and lost its memory. The response
	// carries its Node id and the switch's own incarnation in Epoch: a node
	// that has not yet reported its grants to that incarnation sends
	// PoolReport. Capacity 0 says the node stops lending (it shuts
	// down): it is dead at once, and forgotten if it holds no copies.
	PoolNode Type = 7
	// PoolCreate creates a pool region as Pool asks. The response
	// carries its Region id, its Key and the Pool as created.
	PoolCreate Type = 8
	// PoolOpen asks for region Region's layout, proving access with
	// its Key. The response carries the Pool.
	PoolOpen Type = 9
	// PoolFree frees region Region (Key must open it). The response
	// has no fields.
	PoolFree Type = 10
	// PoolStat asks for the pool's memory nodes and regions (without
	// their keys). The response carries PoolNodes and PoolRegions.
	PoolStat Type = 11
	// PoolGrant, from the switch to a memory node, gives column Node
	// of pool region Region (accesses carry Key and may do Pool.Perm) the
	// Length bytes at Base of the node's lent region. The node zeroes them
	// first. Pool (the region's shape), Homes (where every column lives)
	// and Epoch (the region's) are the switch's map record, which the node
	// keeps and reports back (PoolReport). The response has no fields.
	PoolGrant Type = 12
	// PoolRevoke, from the switch to a memory node, takes region
	// Region's grant (Key) back. The response has no fields.
	PoolRevoke Type = 13
	// PoolRebuild, from the switch to a restarted memory node, grants
	// it again the Length bytes at Base for column Node of region Region
	// (Key, Pool: its shape and permissions; Homes and Epoch as in
	// PoolGrant), to be rebuilt from the other copies: the node zeroes
	// them and remembers which bytes clients write from now on. The
	// response has no fields.
	PoolRebuild Type = 14
	// PoolRebuildGo, from the switch, tells the node to copy column
	// Node of region Region (Key) from the other copies, reading the
	// region through the switch and filling only bytes no client has
	// written since the rebuild grant. The response has no fields.
	PoolRebuildGo Type = 15
	// PoolRebuilt, from the memory node to the switch, reports the
	// rebuild of column Node of region Region (Key) done, or failed with
	// Failed set. The response has no fields.
	PoolRebuilt Type = 16
	// JoinStatus asks what the rendezvous of job Job holds: a joiner
	// whose wait ended says who is missing. The response carries the
	// job's Size and the ranks that Joined, or Size 0 when the switch
	// holds no rendezvous for the job (none was started, it expired, or
	// the group formed).
	JoinStatus Type = 17
	// PoolReport, from a memory node to the switch, lists the grants
	// the node holds (Reports), so that a switch that restarted rebuilds
	// its map of the pool from the nodes. A node sends it when the
	// switch's incarnation (PoolNode's response) is one it has not
	// reported to, in as many messages as its grants need, the last one
	// with Final set. The response has no fields.
	PoolReport Type = 18
	// PoolEpoch, from the switch to a memory node, sets the Epoch of
	// region Region's grant (Key): the region's other copy missed writes
	// and this one is the current one. The response has no fields.
	PoolEpoch Type = 19
	// PoolColumnLost, from a client of a region with one copy, reports
	// column Node of region Region (Key) stale: the client wrote around
	// it (an erasure-coded write with a shard unreachable). The switch
	// serves the column no more (StatusLost) until it is restored. The
	// response has no fields.
	PoolColumnLost Type = 20
	// PoolColumnGrant, from a client of a region with one copy, asks the
	// switch to grant lost column Node of region Region (Key) again to
	// its memory node, zeroed, for the client to rewrite: once the node
	// accepted, the switch forwards writes to the column (reads are
	// still refused) and answers OK; until then it answers StatusBusy,
	// and the client asks again. The response has no fields.
	PoolColumnGrant Type = 21
	// PoolColumnRestored, from the client that rewrote column Node of
	// region Region (Key) after PoolColumnGrant, makes the column serve
	// reads again. The response has no fields.
	PoolColumnRestored Type = 22
	// JoinVia, from a switch to the switch above it in a tree of
	// switches (its parent), joins a process of its subtree to job Job:
	// the fields of a Join request (Job, Size, Rank, MTU) and one
	// Members entry, the joiner's own address (its ID the rank asked,
	// or 0xffff for any). The parent answers as it answers Join, when
	// every rank of the job has joined, anywhere in the tree; the group
	// id it gives is the job's at every switch of the tree.
	JoinVia Type = 23
	// MemberGone, from a switch of a tree to a neighbor switch, reports
	// Member of Group dead (its heartbeats stopped, or its switch's
	// did): the fields of a Leave request, which reports one that left
	// on its own. The response has no fields.
	MemberGone Type = 24
	lastType        = MemberGone
)

var typeNames = [...]string{
	Join: "join", Leave: "leave", Destroy: "destroy",
	Heartbeat: "heartbeat", Register: "register", Lookup: "lookup",
	PoolNode: "poolnode", PoolCreate: "poolcreate", PoolOpen: "poolopen",
	PoolFree: "poolfree", PoolStat: "poolstat",
	PoolGrant: "poolgrant", PoolRevoke: "poolrevoke",
	PoolRebuild: "poolrebuild", PoolRebuildGo: "poolrebuildgo", PoolRebuilt: "poolrebuilt",
	JoinStatus: "joinstatus", PoolReport: "poolreport", PoolEpoch: "poolepoch",
	PoolColumnLost: "poolcolumnlost", PoolColumnGrant: "poolcolumngrant", PoolColumnRestored: "poolcolumnrestored",
	JoinVia: "joinvia", MemberGone: "membergone",
}

// CarriesMTU reports whether requests of type t carry the sender's MTU
// (Join, JoinVia, Register, Lookup).
func (t Type) CarriesMTU() bool {
	return t == Join || t == JoinVia || t == Register || t == Lookup
}

// String is the short lower-case name of the type, or "ctrl(N)" for a
// number this version does not define.
func (t Type) String() string {
	if t != 0 && int(t) < len(typeNames) && typeNames[t] != "" {
		return typeNames[t]
	}
	return fmt.Sprintf("ctrl(%d)", uint8(t))
}

// Limits of control message fields. They are part of the wire format: a
// message beyond them is malformed.
const (
	MaxName        = 64             // longest Job or Service name, in bytes (the shortest is 1)
	MaxSize        = 4096           // largest Join or Register Size (ranks are below Size)
	MaxMembers     = 4096           // most entries in Members and in Dead
	MaxRanges      = 4096           // most entries in Ranges
	MaxReplicas    = 8              // most Replicas of one Range
	MaxPoolNodes   = 1024           // most entries in PoolNodes: the pool's memory nodes
	MaxPoolRegions = 4096           // most entries in PoolRegions: the pool's regions
	MaxReports     = MaxPoolRegions // most entries in Reports
	RankAny        = -1             // Rank: let the switch choose
	// MinMTU and MaxMTU bound MTU in Join, Register and Lookup
	// requests, in bytes: what a transport accepts as its MTU
	// (transport.MinMTU, transport.MaxMTU: a header and 64 bytes of
	// payload, and the largest UDP payload over IPv4).
	MinMTU = wire.HeaderLen + 64
	MaxMTU = 65507
)

// rankAnyWire is RankAny on the wire.
const rankAnyWire = 0xFFFF

// flagResp is bit 0 of the flags byte.
const flagResp = 1 << 0

// ErrMalformed means the bytes (or, from Append, the fields) are not a
// valid control message. Parse and Append wrap it with a detail; compare
// with errors.Is.
var ErrMalformed = errors.New("fabric: malformed control message")

// MemberInfo is one entry of a group's member table.
type MemberInfo struct {
	ID   uint16         // member id within the group
	Addr netip.AddrPort // the member's UDP address: IPv4 or IPv6, no zone
}

// Range is a range of keys a service member serves (for the key-owner
// anycast policy). The codec carries the values as they are; their meaning
// and consistency are checked by the switch.
type Range struct {
	Start, End uint64  // the key range
	Owner      int32   // rank of the member that owns it
	Replicas   []int32 // ranks holding replicas; at most MaxReplicas
}

// Msg is one control request or response. Only the fields its Type and
// Resp use are encoded (see the layout in the package documentation); the
// others are ignored by Append and zeroed by Parse.
type Msg struct {
	Type    Type
	Resp    bool         // a response (flags bit 0)
	Job     string       // Join and JoinStatus requests: job name, 1..MaxName bytes
	Service string       // Register and Lookup requests: service name, 1..MaxName bytes
	Size    int          // Join and Register requests: number of members, 1..MaxSize; JoinStatus response: the job's, 0..MaxSize (0: no rendezvous)
	Rank    int          // Join and Register requests: RankAny or 0..Size-1
	Group   uint32       // group id
	Member  uint16       // member id within Group
	Epoch   uint64       // Join and Heartbeat responses: group membership epoch; PoolNode request: the node's incarnation; PoolNode response: the switch's; PoolGrant, PoolRebuild, PoolEpoch requests: the region's epoch
	Policy  uint8        // Register request: anycast selection policy, interpreted by the switch
	Ranges  []Range      // Register request: at most MaxRanges
	Members []MemberInfo // Join and Lookup responses: at most MaxMembers
	Dead    []uint16     // Heartbeat response: ids of dead members, at most MaxMembers
	// JoinStatus response: the ranks that joined, as a bit set of
	// (Size+7)/8 bytes: bit r%8 (least significant first) of byte r/8 is
	// rank r; the bits past Size are zero. JoinedRanks lists them.
	Joined []byte
	// Join, Register and Lookup requests: the largest datagram the sender
	// sends, in bytes (its transport MTU), MinMTU..MaxMTU. The
	// switch refuses a sender whose datagrams it could not send back,
	// and a job member whose MTU differs from the others' (their
	// messages would be cut into fragments that do not line up).
	MTU int

	Region      uint32         // PoolOpen, PoolFree, PoolGrant, PoolRevoke, PoolEpoch requests, PoolCreate response
	Key         uint64         // PoolNode request (the node's region), PoolOpen and PoolFree requests, PoolCreate response (the new region's key)
	Capacity    uint64         // PoolNode request
	Kept        bool           // PoolNode request: the node kept its memory and grants from an earlier start (a durable memory node) and reports them
	Node        uint16         // PoolNode response; PoolGrant, PoolRebuild, PoolRebuildGo, PoolRebuilt, PoolColumn*: the column
	Pool        PoolSpec       // PoolCreate request and response, PoolOpen response
	PoolNodes   []PoolNodeInfo // PoolStat response: at most MaxPoolNodes
	PoolRegions []PoolSpec     // PoolStat response: at most MaxPoolRegions
	PoolRefused uint64         // PoolStat response: pool requests the switch refused since it started
	Failed      bool           // PoolRebuilt request: the rebuild failed
	Base        uint64         // PoolGrant request: offset of the extent in the node's lent region
	Length      uint64         // PoolGrant request: bytes of the extent, not 0
	Homes       []PoolHome     // PoolGrant and PoolRebuild requests: Pool.Columns entries
	// Fences is the region's fences (wire.Fence) in PoolGrant and
	// PoolRebuild requests: a rebuilt copy refuses what the other copies
	// refuse from its first write on. At most wire.MaxFences, in
	// increasing id order.
	Fences  []wire.Fence
	Reports []GrantReport // GrantReport request: at most MaxReports
	Final   bool          // GrantReport request: the last of the node's report
}

// JoinedRanks lists the ranks of a JoinStatus response's Joined set, in
// increasing order.
func (m *Msg) JoinedRanks() []int {
	var ranks []int
	for i, b := range m.Joined {
		for ; b != 0; b &= b - 1 {
			ranks = append(ranks, 8*i+bits.TrailingZeros8(b))
		}
	}
	return ranks
}

// pool reports whether t is a pool message (PoolNode to
// PoolColumnRestored, but not JoinStatus).
func (t Type) pool() bool { return t >= PoolNode && t <= PoolColumnRestored && t != JoinStatus }

// column reports whether t is one of a client's requests about a column
// of a region (PoolColumnLost, PoolColumnGrant, PoolColumnRestored).
func (t Type) column() bool {
	return t == PoolColumnLost || t == PoolColumnGrant || t == PoolColumnRestored
}
