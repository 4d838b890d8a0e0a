package mq

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
)

// A consumer group's record in the control region: an id word (FNV-1a
// of the group's name, claimed by compare-and-swap from zero) and a
// committed offset per partition, moved forward only, by
// compare-and-swap.

// groupID is the id word of group name: never zero.
func groupID(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64() | 1
}

// group finds group name's slot, claiming a free one if it has none.
func (t *Topic) group(ctx context.Context, name string) (int, error) {
	if name == "" || len(name) > 255 {
		return 0, fmt.Errorf("%w: group name of %d bytes (want 1 to 255)", ErrBadRequest, len(name))
	}
	id := groupID(name)
	for g := range t.l.Groups {
		for {
			var b [8]byte
			if _, err := t.ctl.ReadAtContext(ctx, b[:], int64(t.l.groupAddr(g))); err != nil {
				return 0, fmt.Errorf("mq: reading the groups of %q: %w", t.ref.Name, err)
			}
			switch w := binary.LittleEndian.Uint64(b[:]); w {
			case id:
				return g, nil
			case 0:
				old, err := t.ctl.CompareAndSwap(ctx, t.l.groupAddr(g), 0, id)
				if err != nil {
					return 0, fmt.Errorf("mq: claiming a group slot of %q: %w", t.ref.Name, err)
				}
				if old == 0 || old == id {
					return g, nil
				}
				continue // taken meanwhile: look at it again
			}
			break
		}
	}
	return 0, fmt.Errorf("%w: the %d consumer groups of %q are taken", ErrFull, t.l.Groups, t.ref.Name)
}

func (t *Topic) groupOffsetAddr(g, p int) uint64 { return t.l.groupAddr(g) + 8 + 8*uint64(p) }

// groupOffset reads group slot g's committed offset of partition p.
func (t *Topic) groupOffset(ctx context.Context, g, p int) (uint64, error) {
	var b [8]byte
	if _, err := t.ctl.ReadAtContext(ctx, b[:], int64(t.groupOffsetAddr(g, p))); err != nil {
		return 0, fmt.Errorf("mq: reading a group offset of %q: %w", t.ref.Name, err)
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// commitGroup moves group slot g's offset of partition p forward to off
// (never back) and returns the offset it holds after.
func (t *Topic) commitGroup(ctx context.Context, g, p int, off uint64) (uint64, error) {
	cur, err := t.groupOffset(ctx, g, p)
	for err == nil && cur < off {
		var old uint64
		old, err = t.ctl.CompareAndSwap(ctx, t.groupOffsetAddr(g, p), cur, off)
		if err == nil && old == cur {
			return off, nil
		}
		cur = old
	}
	if err != nil {
		return 0, fmt.Errorf("mq: committing a group offset of %q: %w", t.ref.Name, err)
	}
	return cur, nil
}
