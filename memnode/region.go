package memnode

import (
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/ndma/ndma/wire"
)

// Region and store limits.
const (
	// DefaultMaxRegions is the number of regions a Store holds when
	// Config.MaxRegions is zero.
	DefaultMaxRegions = 1024

	// MaxRegionSize is the largest region, in bytes (1 TiB). It is a
	// sanity bound that keeps a typing error in a key file from asking
	// the runtime for an impossible allocation; Config.MaxBytes is the
	// operator's real limit.
	MaxRegionSize = 1 << 40
)

// Config bounds a Store.
type Config struct {
	// MaxRegions is the most regions registered at once. Zero means
	// DefaultMaxRegions (1024). Must not be negative.
	MaxRegions int

	// MaxBytes is the most bytes all registered regions may hold
	// together, counting both Alloc'd and Register'ed memory. Zero means
	// no limit beyond MaxRegions and MaxRegionSize. Must not be negative.
	MaxBytes int64
}

// ErrConfig is returned (wrapped) by NewStore for an invalid Config.
var ErrConfig = errors.New("memnode: invalid config")

func (c *Config) validate() error {
	if c.MaxRegions < 0 {
		return fmt.Errorf("%w: MaxRegions %d is negative", ErrConfig, c.MaxRegions)
	}
	if c.MaxBytes < 0 {
		return fmt.Errorf("%w: MaxBytes %d is negative", ErrConfig, c.MaxBytes)
	}
	if c.MaxRegions == 0 {
		c.MaxRegions = DefaultMaxRegions
	}
	return nil
}

// Registration errors, returned wrapped with the key or size concerned.
// Deregister of an unknown key wraps wire.StatusBadKey instead.
var (
	ErrKeyInUse       = errors.New("memnode: region key already in use")
	ErrTooManyRegions = errors.New("memnode: too many regions")
	ErrNoSpace        = errors.New("memnode: region would exceed the store's MaxBytes")
	ErrBadSize        = errors.New("memnode: bad region size")
)

// RegionInfo describes a registered region.
type RegionInfo struct {
	Key  uint64    // region key, never zero
	Size int       // in bytes
	Perm wire.Perm // operations the region allows
}

type region struct {
	mem  []byte // len == cap: a READ result can never be appended into a neighbour
	perm wire.Perm
}

// Store is the set of regions of one memory node together with the
// instruction executor (Exec). Create one with NewStore; the zero Store is
// not usable.
//
// A Store is not safe for concurrent use: it is owned by one goroutine —
// the one that drives the node's socket — which calls every method. Because
// requests are executed one at a time, CAS, fetch-and-add and vector ops are
// atomic with respect to every other NDMA request; they are not atomic with
// respect to a program that touches a Register'ed buffer directly while the
// Store is in use.
type Store struct {
	cfg     Config
	regions map[uint64]*region
	bytes   int64 // total size of all regions
}

// NewStore returns an empty Store bounded by cfg.
func NewStore(cfg Config) (*Store, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Store{cfg: cfg, regions: make(map[uint64]*region)}, nil
}

// Register exposes buf as a region with permissions perm and returns its
// key. The Store uses buf in place (it does not copy it): the caller keeps
// ownership, sees remote writes in buf, and must not use buf from another
// goroutine while the Store may execute requests on it. Two registrations
// may overlap; the Store does not check.
//
// A zero key asks for a random non-zero 64-bit key from crypto/rand, so
// keys double as capabilities that a remote peer cannot guess. A non-zero
// key must not be in use (ErrKeyInUse). buf must hold 1 to MaxRegionSize
// bytes (ErrBadSize) and the Store's limits must allow it
// (ErrTooManyRegions, ErrNoSpace).
func (s *Store) Register(buf []byte, perm wire.Perm, key uint64) (uint64, error) {
	if err := s.admit(len(buf), perm, key); err != nil {
		return 0, err
	}
	return s.insert(buf, perm, key)
}

// Alloc allocates a zeroed region of size bytes with permissions perm,
// registers it, and returns its key (a zero key draws a random one, as in
// Register). size must be positive and at most MaxRegionSize, and the
// Store's limits are checked before any memory is allocated.
func (s *Store) Alloc(size int, perm wire.Perm, key uint64) (uint64, error) {
	if err := s.admit(size, perm, key); err != nil {
		return 0, err
	}
	return s.insert(make([]byte, size), perm, key)
}

// admit checks a new region of size bytes against the arguments' validity
// and the Store's limits.
func (s *Store) admit(size int, perm wire.Perm, key uint64) error {
	if perm&^wire.PermAll != 0 {
		return fmt.Errorf("%w: unknown bits %#02x", wire.ErrBadPerm, uint8(perm&^wire.PermAll))
	}
	if size <= 0 || int64(size) > MaxRegionSize {
		return fmt.Errorf("%w: %d bytes (want 1 to %d)", ErrBadSize, size, int64(MaxRegionSize))
	}
	if key != 0 {
		if _, ok := s.regions[key]; ok {
			return ErrKeyInUse // never the key: it is a capability
		}
	}
	if len(s.regions) >= s.cfg.MaxRegions {
		return fmt.Errorf("%w: limit is %d", ErrTooManyRegions, s.cfg.MaxRegions)
	}
	if s.cfg.MaxBytes > 0 && int64(size) > s.cfg.MaxBytes-s.bytes {
		return fmt.Errorf("%w: %d bytes requested, %d of %d in use", ErrNoSpace, size, s.bytes, s.cfg.MaxBytes)
	}
	return nil
}

// insert registers buf after admit succeeded, drawing a key if key is 0.
func (s *Store) insert(buf []byte, perm wire.Perm, key uint64) (uint64, error) {
	for key == 0 {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return 0, fmt.Errorf("memnode: drawing a region key: %w", err)
		}
		key = binary.LittleEndian.Uint64(b[:])
		if _, ok := s.regions[key]; ok {
			key = 0
		}
	}
	s.regions[key] = &region{mem: buf[:len(buf):len(buf)], perm: perm}
	s.bytes += int64(len(buf))
	return key, nil
}

// Deregister removes the region with key. Requests naming key fail with
// wire.StatusBadKey from then on; the memory of a Register'ed region goes
// back to the caller. An unknown key is an error wrapping wire.StatusBadKey.
func (s *Store) Deregister(key uint64) error {
	r, ok := s.regions[key]
	if !ok {
		return fmt.Errorf("memnode: deregister: no region under that key: %w", wire.StatusBadKey)
	}
	delete(s.regions, key)
	s.bytes -= int64(len(r.mem))
	return nil
}

// Region describes the region with key, if there is one.
func (s *Store) Region(key uint64) (RegionInfo, bool) {
	r, ok := s.regions[key]
	if !ok {
		return RegionInfo{}, false
	}
	return RegionInfo{Key: key, Size: len(r.mem), Perm: r.perm}, true
}

// Regions describes every region, sorted by key.
func (s *Store) Regions() []RegionInfo {
	out := make([]RegionInfo, 0, len(s.regions))
	for k, r := range s.regions {
		out = append(out, RegionInfo{Key: k, Size: len(r.mem), Perm: r.perm})
	}
	slices.SortFunc(out, func(a, b RegionInfo) int { return cmp.Compare(a.Key, b.Key) })
	return out
}
