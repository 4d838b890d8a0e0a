package mq

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"slices"

	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/wire"
)

// A catalog is a pool region (one copy: slots are claimed by
// compare-and-swap) naming the topics of a fabric, and by default a
// mirror of it in a region of two copies, which keeps the catalog
// readable when a memory node of the first is lost and rebuilds it
// (Catalog.Repair). Both hold a 64-byte header
// (catalogMagic, the slot count, a CRC32C) and Slots entries of 128
// bytes (all integers little-endian):
//
//	0  u64 claim (0: free; a random number: taken)
//	8  u32 control region id   12 u32 data region id
//	16 u64 control region key  24 u64 data region key
//	32 u8 name length          33 name (up to 64 bytes)
//	124 u32 CRC32C over bytes 8-123
const (
	catalogHeaderBytes = 64
	slotBytes          = 128
	maxName            = 64
	// MaxCatalogSlots bounds a catalog's topics.
	MaxCatalogSlots = 1 << 16
)

var catalogMagic = [8]byte{'N', 'D', 'M', 'A', 'M', 'Q', 'C', 1}

// Errors of catalogs.
var (
	// ErrNotFound is wrapped by the error for a topic the catalog does
	// not name.
	ErrNotFound = errors.New("mq: no such topic")
	// ErrExists is wrapped by the error for a topic name already taken.
	ErrExists = errors.New("mq: topic exists")
	// ErrFull is wrapped by the error for a catalog with no free slot,
	// or a topic with no free consumer group.
	ErrFull = errors.New("mq: full")
)

// Catalog is an open catalog of topics.
type Catalog struct {
	pc     *pool.Client
	reg    *pool.Region
	mirror *pool.Region // nil: none
	slots  int
}

// CatalogRef is what opens a catalog: its region's id and key, and its
// mirror's (0: none).
type CatalogRef struct {
	Region    uint32
	Key       uint64
	Mirror    uint32
	MirrorKey uint64
}

// CatalogOptions shape a catalog: Slots topics (1 to MaxCatalogSlots),
// its region spread over Columns memory nodes (0: all), and NoMirror
// for a catalog without its mirror (a memory node lost with a column of
// the catalog loses it).
type CatalogOptions struct {
	Slots    int
	Columns  int
	NoMirror bool
}

// CreateCatalog makes a catalog.
func CreateCatalog(ctx context.Context, pc *pool.Client, o CatalogOptions) (*Catalog, error) {
	if o.Slots < 1 || o.Slots > MaxCatalogSlots {
		return nil, fmt.Errorf("%w: a catalog of %d topics (want 1 to %d)", ErrBadLayout, o.Slots, MaxCatalogSlots)
	}
	size := uint64(catalogHeaderBytes + o.Slots*slotBytes)
	c := &Catalog{pc: pc, slots: o.Slots}
	var err error
	if c.reg, err = pc.Alloc(ctx, size, pool.AllocOptions{Replicas: 1, Columns: o.Columns}); err != nil {
		return nil, fmt.Errorf("mq: creating a catalog of %d bytes: %w", size, err)
	}
	if !o.NoMirror {
		if c.mirror, err = pc.Alloc(ctx, size, pool.AllocOptions{Replicas: 2}); err != nil {
			_ = pc.Free(context.WithoutCancel(ctx), c.reg)
			return nil, fmt.Errorf("mq: creating the catalog's mirror (two copies; one memory node only? then no mirror): %w", err)
		}
	}
	h := append(catalogMagic[:0:0], catalogMagic[:]...)
	h = binary.LittleEndian.AppendUint32(h, uint32(o.Slots))
	h = binary.LittleEndian.AppendUint32(h, crc32.Checksum(h, castagnoli))
	for _, r := range c.regions() {
		if _, err = r.WriteAtContext(ctx, h, 0); err != nil {
			break
		}
	}
	if err != nil {
		for _, r := range c.regions() {
			_ = pc.Free(context.WithoutCancel(ctx), r)
		}
		return nil, fmt.Errorf("mq: writing the catalog header: %w", err)
	}
	return c, nil
}

// regions are the catalog's mirror (if any) and region, in the order
// they are written.
func (c *Catalog) regions() []*pool.Region {
	if c.mirror == nil {
		return []*pool.Region{c.reg}
	}
	return []*pool.Region{c.mirror, c.reg}
}

// OpenCatalog opens the catalog in region id with its key (one without
// a mirror, or without using it: see OpenCatalogRef).
func OpenCatalog(ctx context.Context, pc *pool.Client, id uint32, key uint64) (*Catalog, error) {
	return OpenCatalogRef(ctx, pc, CatalogRef{Region: id, Key: key})
}

// OpenCatalogRef opens the catalog r names. With a mirror, a catalog
// whose region lost a memory node's column is repaired (Repair) when it
// is opened or written, once the node is back, and read from the mirror
// until then.
func OpenCatalogRef(ctx context.Context, pc *pool.Client, r CatalogRef) (*Catalog, error) {
	c := &Catalog{pc: pc}
	var err error
	if c.reg, err = pc.Open(ctx, r.Region, r.Key); err != nil {
		return nil, fmt.Errorf("mq: opening the catalog: %w", err)
	}
	if r.Mirror != 0 {
		if c.mirror, err = pc.Open(ctx, r.Mirror, r.MirrorKey); err != nil {
			return nil, fmt.Errorf("mq: opening the catalog's mirror: %w", err)
		}
	}
	h := make([]byte, 16)
	if _, err := c.reg.ReadAtContext(ctx, h, 0); err != nil && c.mirror != nil && errors.Is(err, wire.StatusLost) {
		// The region lost a column: rebuild it now if its node is back
		// (if not, the mirror serves).
		_, _ = c.Repair(ctx)
	}
	if _, err := c.read(ctx, h, 0); err != nil {
		return nil, fmt.Errorf("mq: reading the catalog header: %w", err)
	}
	slots := int(binary.LittleEndian.Uint32(h[8:]))
	if [8]byte(h) != catalogMagic || crc32.Checksum(h[:12], castagnoli) != binary.LittleEndian.Uint32(h[12:]) ||
		slots < 1 || slots > MaxCatalogSlots || c.reg.Size() < int64(catalogHeaderBytes+slots*slotBytes) ||
		c.mirror != nil && c.mirror.Size() != c.reg.Size() {
		return nil, fmt.Errorf("%w: region %d is not a catalog", ErrBadLayout, r.Region)
	}
	c.slots = slots
	return c, nil
}

// Region is the catalog's region (its id and key open it).
func (c *Catalog) Region() *pool.Region { return c.reg }

// Ref is what opens the catalog (OpenCatalogRef).
func (c *Catalog) Ref() CatalogRef {
	r := CatalogRef{Region: c.reg.ID(), Key: c.reg.Key()}
	if c.mirror != nil {
		r.Mirror, r.MirrorKey = c.mirror.ID(), c.mirror.Key()
	}
	return r
}

// Free frees the catalog's regions (not its topics').
func (c *Catalog) Free(ctx context.Context) error {
	var errs []error
	for _, r := range c.regions() {
		errs = append(errs, c.pc.Free(ctx, r))
	}
	return errors.Join(errs...)
}

// read reads p at off of the catalog: from its region, or from its
// mirror where the region's memory is lost or its node does not answer.
func (c *Catalog) read(ctx context.Context, p []byte, off int64) (int, error) {
	n, err := c.reg.ReadAtContext(ctx, p, off)
	if err != nil && c.mirror != nil && ctx.Err() == nil && regionGone(err) {
		return c.mirror.ReadAtContext(ctx, p, off)
	}
	return n, err
}

// regionGone reports whether err says a region's memory is lost or on
// a memory node the switch counts dead.
func regionGone(err error) bool {
	return errors.Is(err, wire.StatusLost) || errors.Is(err, wire.StatusMemberDead)
}

// write writes p at off of the catalog: its mirror first, then its
// region (writeRegion).
func (c *Catalog) write(ctx context.Context, p []byte, off int64) error {
	if c.mirror != nil {
		if _, err := c.mirror.WriteAtContext(ctx, p, off); err != nil && !errors.Is(err, pool.ErrDegraded) {
			return err
		}
	}
	return c.writeRegion(ctx, p, off)
}

// writeRegion writes p at off of the catalog's region, once its mirror
// has it. A column lost or on a dead node is written around: the
// switch is told it is lost (so that its node, back, is not read
// stale), reads go to the mirror, and Repair rebuilds it.
func (c *Catalog) writeRegion(ctx context.Context, p []byte, off int64) error {
	_, err := c.reg.WriteAtContext(ctx, p, off)
	if err == nil || c.mirror == nil || ctx.Err() != nil || !regionGone(err) {
		return err
	}
	if errors.Is(err, wire.StatusLost) {
		return nil
	}
	spec := c.reg.Spec()
	for s := uint64(off) / spec.Stripe; s <= (uint64(off)+uint64(len(p))-1)/spec.Stripe; s++ {
		if merr := c.reg.MarkColumnLost(ctx, int(s)%spec.Columns); merr != nil {
			return errors.Join(err, merr)
		}
	}
	return nil
}

// Repair rebuilds the columns of the catalog's region that the switch
// reports lost (their memory node restarted) from its mirror, and
// reports whether it rebuilt any: each is granted again, rewritten with
// the mirror's bytes of it, and serves again. A column whose node is
// still down fails it (wire.StatusMemberDead). Without a mirror it
// returns false. Repairs by several processes at once do no harm.
func (c *Catalog) Repair(ctx context.Context) (bool, error) {
	if c.mirror == nil {
		return false, nil
	}
	spec := c.reg.Spec()
	var granted []int
	for col := range spec.Columns {
		err := c.reg.RegrantColumn(ctx, col)
		switch {
		case err == nil:
			granted = append(granted, col)
		case errors.Is(err, wire.StatusBadOperand): // not lost
		default:
			return false, fmt.Errorf("mq: repairing the catalog: column %d: %w", col, err)
		}
	}
	if len(granted) == 0 {
		return false, nil
	}
	b := make([]byte, c.reg.Size())
	if _, err := c.mirror.ReadAtContext(ctx, b, 0); err != nil {
		return false, fmt.Errorf("mq: repairing the catalog: reading its mirror: %w", err)
	}
	for off := uint64(0); off < uint64(len(b)); off += spec.Stripe {
		if !slices.Contains(granted, int(off/spec.Stripe)%spec.Columns) {
			continue
		}
		end := min(off+spec.Stripe, uint64(len(b)))
		if _, err := c.reg.WriteAtContext(ctx, b[off:end], int64(off)); err != nil && !errors.Is(err, pool.ErrDegraded) {
			return false, fmt.Errorf("mq: repairing the catalog: %w", err)
		}
	}
	for _, col := range granted {
		if err := c.reg.RestoreColumn(ctx, col); err != nil && !errors.Is(err, wire.StatusBadOperand) {
			return false, fmt.Errorf("mq: repairing the catalog: column %d: %w", col, err)
		}
	}
	return true, nil
}

func slotAddr(i int) uint64 { return catalogHeaderBytes + uint64(i)*slotBytes }

// entries reads every slot: the topics named, by slot, and the claim
// words.
func (c *Catalog) entries(ctx context.Context) (map[int]Ref, []uint64, error) {
	b := make([]byte, c.slots*slotBytes)
	if _, err := c.read(ctx, b, catalogHeaderBytes); err != nil {
		return nil, nil, fmt.Errorf("mq: reading the catalog: %w", err)
	}
	refs := make(map[int]Ref)
	claims := make([]uint64, c.slots)
	for i := range c.slots {
		s := b[i*slotBytes : (i+1)*slotBytes]
		claims[i] = binary.LittleEndian.Uint64(s)
		n := int(s[32])
		if claims[i] == 0 || n == 0 || n > maxName || crc32.Checksum(s[8:124], castagnoli) != binary.LittleEndian.Uint32(s[124:]) {
			continue
		}
		refs[i] = Ref{Name: string(s[33 : 33+n]),
			Control: binary.LittleEndian.Uint32(s[8:]), Data: binary.LittleEndian.Uint32(s[12:]),
			ControlKey: binary.LittleEndian.Uint64(s[16:]), DataKey: binary.LittleEndian.Uint64(s[24:])}
	}
	return refs, claims, nil
}

// Topics lists the topics the catalog names, by slot order.
func (c *Catalog) Topics(ctx context.Context) ([]Ref, error) {
	refs, _, err := c.entries(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Ref, 0, len(refs))
	for i := range c.slots {
		if r, ok := refs[i]; ok {
			out = append(out, r)
		}
	}
	return out, nil
}

// lookup finds name's slot.
func (c *Catalog) lookup(ctx context.Context, name string) (int, Ref, error) {
	refs, _, err := c.entries(ctx)
	if err != nil {
		return 0, Ref{}, err
	}
	for i := range c.slots {
		if r, ok := refs[i]; ok && r.Name == name {
			return i, r, nil
		}
	}
	return 0, Ref{}, fmt.Errorf("%w: %q", ErrNotFound, name)
}

// Lookup returns what opens topic name.
func (c *Catalog) Lookup(ctx context.Context, name string) (Ref, error) {
	_, r, err := c.lookup(ctx, name)
	return r, err
}

// Open opens topic name.
func (c *Catalog) Open(ctx context.Context, name string) (*Topic, error) {
	r, err := c.Lookup(ctx, name)
	if err != nil {
		return nil, err
	}
	return Open(ctx, c.pc, r)
}

// OpenRef opens the topic r names (as Topics lists it) with the
// catalog's pool client.
func (c *Catalog) OpenRef(ctx context.Context, r Ref) (*Topic, error) {
	return Open(ctx, c.pc, r)
}

// Create makes topic name (see Create) and names it in the catalog.
// Two creates of one name at once may both make the topic: the one in
// the lower slot wins, the other frees its regions and fails with
// ErrExists.
func (c *Catalog) Create(ctx context.Context, name string, l Layout, o CreateOptions) (*Topic, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	refs, claims, err := c.entries(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range refs {
		if r.Name == name {
			return nil, fmt.Errorf("%w: %q", ErrExists, name)
		}
	}
	t, err := Create(ctx, c.pc, name, l, o)
	if err != nil {
		return nil, err
	}
	slot, id, err := c.claim(ctx, claims)
	if err == nil {
		err = c.writeSlot(ctx, slot, id, t.Ref())
	}
	if err == nil {
		if s, _, lerr := c.lookup(ctx, name); lerr != nil || s != slot {
			_ = c.clear(ctx, slot)
			err = errors.Join(fmt.Errorf("%w: %q", ErrExists, name), lerr)
		}
	}
	if err != nil {
		_ = t.Free(context.WithoutCancel(ctx), c.pc)
		return nil, err
	}
	return t, nil
}

// claim takes a free slot; its claim word is returned (the mirror
// records it with the entry).
func (c *Catalog) claim(ctx context.Context, claims []uint64) (int, uint64, error) {
	id := rand.Uint64() | 1
	for i, w := range claims {
		if w != 0 {
			continue
		}
		old, err := c.reg.CompareAndSwap(ctx, slotAddr(i), 0, id)
		if err != nil && regionGone(err) && ctx.Err() == nil {
			// The region lost a column: rebuild it from the mirror and
			// try again once.
			if ok, rerr := c.Repair(ctx); ok && rerr == nil {
				old, err = c.reg.CompareAndSwap(ctx, slotAddr(i), 0, id)
			}
		}
		if err != nil {
			return 0, 0, fmt.Errorf("mq: claiming a catalog slot: %w", err)
		}
		if old == 0 {
			return i, id, nil
		}
	}
	return 0, 0, fmt.Errorf("%w: the catalog's %d slots are taken", ErrFull, c.slots)
}

// writeSlot writes slot i's entry, claimed with claim word id: to the
// mirror (with the claim word) first, so that the region never names a
// topic its mirror does not.
func (c *Catalog) writeSlot(ctx context.Context, i int, id uint64, r Ref) error {
	s := make([]byte, slotBytes)
	binary.LittleEndian.PutUint64(s[0:], id)
	e := s[8:]
	binary.LittleEndian.PutUint32(e[0:], r.Control)
	binary.LittleEndian.PutUint32(e[4:], r.Data)
	binary.LittleEndian.PutUint64(e[8:], r.ControlKey)
	binary.LittleEndian.PutUint64(e[16:], r.DataKey)
	e[24] = byte(len(r.Name))
	copy(e[25:], r.Name)
	binary.LittleEndian.PutUint32(e[116:], crc32.Checksum(e[:116], castagnoli))
	if c.mirror != nil {
		if _, err := c.mirror.WriteAtContext(ctx, s, int64(slotAddr(i))); err != nil && !errors.Is(err, pool.ErrDegraded) {
			return fmt.Errorf("mq: writing catalog slot %d to the mirror: %w", i, err)
		}
	}
	if err := c.writeRegion(ctx, e, int64(slotAddr(i)+8)); err != nil {
		return fmt.Errorf("mq: writing catalog slot %d: %w", i, err)
	}
	return nil
}

// clear frees slot i: its entry first, then its claim, the mirror's
// first.
func (c *Catalog) clear(ctx context.Context, i int) error {
	if err := c.write(ctx, make([]byte, slotBytes-8), int64(slotAddr(i)+8)); err != nil {
		return fmt.Errorf("mq: clearing catalog slot %d: %w", i, err)
	}
	if err := c.write(ctx, make([]byte, 8), int64(slotAddr(i))); err != nil {
		return fmt.Errorf("mq: clearing catalog slot %d: %w", i, err)
	}
	return nil
}

// Delete removes topic name from the catalog and frees its regions.
func (c *Catalog) Delete(ctx context.Context, name string) error {
	slot, r, err := c.lookup(ctx, name)
	if err != nil {
		return err
	}
	if err := c.clear(ctx, slot); err != nil {
		return err
	}
	var errs []error
	for _, x := range []struct {
		id  uint32
		key uint64
	}{{r.Control, r.ControlKey}, {r.Data, r.DataKey}} {
		reg, err := c.pc.Open(ctx, x.id, x.key)
		if err == nil {
			err = c.pc.Free(ctx, reg)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
