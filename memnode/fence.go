package memnode

import (
	"fmt"

	"github.com/ndma/ndma/wire"
)

// Fences (wire.Fence): per grant, the highest token raised for each
// fence id. A fenced request is applied only with a token at least the
// fence's; one for a fence id the grant holds no token of is refused
// too, so a copy that lost its fences (a grant made again without them)
// never lets an earlier holder in. Entries come from raises the switch
// forwards (OpFence) and from the grant itself (a rebuilt copy takes the
// region's fences from the switch); they live as long as the grant.
// wire.MaxFences bound a grant's, MaxNodeFences the node's.

// MaxNodeFences bounds the fences a node holds over all its grants: a
// raise past it is refused with StatusBusy, a grant carrying too many
// with ErrGrant.
const MaxNodeFences = 1 << 16

// Raise raises fence f of pool region h.Group to f.Token: h.Key must
// open the region's grant, which must allow writes, and h.Addr lie
// inside it. A token below the fence's is refused with StatusFenced,
// one more than wire.MaxFenceStep above it with StatusBadOperand, a new
// fence id past the bounds with StatusBusy. Result.Old is the
// fence's token after the raise (before it, when refused).
func (p *PoolNode) Raise(h *wire.Header, f wire.Fence) Result {
	g, ok := p.grants[h.Group]
	switch {
	case !ok || g.Key != h.Key:
		return Result{Status: wire.StatusBadKey}
	case g.Perm&wire.PermWrite == 0:
		return Result{Status: wire.StatusPermission}
	case h.Addr < g.Base || h.Addr-g.Base >= g.Len:
		return Result{Status: wire.StatusOutOfBounds}
	case f.Token == 0:
		return Result{Status: wire.StatusBadOperand}
	}
	fs := p.fences[h.Group]
	cur, ok := fs[f.ID]
	switch {
	case ok && f.Token < cur:
		return Result{Status: wire.StatusFenced, Old: cur}
	case f.Token-cur > wire.MaxFenceStep:
		return Result{Status: wire.StatusBadOperand, Old: cur}
	case !ok && (len(fs) >= wire.MaxFences || p.nfences >= MaxNodeFences):
		return Result{Status: wire.StatusBusy}
	case !ok && fs == nil:
		fs = make(map[uint32]uint64)
		p.fences[h.Group] = fs
	}
	if !ok {
		p.nfences++
	}
	fs[f.ID] = f.Token
	return Result{Old: f.Token}
}

// ExecFenced is Exec for a request carrying fence f: refused with
// StatusFenced (Result.Old: the fence's token, 0 if it has none) unless
// the region's grant holds a token for f.ID and f.Token is at least it.
func (p *PoolNode) ExecFenced(h *wire.Header, f wire.Fence, payload []byte) Result {
	if res := p.Admit(h, f); res.Status != wire.StatusOK {
		return res
	}
	return p.Exec(h, payload)
}

// Admit checks a request carrying fence f against the fences of the
// region's grant (h.Group, opened by h.Key): StatusOK if the grant holds
// a token for f.ID that f.Token is at least, StatusFenced (Result.Old:
// the fence's token, 0 if it has none) if not, StatusBadKey without the
// grant.
func (p *PoolNode) Admit(h *wire.Header, f wire.Fence) Result {
	g, ok := p.grants[h.Group]
	if !ok || g.Key != h.Key {
		return Result{Status: wire.StatusBadKey}
	}
	cur, ok := p.fences[h.Group][f.ID]
	if !ok || f.Token < cur {
		return Result{Status: wire.StatusFenced, Old: cur}
	}
	return Result{}
}

// Fences returns region's fences in increasing id order (nil if none).
func (p *PoolNode) Fences(region uint32) []wire.Fence { return wire.FenceList(p.fences[region]) }

// checkFences checks the fences a grant brings against the bounds, the
// node's fences of the grant it replaces (old) given back.
func (p *PoolNode) checkFences(fs []wire.Fence, old int) error {
	if len(fs) > wire.MaxFences || p.nfences-old+len(fs) > MaxNodeFences {
		return fmt.Errorf("%w: %d fences (a grant holds at most %d, the node %d)", ErrGrant, len(fs), wire.MaxFences, MaxNodeFences)
	}
	for _, f := range fs {
		if f.Token == 0 {
			return fmt.Errorf("%w: fence %d with token 0", ErrGrant, f.ID)
		}
	}
	return nil
}

// setFences installs fs as region's fences (its grant is new: it has
// none).
func (p *PoolNode) setFences(region uint32, fs []wire.Fence) {
	if len(fs) == 0 {
		return
	}
	m := make(map[uint32]uint64, len(fs))
	for _, f := range fs {
		m[f.ID] = max(m[f.ID], f.Token)
	}
	p.fences[region] = m
	p.nfences += len(m)
}
