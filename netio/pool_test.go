package netio

import (
	"sync"
	"testing"
)

func TestGetBufferSizeClasses(t *testing.T) {
	base := OutstandingBuffers()
	for _, tc := range []struct{ size, cap int }{
		{0, SmallBufferSize},
		{1, SmallBufferSize},
		{SmallBufferSize, SmallBufferSize},
		{SmallBufferSize + 1, MediumBufferSize},
		{MediumBufferSize, MediumBufferSize},
		{MaxDatagram, LargeBufferSize},
		{LargeBufferSize, LargeBufferSize},
		{LargeBufferSize + 1, LargeBufferSize + 1},
	} {
		b := GetBuffer(tc.size)
		if got := len(b.Bytes()); got != tc.size {
			t.Errorf("GetBuffer(%d): len %d", tc.size, got)
		}
		if got := cap(b.Bytes()); got != tc.cap || b.Cap() != tc.cap {
			t.Errorf("GetBuffer(%d): cap %d, Cap() %d, want %d", tc.size, got, b.Cap(), tc.cap)
		}
		if got := OutstandingBuffers() - base; got != 1 {
			t.Errorf("GetBuffer(%d): outstanding %d, want 1", tc.size, got)
		}
		b.SetLen(b.Cap())
		if len(b.Bytes()) != tc.cap {
			t.Errorf("SetLen(Cap) on %d-byte class: len %d", tc.cap, len(b.Bytes()))
		}
		b.Release()
		if got := OutstandingBuffers() - base; got != 0 {
			t.Errorf("after Release of GetBuffer(%d): outstanding %d, want 0", tc.size, got)
		}
	}
}

func TestBufferRefCount(t *testing.T) {
	base := OutstandingBuffers()
	b := GetBuffer(100)
	b.Retain()
	b.Retain()
	b.Release()
	b.Release()
	if got := OutstandingBuffers() - base; got != 1 {
		t.Fatalf("outstanding %d with one reference left, want 1", got)
	}
	b.Release()
	if got := OutstandingBuffers() - base; got != 0 {
		t.Fatalf("outstanding %d after last Release, want 0", got)
	}
}

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s did not panic", what)
		}
	}()
	f()
}

func TestBufferDoubleReleasePanics(t *testing.T) {
	base := OutstandingBuffers()
	b := GetBuffer(SmallBufferSize)
	b.Release()
	mustPanic(t, "second Release", b.Release)
	mustPanic(t, "Retain after last Release", b.Retain)
	if got := OutstandingBuffers() - base; got != 0 {
		t.Fatalf("outstanding %d, want 0", got)
	}

	u := GetBuffer(LargeBufferSize + 1) // unpooled
	u.Release()
	mustPanic(t, "second Release of unpooled buffer", u.Release)

	mustPanic(t, "GetBuffer(-1)", func() { GetBuffer(-1) })
	mustPanic(t, "SetLen beyond Cap", func() {
		b := GetBuffer(10)
		defer b.Release()
		b.SetLen(b.Cap() + 1)
	})
}

func TestBufferConcurrent(t *testing.T) {
	base := OutstandingBuffers()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 1000 {
				b := GetBuffer((g*1000 + i) % (LargeBufferSize + 1))
				b.Bytes()[0:1][0] = byte(i) // the buffer is ours alone
				b.Retain()
				done := make(chan struct{})
				go func() { b.Release(); close(done) }()
				<-done
				b.Release()
			}
		})
	}
	wg.Wait()
	if got := OutstandingBuffers() - base; got != 0 {
		t.Fatalf("outstanding %d after concurrent use, want 0", got)
	}
}

func BenchmarkGetBuffer(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		GetBuffer(1500).Release()
	}
}
