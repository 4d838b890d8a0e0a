package poolmap

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// refPlacement is an independent model of a layout: it deals the stripes
// out one by one, giving each copy the next free slot of its column
// (Primaries first, then replicas), and returns slot[stripe][replica] as
// (column, slot index), plus the slots used per column.
func refPlacement(size, stripe uint64, cols, reps int) (slot [][2][2]uint64, used []uint64) {
	n := (size + stripe - 1) / stripe
	slot = make([][2][2]uint64, n)
	used = make([]uint64, cols)
	for i := range n {
		c := i % uint64(cols)
		slot[i][0] = [2]uint64{c, used[c]}
		used[c]++
	}
	if reps == 2 {
		for i := range n {
			c := (i + 1) % uint64(cols)
			slot[i][1] = [2]uint64{c, used[c]}
			used[c]++
		}
	}
	return slot, used
}

// TestLayoutAgainstModel checks Extents against refPlacement for random
// layouts and accesses: unaligned, cross-stripe and cross-node, both
// copies. Every piece must lie in one stripe, the pieces must tile the
// access, each byte must land where the model puts it, and no column may
// need more than ColumnBytes.
func TestLayoutAgainstModel(t *testing.T) {
	seed := uint64(1) // fixed: the run is reproducible; change it to explore
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	for trial := range 3000 {
		cols := 1 + r.IntN(8)
		reps := 1
		if cols > 1 && r.IntN(2) == 0 {
			reps = 2
		}
		stripe := uint64(MinStripe + 8*r.IntN(512))
		size := 1 + r.Uint64N(64*stripe)
		l, err := NewLayout(size, stripe, cols, reps)
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		slot, used := refPlacement(size, stripe, cols, reps)
		for c := range cols {
			if l.ColumnBytes(c) != used[c]*stripe {
				t.Fatalf("trial %d (%+v): column %d needs %d bytes, model %d", trial, l, c, l.ColumnBytes(c), used[c]*stripe)
			}
		}
		for range 20 {
			off := r.Uint64N(size + 1)
			n := r.Uint64N(size - off + 1)
			rep := r.IntN(reps)
			ext, err := l.Extents(off, n, rep, nil)
			if err != nil {
				t.Fatalf("trial %d (%+v): [%d,+%d) replica %d: %v", trial, l, off, n, rep, err)
			}
			at := off
			for _, e := range ext {
				if e.Off != at || e.Len == 0 || e.Replica != rep || e.Off/stripe != (e.Off+e.Len-1)/stripe {
					t.Fatalf("trial %d (%+v): [%d,+%d): bad piece %+v", trial, l, off, n, e)
				}
				for _, b := range []uint64{e.Off, e.Off + e.Len - 1} {
					s := slot[b/stripe][rep]
					wantCol, wantLocal := int(s[0]), s[1]*stripe+b%stripe
					got := e.Local + (b - e.Off)
					if e.Column != wantCol || got != wantLocal {
						t.Fatalf("trial %d (%+v): byte %d replica %d at column %d local %d, model column %d local %d",
							trial, l, b, rep, e.Column, got, wantCol, wantLocal)
					}
					if got >= l.ColumnBytes(e.Column) {
						t.Fatalf("trial %d: byte %d beyond column %d's %d bytes", trial, b, e.Column, l.ColumnBytes(e.Column))
					}
				}
				at += e.Len
			}
			if at != off+n {
				t.Fatalf("trial %d (%+v): [%d,+%d): pieces end at %d", trial, l, off, n, at)
			}
			if reps == 2 {
				// The two copies of a byte are on different nodes.
				e1, _ := l.Extents(off, min(n, 1), 1, nil)
				e0, _ := l.Extents(off, min(n, 1), 0, nil)
				if len(e0) == 1 && e0[0].Column == e1[0].Column {
					t.Fatalf("trial %d (%+v): both copies of byte %d on column %d", trial, l, off, e0[0].Column)
				}
			}
		}
	}
}

func TestLayoutErrors(t *testing.T) {
	for _, bad := range []struct {
		size, stripe uint64
		cols, reps   int
	}{
		{0, 4096, 1, 1}, {MaxRegionSize + 1, 4096, 1, 1}, {1 << 20, 32, 1, 1}, {1 << 20, 100, 1, 1},
		{1 << 20, 4096, 0, 1}, {1 << 20, 4096, MaxColumns + 1, 1}, {1 << 20, 4096, 1, 2}, {1 << 20, 4096, 4, 3},
	} {
		if _, err := NewLayout(bad.size, bad.stripe, bad.cols, bad.reps); !errors.Is(err, ErrLayout) {
			t.Errorf("%+v: %v, want ErrLayout", bad, err)
		}
	}
	l, err := NewLayout(1000, 64, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []struct {
		off, n uint64
		rep    int
	}{{1000, 1, 0}, {999, 2, 0}, {0, 1001, 0}, {1 << 63, 1 << 63, 0}, {0, 1, 2}, {0, 1, -1}} {
		if _, err := l.Extents(a.off, a.n, a.rep, nil); !errors.Is(err, ErrLayout) {
			t.Errorf("Extents%+v: %v, want ErrLayout", a, err)
		}
	}
	if e, err := l.Extents(1000, 0, 0, nil); err != nil || len(e) != 0 {
		t.Errorf("empty access at the end: %v, %v", e, err)
	}
}
