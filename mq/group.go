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

// findGroup finds group name's slot without claiming one: ok is false
// when the group has none.
func (t *Topic) findGroup(ctx context.Context, name string) (int, bool, error) {
	id := groupID(name)
	for g := range t.l.Groups {
		var b [8]byte
		if _, err := t.ctl.ReadAtContext(ctx, b[:], int64(t.l.groupAddr(g))); err != nil {
			return 0, false, fmt.Errorf("mq: reading the groups of %q: %w", t.ref.Name, err)
		}
		switch binary.LittleEndian.Uint64(b[:]) {
		case id:
			return g, true, nil
		case 0:
			return 0, false, nil // slots are claimed in order
		}
	}
	return 0, false, nil
}

// CommitGroup moves group's committed offset of partition p forward to
// off (never back), claiming a slot for the group if it has none, and
// returns the offset the group holds after. An offset inside a batch
// (as a Kafka client commits) resumes an mq Consumer at that batch's
// start.
func (t *Topic) CommitGroup(ctx context.Context, group string, p int, off uint64) (uint64, error) {
	if err := t.checkPartition(p); err != nil {
		return 0, err
	}
	g, err := t.group(ctx, group)
	if err != nil {
		return 0, err
	}
	return t.commitGroup(ctx, g, p, off)
}

// GroupOffset reads group's committed offset of partition p without
// claiming a slot: ok is false when the group never committed to the
// partition.
func (t *Topic) GroupOffset(ctx context.Context, group string, p int) (off uint64, ok bool, err error) {
	if err := t.checkPartition(p); err != nil {
		return 0, false, err
	}
	g, found, err := t.findGroup(ctx, group)
	if err != nil || !found {
		return 0, false, err
	}
	off, err = t.groupOffset(ctx, g, p)
	return off, err == nil && off != 0, err
}
