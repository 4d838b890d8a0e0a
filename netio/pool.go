package netio

import "math/bits"

// Buffer size classes of Pool: powers of two from 64 bytes to 128 KiB
// (any UDP datagram, any packet payload).
const (
	poolMinShift = 6
	poolClasses  = 12
	// PoolMaxBuffer is the capacity of Pool's largest class, in bytes.
	PoolMaxBuffer = 1 << (poolMinShift + poolClasses - 1)
)

// Pool recycles byte buffers in power-of-two size classes from 64 bytes
// to PoolMaxBuffer, so that a steady flow of packets allocates nothing:
// Get hands out a buffer of its size's class, Put gives it back. It is
// the one buffer pool of the module (the security layer's sealing
// buffers, simnet's in-flight datagrams and its conns' queues, the
// aggregation pool's out-of-order chunks).
//
// A Pool is not safe for concurrent use: its owner's lock or goroutine
// guards it. The zero value is an empty pool without bounds.
type Pool struct {
	// Keep bounds the free buffers each class keeps, and KeepBytes their
	// bytes per class; a buffer given back to a full class is left to the
	// garbage collector. Zero means no bound.
	Keep, KeepBytes int
	// Min is the capacity of the smallest buffers, in bytes, a power of
	// two: smaller requests share its class (one class for every
	// datagram of up to an MTU, say, as they come in all sizes). Zero
	// means 64.
	Min int
	// Top caps the capacity of the largest buffers, in bytes: a class
	// whose power of two is larger holds buffers of Top bytes, and Get
	// serves no more than Top. Zero means PoolMaxBuffer.
	Top int
	// Budget bounds Allocated, in bytes: to make a new buffer, Get first
	// drops free buffers, largest class first, until it fits. The caller
	// keeps the buffers it holds within Budget. Zero means no bound.
	Budget int64

	free      [poolClasses][][]byte
	allocated int64
}

// poolClass returns the class of an n-byte buffer, n <= PoolMaxBuffer.
func poolClass(n int) int {
	if n <= 1<<poolMinShift {
		return 0
	}
	return bits.Len(uint(n-1)) - poolMinShift
}

func (p *Pool) top() int {
	if p.Top > 0 {
		return min(p.Top, PoolMaxBuffer)
	}
	return PoolMaxBuffer
}

// ClassSize returns the capacity of the buffers Get returns for n bytes:
// the class's power of two (at least Min, at most Top), or n itself above
// the largest class.
func (p *Pool) ClassSize(n int) int {
	if n > p.top() {
		return n
	}
	return min(max(1<<(poolClass(n)+poolMinShift), p.Min), p.top())
}

// Get returns a buffer of length n holding arbitrary bytes, with the
// capacity of n's class: a recycled one, or a new one. A buffer larger
// than the largest class is allocated at exactly n bytes and is neither
// counted nor kept.
func (p *Pool) Get(n int) []byte {
	size := p.ClassSize(n)
	if n > p.top() {
		return make([]byte, n)
	}
	c := poolClass(size)
	if l := p.free[c]; len(l) > 0 {
		b := l[len(l)-1]
		l[len(l)-1] = nil
		p.free[c] = l[:len(l)-1]
		return b[:n]
	}
	for k := poolClasses - 1; k >= 0 && p.Budget > 0 && p.allocated+int64(size) > p.Budget; {
		l := p.free[k]
		if len(l) == 0 {
			k--
			continue
		}
		p.allocated -= int64(cap(l[len(l)-1]))
		l[len(l)-1] = nil
		p.free[k] = l[:len(l)-1]
	}
	p.allocated += int64(size)
	return make([]byte, n, size)
}

// Put gives back b, which Get returned; the caller must not use it
// afterwards, nor give it back twice. A buffer whose capacity is not its
// class's (nil, one larger than the largest class, one grown by append)
// is ignored.
func (p *Pool) Put(b []byte) {
	n := cap(b)
	if n == 0 || n > p.top() || p.ClassSize(n) != n {
		return
	}
	c := poolClass(n)
	if k := len(p.free[c]); (p.Keep > 0 && k >= p.Keep) || (p.KeepBytes > 0 && (k+1)*n > p.KeepBytes) {
		p.allocated -= int64(n)
		return
	}
	p.free[c] = append(p.free[c], b[:0])
}

// Allocated returns the bytes of the buffers Get made that are in use or
// free: what the pool costs. A leak test compares it with FreeBytes.
func (p *Pool) Allocated() int64 { return p.allocated }

// Free returns the number of free buffers in n's class.
func (p *Pool) Free(n int) int {
	if n > p.top() {
		return 0
	}
	return len(p.free[poolClass(p.ClassSize(n))])
}

// FreeBytes returns the bytes of the free buffers.
func (p *Pool) FreeBytes() int64 {
	var t int64
	for _, l := range p.free {
		for _, b := range l {
			t += int64(cap(b))
		}
	}
	return t
}
