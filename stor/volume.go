package stor

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/ndma/ndma/secure"
)

// Limits of a volume.
const (
	// MaxIO is the most bytes one read request or one write multicast
	// carries; larger transfers are split.
	MaxIO = 1 << 20
	// MinExtent and MaxExtent bound a volume's extent size (a power of two).
	MinExtent = 64 << 10
	MaxExtent = 1 << 30
	// MaxExtents bounds the extents of one volume.
	MaxExtents = 1 << 20
	// MaxReplicas bounds the copies of an extent.
	MaxReplicas = 8
	// MaxNodes bounds the storage nodes of one service (node ids are
	// 0..MaxNodes-1).
	MaxNodes = 1024
	// MaxName is the longest volume name.
	MaxName = 48
	// MaxVolumes bounds the volumes one storage node holds.
	MaxVolumes = 4096
	// MaxNodeExtents bounds the extents of all the volumes one storage
	// node holds: it keeps a version of each in memory (8 bytes), 32 MiB
	// at most.
	MaxNodeExtents = 4 << 20
)

// Descriptor is a volume's shape and placement, kept by every node that
// holds one of its extents: the nodes hold the truth.
type Descriptor struct {
	Name     string   `json:"name"`
	Size     uint64   `json:"size"`
	Extent   uint64   `json:"extent"`
	Replicas int      `json:"replicas"`
	Nodes    []uint16 `json:"nodes"`   // the nodes the extents are spread over, increasing
	Created  int64    `json:"created"` // Unix ns, with Name tells one incarnation of a name from another
	// Owner is the scope of the credential that created the volume
	// (empty on a fabric without identities): on a sealed fabric only
	// requests the switch certifies as of this scope, or of the storage
	// service's own, reach the volume (Node).
	Owner string `json:"owner,omitempty"`
}

// checkName reports whether s is a valid volume name: 1..MaxName bytes of
// letters, digits, '.', '_' and '-', not starting with '.'.
func checkName(s string) error {
	if len(s) == 0 || len(s) > MaxName {
		return fmt.Errorf("%w: volume name %q: want 1 to %d bytes", ErrBadRequest, s, MaxName)
	}
	for i, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.' && i > 0
		if !ok {
			return fmt.Errorf("%w: volume name %q: letters, digits, '.', '_' and '-' only", ErrBadRequest, s)
		}
	}
	return nil
}

// Check reports whether d is a valid descriptor.
func (d *Descriptor) Check() error {
	if err := checkName(d.Name); err != nil {
		return err
	}
	if d.Extent < MinExtent || d.Extent > MaxExtent || d.Extent&(d.Extent-1) != 0 {
		return fmt.Errorf("%w: extent %d: want a power of two from %d to %d", ErrBadRequest, d.Extent, MinExtent, MaxExtent)
	}
	if d.Size == 0 || d.Size%d.Extent != 0 || d.Size/d.Extent > MaxExtents {
		return fmt.Errorf("%w: size %d: want a positive multiple of the extent (%d), at most %d extents", ErrBadRequest, d.Size, d.Extent, MaxExtents)
	}
	if d.Replicas < 1 || d.Replicas > MaxReplicas || d.Replicas > len(d.Nodes) {
		return fmt.Errorf("%w: %d replicas over %d nodes: want 1 to %d, at most one per node", ErrBadRequest, d.Replicas, len(d.Nodes), MaxReplicas)
	}
	for i, n := range d.Nodes {
		if n >= MaxNodes || i > 0 && n <= d.Nodes[i-1] {
			return fmt.Errorf("%w: nodes %v: want distinct increasing ids below %d", ErrBadRequest, d.Nodes, MaxNodes)
		}
	}
	if d.Owner != "" {
		if n, err := secure.ParseName(secure.RoleClient, d.Owner); err != nil || n.Scope != d.Owner {
			return fmt.Errorf("%w: owner %q: want a scope (a label)", ErrBadRequest, d.Owner)
		}
	}
	return nil
}

// Extents is the number of extents.
func (d *Descriptor) Extents() int { return int(d.Size / d.Extent) }

// Replica returns the nodes holding extent e, the home first: extent e
// starts at node e mod n of Nodes and takes the next Replicas-1 in turn,
// so consecutive extents spread over every node and no node holds two
// copies of one extent.
func (d *Descriptor) Replica(e int) []uint16 {
	n := len(d.Nodes)
	out := make([]uint16, d.Replicas)
	for i := range out {
		out[i] = d.Nodes[(e+i)%n]
	}
	return out
}

// Holds reports whether node holds a copy of extent e.
func (d *Descriptor) Holds(node uint16, e int) bool {
	i, ok := slices.BinarySearch(d.Nodes, node)
	if !ok {
		return false
	}
	n := len(d.Nodes)
	return (i-e%n+n)%n < d.Replicas
}

// Sets returns the distinct replica sets of the volume (each sorted by
// node id), in order of first use.
func (d *Descriptor) Sets() [][]uint16 {
	var out [][]uint16
	seen := map[string]bool{}
	for e := range min(d.Extents(), len(d.Nodes)) {
		s := d.SetOf(e)
		if k := setName("", s); !seen[k] {
			seen[k] = true
			out = append(out, s)
		}
	}
	return out
}

// SetOf returns extent e's replica set, sorted by node id.
func (d *Descriptor) SetOf(e int) []uint16 {
	s := d.Replica(e)
	slices.Sort(s)
	return s
}

// HeldBytes is how many bytes of the volume node holds.
func (d *Descriptor) HeldBytes(node uint16) uint64 {
	var n uint64
	for e := range d.Extents() {
		if d.Holds(node, e) {
			n += d.Extent
		}
	}
	return n
}

// setName is the anycast service of a replica set: prefix.s<ids joined
// by '-'>; a node's rank in it is its position in the set.
func setName(prefix string, set []uint16) string {
	var b strings.Builder
	b.WriteString(prefix)
	b.WriteString(".s")
	for i, n := range set {
		if i > 0 {
			b.WriteByte('-')
		}
		b.WriteString(strconv.Itoa(int(n)))
	}
	return b.String()
}

// nodeName is node id's own anycast service.
func nodeName(prefix string, id uint16) string {
	return prefix + ".n" + strconv.Itoa(int(id))
}
