package kv

import (
	"fmt"
	"math/bits"
)

// slabs allocates a shard's value slots: the heap is cut into pages,
// each page given, when first needed, to one size class (MinSlot times a
// power of two, up to the page) and cut into slots of that size. Freed
// slots go back to their class and are reused first; a page stays with
// its class. A value of n bytes takes the smallest class that holds it,
// so at most half a slot is lost to rounding and churn never fragments
// the heap into unusable holes.
type slabs struct {
	base, page uint64
	pages      int
	class      []int8 // per page: its class, or -1 while unassigned
	nextPage   int    // pages below this were handed out at least once
	freePages  []int  // pages handed back by rebuild (never used)
	cls        []slabClass
	usedBytes  uint64 // bytes of the slots handed out
	usedSlots  int
}

type slabClass struct {
	free []uint64 // freed slots, reused first
	page int      // page being carved, or -1
	next uint64   // next uncarved offset in it
}

func newSlabs(base, heap, page uint64) *slabs {
	n := int(heap / page)
	s := &slabs{base: base, page: page, pages: n, class: make([]int8, n)}
	for i := range s.class {
		s.class[i] = -1
	}
	s.cls = make([]slabClass, bits.Len64(page/MinSlot))
	for i := range s.cls {
		s.cls[i].page = -1
	}
	return s
}

// classOf is the size class of n bytes: slots of MinSlot<<c bytes.
func classOf(n int) int {
	if n <= MinSlot {
		return 0
	}
	return bits.Len64(uint64(n-1)) - bits.Len64(MinSlot-1)
}

func (s *slabs) slotSize(c int) uint64 { return MinSlot << c }

// alloc returns the address of a free slot for n bytes, or false when
// the heap has none.
func (s *slabs) alloc(n int) (uint64, bool) {
	c := classOf(n)
	if c >= len(s.cls) {
		return 0, false
	}
	k := &s.cls[c]
	size := s.slotSize(c)
	var addr uint64
	switch {
	case len(k.free) > 0:
		addr = k.free[len(k.free)-1]
		k.free = k.free[:len(k.free)-1]
	case k.page >= 0 && k.next+size <= s.page:
		addr = s.base + uint64(k.page)*s.page + k.next
		k.next += size
	default:
		p, ok := s.takePage()
		if !ok {
			return 0, false
		}
		s.class[p] = int8(c)
		k.page, k.next = p, size
		addr = s.base + uint64(p)*s.page
	}
	s.usedBytes += size
	s.usedSlots++
	return addr, true
}

func (s *slabs) takePage() (int, bool) {
	if n := len(s.freePages); n > 0 {
		p := s.freePages[n-1]
		s.freePages = s.freePages[:n-1]
		return p, true
	}
	if s.nextPage < s.pages {
		s.nextPage++
		return s.nextPage - 1, true
	}
	return 0, false
}

// free returns the slot at addr, which held n bytes.
func (s *slabs) free(addr uint64, n int) {
	c := classOf(n)
	s.cls[c].free = append(s.cls[c].free, addr)
	s.usedBytes -= s.slotSize(c)
	s.usedSlots--
}

// rebuild sets the allocator to hold exactly the slots in used (address
// → record length), as read back from the buckets: every other slot is
// free. It fails when two records overlap or one lies outside the heap
// or across its page's slots, which a sound table never shows.
func (s *slabs) rebuild(used map[uint64]int) error {
	*s = *newSlabs(s.base, s.page*uint64(s.pages), s.page)
	taken := make(map[uint64]bool, len(used))
	for addr, n := range used {
		c := classOf(n)
		if addr < s.base || c >= len(s.cls) {
			return fmt.Errorf("%w: value at %#x of %d bytes lies outside the shard's heap", ErrBadLayout, addr, n)
		}
		off := addr - s.base
		p := int(off / s.page)
		if p >= s.pages || (off%s.page)%s.slotSize(c) != 0 {
			return fmt.Errorf("%w: value at %#x of %d bytes is not on a slot", ErrBadLayout, addr, n)
		}
		if s.class[p] >= 0 && int(s.class[p]) != c {
			return fmt.Errorf("%w: page %d holds values of two size classes", ErrBadLayout, p)
		}
		if taken[addr] {
			return fmt.Errorf("%w: two keys share the value at %#x", ErrBadLayout, addr)
		}
		taken[addr] = true
		s.class[p] = int8(c)
		s.usedBytes += s.slotSize(c)
		s.usedSlots++
	}
	for p := range s.pages {
		c := int(s.class[p])
		if c < 0 {
			s.freePages = append(s.freePages, p)
			continue
		}
		size := s.slotSize(c)
		for off := uint64(0); off+size <= s.page; off += size {
			if a := s.base + uint64(p)*s.page + off; !taken[a] {
				s.cls[c].free = append(s.cls[c].free, a)
			}
		}
	}
	// Hand pages out from the lowest, as a fresh heap does.
	for i, j := 0, len(s.freePages)-1; i < j; i, j = i+1, j-1 {
		s.freePages[i], s.freePages[j] = s.freePages[j], s.freePages[i]
	}
	s.nextPage = s.pages
	return nil
}

// HeapStats is a shard heap's use.
type HeapStats struct {
	Bytes     uint64 // the heap's size
	UsedBytes uint64 // in slots holding values
	UsedSlots int
	Pages     int // pages given to a size class
}

func (s *slabs) stats() HeapStats {
	st := HeapStats{Bytes: s.page * uint64(s.pages), UsedBytes: s.usedBytes, UsedSlots: s.usedSlots}
	for _, c := range s.class {
		if c >= 0 {
			st.Pages++
		}
	}
	return st
}
