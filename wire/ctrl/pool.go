package ctrl

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/ndma/ndma/wire"
)

// PoolSpec is a pool region's shape: what PoolCreate asks for and what
// PoolCreate, PoolOpen and PoolStat report.
type PoolSpec struct {
	Region   uint32 // region id (responses and PoolRegions)
	Size     uint64 // bytes, 1..poolmap.MaxRegionSize
	Stripe   uint64 // interleave unit in bytes: a multiple of 8, poolmap.MinStripe..poolmap.MaxStripe
	Columns  int    // memory nodes it spans, 1..poolmap.MaxColumns; 0 in a request: all live ones
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

// GrantReport is one grant a memory node holds, as PoolReport carries
// it: column Column of region Region, shaped Pool (Region unused), the
// Length bytes at Base of the node's lent region, the region's Epoch as
// the switch last set it, the digest of the region's key (PoolKeyDigest:
// the key itself never leaves the node), where every column lives, and
// whether the copy is being rebuilt (incomplete) or took writes its other
// copy missed since Epoch was set (Degraded).
type GrantReport struct {
	Region uint32
	Column uint16
	Pool   PoolSpec
	Base   uint64
	Length uint64
	Epoch  uint64
	Digest [PoolDigestLen]byte
	// Key is the region's key itself, or 0: a node gives it only to a
	// switch whose credential it verified, over a sealed session, so
	// that a restarted switch can rebuild lost copies before any client
	// uses the region (on a fabric that does not seal, only Digest).
	Key        uint64
	Rebuilding bool
	Degraded   bool
	Homes      []PoolHome // by column: Pool.Columns entries
	// Fences is the fences the copy holds (wire.Fence), in increasing
	// id order: a restarted switch keeps the highest token of each.
	Fences []wire.Fence
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

// PoolNodeInfo is one memory node of the pool, as PoolStat reports it.
type PoolNodeInfo struct {
	ID       uint16
	Addr     netip.AddrPort
	Name     string // the name of the credential it registered with (none on a fabric that does not seal: empty), at most MaxName bytes
	Capacity uint64 // bytes lent to the pool
	Used     uint64 // bytes given to regions
	Alive    bool
	Requests uint64 // pool requests forwarded to it since the switch started (one per copy and chain hop)
	Bytes    uint64 // their payload bytes (requests only: read data comes back from the node)
}
