package stor

import (
	"errors"
	"testing"
)

// TestStoreBoundsExtents: a node refuses volumes whose extents would take
// its in-memory versions past MaxNodeExtents, and takes them again once
// a volume is removed.
func TestStoreBoundsExtents(t *testing.T) {
	s, err := openStore(t.TempDir(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	desc := func(name string) Descriptor {
		return Descriptor{Name: name, Size: MaxExtents * MinExtent, Extent: MinExtent, Replicas: 1, Nodes: []uint16{0}, Created: 1}
	}
	for i := range MaxNodeExtents / MaxExtents {
		if _, _, err := s.create(desc(string(rune('a' + i)))); err != nil {
			t.Fatalf("volume %d: %v", i, err)
		}
	}
	if _, _, err := s.create(desc("over")); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("a volume past the bound: %v, want ErrNoSpace", err)
	}
	if err := s.remove("a"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.create(desc("over")); err != nil {
		t.Fatalf("after a remove: %v", err)
	}
}
