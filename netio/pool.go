package netio

import (
	"sync"
	"sync/atomic"
)

// Buffer size classes, in bytes. GetBuffer hands out the smallest class
// that holds the requested size.
const (
	SmallBufferSize  = 2 << 10  // one MTU-sized datagram
	MediumBufferSize = 16 << 10 // a jumbo frame or a small GSO batch
	LargeBufferSize  = 64 << 10 // any UDP datagram (>= MaxDatagram)
)

var bufferClasses = [...]int{SmallBufferSize, MediumBufferSize, LargeBufferSize}

var (
	bufferPools [len(bufferClasses)]sync.Pool
	outstanding atomic.Int64
)

func init() {
	for i, size := range bufferClasses {
		bufferPools[i].New = func() any {
			return &Buffer{data: make([]byte, size), class: int8(i)}
		}
	}
}

// Buffer is a reference-counted packet buffer from a size-classed pool,
// modelled on quic-go's packetBuffer. GetBuffer returns it with one
// reference; every Retain must be matched by a Release, and the last
// Release returns the memory to the pool, after which the Buffer and any
// slice obtained from Bytes must not be used. Retain and Release are safe
// for concurrent use; the contents are not synchronised.
type Buffer struct {
	data  []byte // full class-sized backing array
	n     int    // length reported by Bytes
	refs  atomic.Int32
	class int8 // index into bufferClasses; -1 for an unpooled oversize buffer
}

// GetBuffer returns a Buffer with one reference whose Bytes has length size
// and capacity of the smallest size class (SmallBufferSize,
// MediumBufferSize, LargeBufferSize) that holds size. A size above
// LargeBufferSize is served by a fresh allocation of exactly that size that
// is not pooled. GetBuffer panics if size is negative.
func GetBuffer(size int) *Buffer {
	if size < 0 {
		panic("netio: GetBuffer with negative size")
	}
	var b *Buffer
	for i, c := range bufferClasses {
		if size <= c {
			b = bufferPools[i].Get().(*Buffer)
			break
		}
	}
	if b == nil {
		b = &Buffer{data: make([]byte, size), class: -1}
	}
	b.n = size
	b.refs.Store(1)
	outstanding.Add(1)
	return b
}

// Bytes returns the buffer's contents: length as requested from GetBuffer
// (or set by SetLen), capacity that of its size class. The slice is valid
// until the last Release.
func (b *Buffer) Bytes() []byte { return b.data[:b.n] }

// Cap returns the buffer's capacity in bytes: the largest length SetLen
// accepts.
func (b *Buffer) Cap() int { return len(b.data) }

// SetLen sets the length Bytes reports, for example to the size of a
// datagram received into the full capacity. It panics if n is negative or
// above Cap.
func (b *Buffer) SetLen(n int) {
	if n < 0 || n > len(b.data) {
		panic("netio: Buffer.SetLen out of range")
	}
	b.n = n
}

// Retain adds a reference. It panics if the buffer was already released
// for the last time.
func (b *Buffer) Retain() {
	if b.refs.Add(1) <= 1 {
		panic("netio: Retain of a released Buffer")
	}
}

// Release drops a reference; the last one returns the buffer to its pool.
// It panics when called more often than GetBuffer and Retain together,
// since a double release would hand the same memory to two owners.
func (b *Buffer) Release() {
	switch r := b.refs.Add(-1); {
	case r > 0:
		return
	case r < 0:
		panic("netio: Buffer released more often than retained")
	}
	outstanding.Add(-1)
	if b.class >= 0 {
		bufferPools[b.class].Put(b)
	}
}

// OutstandingBuffers returns how many Buffers from GetBuffer have not yet
// been released for the last time, across the process. Tests compare it
// before and after a scenario to detect leaks.
func OutstandingBuffers() int64 { return outstanding.Load() }
