package ctrl

import (
	"encoding/binary"
	"net/netip"

	"github.com/ndma/ndma/wire"
)

// Append encodes m (its type, flags and fields: everything up to the tag)
// and returns the extended slice. If a field is out of range (a name too
// long or empty, a size or rank out of range, a list too long, an invalid
// or zoned address, an unknown type) it returns dst unchanged and an error
// wrapping ErrMalformed: everything Append accepts, Parse accepts.
// secure.AppendCtrl appends the tag.
func Append(dst []byte, m *Msg) ([]byte, error) {
	if err := m.validate(); err != nil {
		return dst, err
	}
	return m.appendFields(dst), nil
}

// appendFields appends the type, flags and fields of m, which validate
// accepted: the header here, the fields by appendGroup or appendPoolMsg.
func (m *Msg) appendFields(b []byte) []byte {
	var flags byte
	if m.Resp {
		flags |= flagResp
	}
	b = append(b, byte(m.Type), flags)
	if m.Type.pool() {
		return m.appendPoolMsg(b)
	}
	return m.appendGroup(b)
}

// appendGroup appends the fields of a group or service message.
func (m *Msg) appendGroup(b []byte) []byte {
	be := binary.BigEndian
	switch {
	case (m.Type == Join || m.Type == JoinVia) && !m.Resp:
		b = appendName(b, m.Job)
		b = be.AppendUint16(b, uint16(m.Size))
		b = appendRank(b, m.Rank)
		b = be.AppendUint16(b, uint16(m.MTU))
		if m.Type == JoinVia {
			b = appendMembers(b, m.Members)
		}
	case m.Type == Join || m.Type == JoinVia:
		b = be.AppendUint32(b, m.Group)
		b = be.AppendUint16(b, m.Member)
		b = be.AppendUint64(b, m.Epoch)
		b = appendMembers(b, m.Members)
	case m.Type == Leave && !m.Resp, m.Type == Heartbeat && !m.Resp, m.Type == MemberGone && !m.Resp:
		b = be.AppendUint32(b, m.Group)
		b = be.AppendUint16(b, m.Member)
	case m.Type == Destroy && !m.Resp:
		b = be.AppendUint32(b, m.Group)
	case m.Type == Heartbeat && m.Resp:
		b = be.AppendUint64(b, m.Epoch)
		b = be.AppendUint16(b, uint16(len(m.Dead)))
		for _, id := range m.Dead {
			b = be.AppendUint16(b, id)
		}
	case m.Type == Register && !m.Resp:
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
	case m.Type == Register:
		b = be.AppendUint32(b, m.Group)
		b = be.AppendUint16(b, m.Member)
	case m.Type == Lookup && !m.Resp:
		b = appendName(b, m.Service)
		b = be.AppendUint16(b, uint16(m.MTU))
	case m.Type == Lookup:
		b = be.AppendUint32(b, m.Group)
		b = appendMembers(b, m.Members)
	case m.Type == JoinStatus && !m.Resp:
		b = appendName(b, m.Job)
	case m.Type == JoinStatus:
		b = be.AppendUint16(b, uint16(m.Size))
		b = append(b, m.Joined...)
	}
	return b
}

// appendPoolMsg appends the fields of a pool message.
func (m *Msg) appendPoolMsg(b []byte) []byte {
	be := binary.BigEndian
	switch {
	case m.Type == PoolNode && !m.Resp:
		b = be.AppendUint64(b, m.Key)
		b = be.AppendUint64(b, m.Capacity)
		b = be.AppendUint64(b, m.Epoch)
		b = appendBool(b, m.Kept)
	case m.Type == PoolNode:
		b = be.AppendUint16(b, m.Node)
		b = be.AppendUint64(b, m.Epoch)
	case m.Type == PoolCreate && !m.Resp:
		b = appendPool(b, &m.Pool)
	case m.Type == PoolCreate:
		b = be.AppendUint32(b, m.Region)
		b = be.AppendUint64(b, m.Key)
		b = appendPool(b, &m.Pool)
	case m.Type == PoolOpen && !m.Resp, m.Type == PoolFree && !m.Resp, m.Type == PoolRevoke && !m.Resp:
		b = be.AppendUint32(b, m.Region)
		b = be.AppendUint64(b, m.Key)
	case (m.Type == PoolRebuildGo || m.Type == PoolRebuilt || m.Type.column()) && !m.Resp:
		b = be.AppendUint32(b, m.Region)
		b = be.AppendUint64(b, m.Key)
		b = be.AppendUint16(b, m.Node)
		if m.Type == PoolRebuilt {
			failed := byte(0)
			if m.Failed {
				failed = 1
			}
			b = append(b, failed)
		}
	case (m.Type == PoolRebuild || m.Type == PoolGrant) && !m.Resp:
		b = be.AppendUint32(b, m.Region)
		b = be.AppendUint64(b, m.Key)
		b = appendPool(b, &m.Pool)
		b = be.AppendUint64(b, m.Base)
		b = be.AppendUint64(b, m.Length)
		b = be.AppendUint16(b, m.Node)
		b = be.AppendUint64(b, m.Epoch)
		b = appendHomes(b, m.Homes)
		b = appendFences(b, m.Fences)
	case m.Type == PoolEpoch && !m.Resp:
		b = be.AppendUint32(b, m.Region)
		b = be.AppendUint64(b, m.Key)
		b = be.AppendUint64(b, m.Epoch)
	case m.Type == PoolReport && !m.Resp:
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
			b = be.AppendUint64(b, p.Key)
			b = appendBool(b, p.Rebuilding)
			b = appendBool(b, p.Degraded)
			b = appendHomes(b, p.Homes)
			b = appendFences(b, p.Fences)
		}
	case m.Type == PoolOpen:
		b = appendPool(b, &m.Pool)
	case m.Type == PoolStat && m.Resp:
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
			b = append(b, byte(len(n.Name)))
			b = append(b, n.Name...)
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

// appendFences appends a region's fences: their count, then each id and
// token.
func appendFences(b []byte, fs []wire.Fence) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(fs)))
	for _, f := range fs {
		b = wire.AppendFence(b, f)
	}
	return b
}

func appendName(b []byte, s string) []byte {
	b = append(b, byte(len(s)))
	return append(b, s...)
}

func appendRank(b []byte, rank int) []byte {
	if rank == RankAny {
		return binary.BigEndian.AppendUint16(b, rankAnyWire)
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
