package netio

import "testing"

// TestPoolClasses: Get serves a buffer of n's class, recycled after Put;
// buffers past the largest class are made at their size and not kept.
func TestPoolClasses(t *testing.T) {
	var p Pool
	for _, c := range []struct{ n, size int }{{0, 64}, {1, 64}, {64, 64}, {65, 128}, {1500, 2048}, {9000, 16384},
		{MaxDatagram, 65536}, {PoolMaxBuffer, PoolMaxBuffer}, {PoolMaxBuffer + 1, PoolMaxBuffer + 1}} {
		b := p.Get(c.n)
		if len(b) != c.n || cap(b) != c.size || p.ClassSize(c.n) != c.size {
			t.Fatalf("Get(%d): len %d cap %d, ClassSize %d; want cap %d", c.n, len(b), cap(b), p.ClassSize(c.n), c.size)
		}
		p.Put(b)
		if again := p.Get(c.n); c.n <= PoolMaxBuffer && &again[:1][0] != &b[:1][0] {
			t.Fatalf("Get(%d) after Put: not the buffer given back", c.n)
		}
	}
	p.Put(make([]byte, 100)) // not a class's capacity: ignored
	if p.Free(100) != 0 {
		t.Fatal("a foreign buffer was kept")
	}
}

// TestPoolAllocs: a Get after a Put of its class allocates nothing.
func TestPoolAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	var p Pool
	p.Put(p.Get(1500))
	if allocs := testing.AllocsPerRun(100, func() { p.Put(p.Get(1500)) }); allocs != 0 {
		t.Fatalf("%.1f allocations per Get and Put", allocs)
	}
}

// TestPoolBounds: Keep and KeepBytes bound what each class keeps, Top
// caps the largest buffers, and Budget makes a new buffer drop free ones
// of other classes so that Allocated stays within it.
func TestPoolBounds(t *testing.T) {
	p := Pool{Keep: 4, KeepBytes: 3 * 16384}
	var held [][]byte
	for range 8 {
		held = append(held, p.Get(100), p.Get(9000))
	}
	for _, b := range held {
		p.Put(b)
	}
	if p.Free(100) != 4 || p.Free(9000) != 3 {
		t.Fatalf("kept %d small and %d jumbo buffers, want 4 and 3", p.Free(100), p.Free(9000))
	}
	if p.Allocated() != p.FreeBytes() {
		t.Fatalf("allocated %d, free %d, with nothing in use", p.Allocated(), p.FreeBytes())
	}

	m := Pool{Min: 2048}
	if b := m.Get(100); cap(b) != 2048 || m.ClassSize(3000) != 4096 {
		t.Fatalf("with Min 2048: cap %d for 100 bytes, %d for 3000", cap(b), m.ClassSize(3000))
	} else if m.Put(b); m.Free(1500) != 1 {
		t.Fatal("a 100-byte request's buffer does not serve 1500 bytes")
	}

	q := Pool{Top: 9000, Budget: 4 * 9000}
	var bs [][]byte
	for range 4 {
		bs = append(bs, q.Get(9000))
	}
	if cap(bs[0]) != 9000 || q.Allocated() != 4*9000 {
		t.Fatalf("cap %d, allocated %d", cap(bs[0]), q.Allocated())
	}
	for _, b := range bs {
		q.Put(b)
	}
	for range 8 {
		q.Get(4000) // in use: the free 9000-byte buffers make room
	}
	if q.Allocated() > q.Budget || q.Free(9000) != 0 {
		t.Fatalf("allocated %d over the budget %d, %d large buffers free", q.Allocated(), q.Budget, q.Free(9000))
	}
}
