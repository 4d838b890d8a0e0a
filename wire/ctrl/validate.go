package ctrl

import (
	"fmt"

	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/poolmap"
)

// validateMTU checks the MTU field of a Join, Register or Lookup request.
func validateMTU(mtu int) error {
	if mtu < MinMTU || mtu > MaxMTU {
		return malformedf("mtu %d not in %d..%d", mtu, MinMTU, MaxMTU)
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

func malformedf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}

// validate checks the fields m's type uses against the limits.
func (m *Msg) validate() error {
	switch m.Type {
	case Join, JoinVia:
		if m.Resp {
			return validateMembers(m.Members)
		}
		if m.Type == JoinVia {
			if err := validateJoinVia(m); err != nil {
				return err
			}
		}
		if err := validateName("job", m.Job); err != nil {
			return err
		}
		if m.Size < 1 || m.Size > MaxSize {
			return malformedf("job size %d not in 1..%d", m.Size, MaxSize)
		}
		if m.Rank != RankAny && (m.Rank < 0 || m.Rank >= m.Size) {
			return malformedf("rank %d not in 0..%d", m.Rank, m.Size-1)
		}
		return validateMTU(m.MTU)
	case Leave, Destroy, MemberGone:
	case Heartbeat:
		if m.Resp && len(m.Dead) > MaxMembers {
			return malformedf("%d dead members > %d", len(m.Dead), MaxMembers)
		}
	case Register:
		if m.Resp {
			return nil
		}
		if err := validateName("service", m.Service); err != nil {
			return err
		}
		if m.Size < 1 || m.Size > MaxSize {
			return malformedf("size %d not in 1..%d", m.Size, MaxSize)
		}
		if m.Rank != RankAny && (m.Rank < 0 || m.Rank >= m.Size) {
			return malformedf("rank %d not in 0..%d", m.Rank, m.Size-1)
		}
		if len(m.Ranges) > MaxRanges {
			return malformedf("%d ranges > %d", len(m.Ranges), MaxRanges)
		}
		for i := range m.Ranges {
			if n := len(m.Ranges[i].Replicas); n > MaxReplicas {
				return malformedf("range %d: %d replicas > %d", i, n, MaxReplicas)
			}
		}
		return validateMTU(m.MTU)
	case Lookup:
		if m.Resp {
			return validateMembers(m.Members)
		}
		if err := validateName("service", m.Service); err != nil {
			return err
		}
		return validateMTU(m.MTU)
	case PoolNode:
		if !m.Resp && m.Key == 0 {
			return malformedf("pool node: %s: want a non-zero key", keyState(m.Key))
		}
	case PoolCreate:
		return validatePool(&m.Pool, !m.Resp)
	case PoolOpen:
		if m.Resp {
			return validatePool(&m.Pool, false)
		}
	case PoolFree, PoolRevoke, PoolRebuildGo, PoolRebuilt, PoolColumnLost, PoolColumnGrant, PoolColumnRestored:
	case PoolRebuild, PoolGrant:
		if m.Resp {
			return nil
		}
		if m.Region == 0 || m.Key == 0 || m.Length == 0 {
			return malformedf("%v: region %d, %s, length %d: want all non-zero", m.Type, m.Region, keyState(m.Key), m.Length)
		}
		if err := validatePool(&m.Pool, false); err != nil {
			return err
		}
		if m.Pool.Perm&^uint8(wire.PermAll) != 0 {
			return malformedf("%v: perm %#x", m.Type, m.Pool.Perm)
		}
		if int(m.Node) >= m.Pool.Columns {
			return malformedf("%v: column %d of %d", m.Type, m.Node, m.Pool.Columns)
		}
		if err := validateHomes(m.Homes, m.Pool.Columns); err != nil {
			return err
		}
		return validateFences(m.Fences)
	case PoolEpoch:
		if !m.Resp && (m.Region == 0 || m.Key == 0) {
			return malformedf("pool epoch: region %d, %s: want both non-zero", m.Region, keyState(m.Key))
		}
	case PoolReport:
		if m.Resp {
			return nil
		}
		if len(m.Reports) > MaxReports {
			return malformedf("%d reports > %d", len(m.Reports), MaxReports)
		}
		for i := range m.Reports {
			if err := m.Reports[i].validate(); err != nil {
				return err
			}
		}
	case JoinStatus:
		if !m.Resp {
			return validateName("job", m.Job)
		}
		return validateRanks(m.Size, m.Joined)
	case PoolStat:
		if !m.Resp {
			return nil
		}
		if len(m.PoolNodes) > MaxPoolNodes || len(m.PoolRegions) > MaxPoolRegions {
			return malformedf("%d pool nodes (max %d), %d regions (max %d)", len(m.PoolNodes), MaxPoolNodes, len(m.PoolRegions), MaxPoolRegions)
		}
		for i := range m.PoolNodes {
			if len(m.PoolNodes[i].Name) > MaxName {
				return malformedf("pool node %d: name of %d bytes (max %d)", m.PoolNodes[i].ID, len(m.PoolNodes[i].Name), MaxName)
			}
			if a := m.PoolNodes[i].Addr.Addr(); !a.IsValid() || a.Zone() != "" {
				return malformedf("pool node %d: address %v is invalid or has a zone", m.PoolNodes[i].ID, m.PoolNodes[i].Addr)
			}
		}
		for i := range m.PoolRegions {
			p := &m.PoolRegions[i]
			if err := validatePool(p, false); err != nil {
				return err
			}
			if p.Lost < 0 || p.Lost > p.Columns || p.Rebuilding < 0 || p.Rebuilding > p.Lost {
				return malformedf("pool region %d: %d lost, %d rebuilding of %d columns", p.Region, p.Lost, p.Rebuilding, p.Columns)
			}
		}
	default:
		return malformedf("unknown type %d", uint8(m.Type))
	}
	return nil
}

// validateHomes checks a region's homes: one per column, valid unzoned
// addresses.
func validateHomes(hs []PoolHome, columns int) error {
	if len(hs) != columns {
		return malformedf("%d homes for %d columns", len(hs), columns)
	}
	for i := range hs {
		if a := hs[i].Addr.Addr(); !a.IsValid() || a.Zone() != "" {
			return malformedf("home %d: address %v is invalid or has a zone", i, hs[i].Addr)
		}
	}
	return nil
}

// validate checks a report entry's fields.
func (p *GrantReport) validate() error {
	if p.Region == 0 || p.Length == 0 {
		return malformedf("pool report: region %d, length %d: want both non-zero", p.Region, p.Length)
	}
	if err := validatePool(&p.Pool, false); err != nil {
		return err
	}
	if int(p.Column) >= p.Pool.Columns {
		return malformedf("pool report: region %d: column %d of %d", p.Region, p.Column, p.Pool.Columns)
	}
	if p.Key != 0 && PoolKeyDigest(p.Region, p.Key) != p.Digest {
		return malformedf("pool report: region %d: the key does not match the digest", p.Region)
	}
	if err := validateHomes(p.Homes, p.Pool.Columns); err != nil {
		return err
	}
	return validateFences(p.Fences)
}

// validateFences checks a region's fences: at most wire.MaxFences, in
// increasing id order (each id once), none with token 0.
func validateFences(fs []wire.Fence) error {
	if len(fs) > wire.MaxFences {
		return malformedf("%d fences > %d", len(fs), wire.MaxFences)
	}
	for i, f := range fs {
		if f.Token == 0 {
			return malformedf("fence %d: token 0", f.ID)
		}
		if i > 0 && f.ID <= fs[i-1].ID {
			return malformedf("fence ids out of order: %d after %d", f.ID, fs[i-1].ID)
		}
	}
	return nil
}

// validatePool checks a pool shape's ranges; request allows Columns 0.
func validatePool(p *PoolSpec, request bool) error {
	minCols := 1
	if request {
		minCols = 0
	}
	switch {
	case p.Size < 1 || p.Size > poolmap.MaxRegionSize:
		return malformedf("pool size %d not in 1..%d", p.Size, uint64(poolmap.MaxRegionSize))
	case p.Stripe < poolmap.MinStripe || p.Stripe > poolmap.MaxStripe || p.Stripe%8 != 0:
		return malformedf("pool stripe %d: want a multiple of 8 in %d..%d", p.Stripe, poolmap.MinStripe, poolmap.MaxStripe)
	case p.Columns < minCols || p.Columns > poolmap.MaxColumns:
		return malformedf("pool columns %d not in %d..%d", p.Columns, minCols, poolmap.MaxColumns)
	case p.Replicas < 1 || p.Replicas > poolmap.MaxReplicas:
		return malformedf("pool replicas %d not in 1..%d", p.Replicas, poolmap.MaxReplicas)
	case p.Perm == 0 || p.Perm&^0x0f != 0:
		return malformedf("pool permissions %#x: want a non-zero set of the 4 bits", p.Perm)
	}
	return nil
}

// validateRanks checks a ranks field: size in 0..MaxSize, a bit set
// of (size+7)/8 bytes with no bit past size.
func validateRanks(size int, set []byte) error {
	if size < 0 || size > MaxSize {
		return malformedf("job size %d not in 0..%d", size, MaxSize)
	}
	if len(set) != (size+7)/8 {
		return malformedf("%d bytes of ranks for size %d, want %d", len(set), size, (size+7)/8)
	}
	if size%8 != 0 && set[len(set)-1]>>(size%8) != 0 {
		return malformedf("ranks set past size %d", size)
	}
	return nil
}

func validateName(what, s string) error {
	if len(s) < 1 || len(s) > MaxName {
		return malformedf("%s name of %d bytes not in 1..%d", what, len(s), MaxName)
	}
	return nil
}

func validateMembers(ms []MemberInfo) error {
	if len(ms) > MaxMembers {
		return malformedf("%d members > %d", len(ms), MaxMembers)
	}
	for i := range ms {
		a := ms[i].Addr.Addr()
		if !a.IsValid() || a.Zone() != "" {
			return malformedf("member %d: address %v is invalid or has a zone", ms[i].ID, ms[i].Addr)
		}
	}
	return nil
}

// validateJoinVia checks a JoinVia request's joiner entry: exactly one,
// naming the rank asked (0xffff for any) and a usable address.
func validateJoinVia(m *Msg) error {
	if len(m.Members) != 1 {
		return malformedf("joinvia with %d joiner entries, want 1", len(m.Members))
	}
	j := m.Members[0]
	want := uint16(rankAnyWire)
	if m.Rank != RankAny {
		want = uint16(m.Rank)
	}
	if j.ID != want || !j.Addr.IsValid() || j.Addr.Port() == 0 || j.Addr.Addr().IsUnspecified() {
		return malformedf("joinvia joiner %d at %v for rank %d", j.ID, j.Addr, m.Rank)
	}
	return nil
}
