package pool_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/wire"
)

// TestReadVec reads several ranges at once, across stripes and nodes, one
// past the region's end among them: each in-bounds range reads back what
// was written, the other alone fails.
func TestReadVec(t *testing.T) {
	c, _ := testPool(t, 3, 1<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := c.Alloc(ctx, 1<<20, pool.AllocOptions{Stripe: 4096})
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, r.Size())
	for i := range data {
		data[i] = byte(i*7 + i/4096)
	}
	if _, err := r.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	offs := []int64{4090, 0, 70000, r.Size() - 10, 123457}
	ps := [][]byte{make([]byte, 20000), make([]byte, 8), make([]byte, 4096), make([]byte, 20), make([]byte, 1)}
	errs := r.ReadVec(ctx, ps, offs)
	for i, p := range ps {
		if i == 3 {
			if !errors.Is(errs[i], wire.StatusOutOfBounds) {
				t.Errorf("read past the end: %v, want out of bounds", errs[i])
			}
			continue
		}
		if errs[i] != nil || !bytes.Equal(p, data[offs[i]:offs[i]+int64(len(p))]) {
			t.Errorf("read %d (%d bytes at %d): %v, or not what was written", i, len(p), offs[i], errs[i])
		}
	}
	if errs := r.ReadVec(ctx, ps[:2], offs[:1]); errs[0] == nil || errs[1] == nil {
		t.Errorf("buffers and offsets of different counts: %v", errs)
	}
}
