package mq

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"

	"github.com/ndma/ndma/pool"
)

// A catalog is a pool region (one copy: slots are claimed by
// compare-and-swap) naming the topics of a fabric: a 64-byte header
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
	pc    *pool.Client
	reg   *pool.Region
	slots int
}

// CreateCatalog makes a catalog of slots topics.
func CreateCatalog(ctx context.Context, pc *pool.Client, slots int, columns int) (*Catalog, error) {
	if slots < 1 || slots > MaxCatalogSlots {
		return nil, fmt.Errorf("%w: a catalog of %d topics (want 1 to %d)", ErrBadLayout, slots, MaxCatalogSlots)
	}
	size := uint64(catalogHeaderBytes + slots*slotBytes)
	reg, err := pc.Alloc(ctx, size, pool.AllocOptions{Replicas: 1, Columns: columns})
	if err != nil {
		return nil, fmt.Errorf("mq: creating a catalog of %d bytes: %w", size, err)
	}
	h := append(catalogMagic[:0:0], catalogMagic[:]...)
	h = binary.LittleEndian.AppendUint32(h, uint32(slots))
	h = binary.LittleEndian.AppendUint32(h, crc32.Checksum(h, castagnoli))
	if _, err := reg.WriteAtContext(ctx, h, 0); err != nil {
		_ = pc.Free(ctx, reg)
		return nil, fmt.Errorf("mq: writing the catalog header: %w", err)
	}
	return &Catalog{pc: pc, reg: reg, slots: slots}, nil
}

// OpenCatalog opens the catalog in region id with its key.
func OpenCatalog(ctx context.Context, pc *pool.Client, id uint32, key uint64) (*Catalog, error) {
	reg, err := pc.Open(ctx, id, key)
	if err != nil {
		return nil, fmt.Errorf("mq: opening the catalog: %w", err)
	}
	h := make([]byte, 16)
	if _, err := reg.ReadAtContext(ctx, h, 0); err != nil {
		return nil, fmt.Errorf("mq: reading the catalog header: %w", err)
	}
	slots := int(binary.LittleEndian.Uint32(h[8:]))
	if [8]byte(h) != catalogMagic || crc32.Checksum(h[:12], castagnoli) != binary.LittleEndian.Uint32(h[12:]) ||
		slots < 1 || slots > MaxCatalogSlots || reg.Size() < int64(catalogHeaderBytes+slots*slotBytes) {
		return nil, fmt.Errorf("%w: region %d is not a catalog", ErrBadLayout, id)
	}
	return &Catalog{pc: pc, reg: reg, slots: slots}, nil
}

// Region is the catalog's region (its id and key open it).
func (c *Catalog) Region() *pool.Region { return c.reg }

func slotAddr(i int) uint64 { return catalogHeaderBytes + uint64(i)*slotBytes }

// entries reads every slot: the topics named, by slot, and the claim
// words.
func (c *Catalog) entries(ctx context.Context) (map[int]Ref, []uint64, error) {
	b := make([]byte, c.slots*slotBytes)
	if _, err := c.reg.ReadAtContext(ctx, b, catalogHeaderBytes); err != nil {
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
	slot, err := c.claim(ctx, claims)
	if err == nil {
		err = c.writeSlot(ctx, slot, t.Ref())
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

// claim takes a free slot.
func (c *Catalog) claim(ctx context.Context, claims []uint64) (int, error) {
	id := rand.Uint64() | 1
	for i, w := range claims {
		if w != 0 {
			continue
		}
		old, err := c.reg.CompareAndSwap(ctx, slotAddr(i), 0, id)
		if err != nil {
			return 0, fmt.Errorf("mq: claiming a catalog slot: %w", err)
		}
		if old == 0 {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%w: the catalog's %d slots are taken", ErrFull, c.slots)
}

func (c *Catalog) writeSlot(ctx context.Context, i int, r Ref) error {
	s := make([]byte, slotBytes-8)
	binary.LittleEndian.PutUint32(s[0:], r.Control)
	binary.LittleEndian.PutUint32(s[4:], r.Data)
	binary.LittleEndian.PutUint64(s[8:], r.ControlKey)
	binary.LittleEndian.PutUint64(s[16:], r.DataKey)
	s[24] = byte(len(r.Name))
	copy(s[25:], r.Name)
	binary.LittleEndian.PutUint32(s[116:], crc32.Checksum(s[:116], castagnoli))
	if _, err := c.reg.WriteAtContext(ctx, s, int64(slotAddr(i)+8)); err != nil {
		return fmt.Errorf("mq: writing catalog slot %d: %w", i, err)
	}
	return nil
}

// clear frees slot i: its entry first, then its claim.
func (c *Catalog) clear(ctx context.Context, i int) error {
	if _, err := c.reg.WriteAtContext(ctx, make([]byte, slotBytes-8), int64(slotAddr(i)+8)); err != nil {
		return fmt.Errorf("mq: clearing catalog slot %d: %w", i, err)
	}
	if _, err := c.reg.WriteAtContext(ctx, make([]byte, 8), int64(slotAddr(i))); err != nil {
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
