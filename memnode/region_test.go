package memnode

import (
	"errors"
	"slices"
	"testing"

	"github.com/ndma/ndma/wire"
)

func TestNewStoreConfig(t *testing.T) {
	for _, cfg := range []Config{{MaxRegions: -1}, {MaxBytes: -1}} {
		if _, err := NewStore(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("NewStore(%+v) err = %v, want ErrConfig", cfg, err)
		}
	}
	s, err := NewStore(Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range DefaultMaxRegions {
		if _, err := s.Alloc(1, wire.PermAll, uint64(i+1)); err != nil {
			t.Fatalf("Alloc #%d: %v", i, err)
		}
	}
	if _, err := s.Alloc(1, wire.PermAll, 0); !errors.Is(err, ErrTooManyRegions) {
		t.Fatalf("Alloc past the default MaxRegions: err = %v, want ErrTooManyRegions", err)
	}
}

func TestRegisterAllocDeregister(t *testing.T) {
	s, err := NewStore(Config{MaxRegions: 3, MaxBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 40, 64)
	k1, err := s.Register(buf, wire.PermRead, 0x11)
	if err != nil || k1 != 0x11 {
		t.Fatalf("Register = %#x, %v", k1, err)
	}
	if _, err := s.Register(make([]byte, 8), wire.PermAll, 0x11); !errors.Is(err, ErrKeyInUse) {
		t.Fatalf("Register with a used key: err = %v, want ErrKeyInUse", err)
	}
	if _, err := s.Register(nil, wire.PermAll, 0); !errors.Is(err, ErrBadSize) {
		t.Fatalf("Register(nil): err = %v, want ErrBadSize", err)
	}
	if _, err := s.Register(make([]byte, 8), 0x20, 0); !errors.Is(err, wire.ErrBadPerm) {
		t.Fatalf("Register with unknown perm bits: err = %v, want ErrBadPerm", err)
	}
	for _, size := range []int{0, -1, MaxRegionSize + 1} {
		if _, err := s.Alloc(size, wire.PermAll, 0); !errors.Is(err, ErrBadSize) {
			t.Fatalf("Alloc(%d): err = %v, want ErrBadSize", size, err)
		}
	}
	if _, err := s.Alloc(61, wire.PermAll, 0); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Alloc past MaxBytes: err = %v, want ErrNoSpace", err)
	}
	k2, err := s.Alloc(60, wire.PermAll, 0)
	if err != nil || k2 == 0 {
		t.Fatalf("Alloc(60) = %#x, %v", k2, err)
	}
	if _, err := s.Alloc(1, wire.PermAll, 0); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Alloc with MaxBytes used up: err = %v, want ErrNoSpace", err)
	}

	info, ok := s.Region(k1)
	if !ok || info != (RegionInfo{Key: k1, Size: 40, Perm: wire.PermRead}) {
		t.Fatalf("Region(k1) = %+v, %v", info, ok)
	}
	if _, ok := s.Region(0x12); ok {
		t.Fatal("Region(unknown) found")
	}
	want := []RegionInfo{{k1, 40, wire.PermRead}, {k2, 60, wire.PermAll}}
	slices.SortFunc(want, func(a, b RegionInfo) int {
		if a.Key < b.Key {
			return -1
		}
		return 1
	})
	if got := s.Regions(); !slices.Equal(got, want) {
		t.Fatalf("Regions() = %+v, want %+v", got, want)
	}

	// An Alloc'd region starts zeroed.
	r := s.Exec(&wire.Header{Op: wire.OpRead, Key: k2, Operand1: 60}, nil)
	if r.Status != wire.StatusOK || !slices.Equal(r.Data, make([]byte, 60)) {
		t.Fatalf("read of a fresh Alloc = %+v", r)
	}

	if err := s.Deregister(k2); err != nil {
		t.Fatal(err)
	}
	if err := s.Deregister(k2); !errors.Is(err, wire.StatusBadKey) {
		t.Fatalf("second Deregister: err = %v, want wire.StatusBadKey", err)
	}
	if r := s.Exec(&wire.Header{Op: wire.OpRead, Key: k2, Operand1: 1}, nil); r.Status != wire.StatusBadKey {
		t.Fatalf("read of a deregistered region: %v", r.Status)
	}
	// The bytes are free again.
	if _, err := s.Alloc(59, wire.PermAll, 0); err != nil {
		t.Fatalf("Alloc after Deregister: %v", err)
	}
	if _, err := s.Alloc(1, wire.PermAll, 0); err != nil {
		t.Fatalf("Alloc up to MaxRegions: %v", err)
	}
	if _, err := s.Register(make([]byte, 1), wire.PermAll, 0); !errors.Is(err, ErrTooManyRegions) {
		t.Fatalf("Register past MaxRegions: err = %v, want ErrTooManyRegions", err)
	}

	// Register uses the buffer in place and caps it at its length.
	buf[3] = 0xee
	r = s.Exec(&wire.Header{Op: wire.OpRead, Key: k1, Addr: 3, Operand1: 1}, nil)
	if r.Status != wire.StatusOK || r.Data[0] != 0xee {
		t.Fatalf("read of a Register'ed buffer = %+v", r)
	}
	r = s.Exec(&wire.Header{Op: wire.OpRead, Key: k1, Addr: 0, Operand1: 40}, nil)
	if cap(r.Data) != 40 {
		t.Fatalf("cap(Data) = %d, want 40", cap(r.Data))
	}
}

func TestRandomKeys(t *testing.T) {
	s, err := NewStore(Config{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]bool{}
	for range 100 {
		k, err := s.Alloc(1, wire.PermAll, 0)
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 || seen[k] {
			t.Fatalf("drew key %#x twice or zero", k)
		}
		seen[k] = true
	}
}
