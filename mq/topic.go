package mq

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/ndma/ndma/pool"
)

// CreateOptions shape a new topic's regions.
type CreateOptions struct {
	// Replicas is the copies of the data region, 1 (zero means 1) or 2.
	// The control region always has one copy: the pool runs atomics on
	// one-copy regions only.
	Replicas int
	// Stripe is the data region's interleave unit: a multiple of Align;
	// zero means pool.DefaultStripe.
	Stripe uint64
	// Columns is the memory nodes to spread the data region over;
	// zero means every live one.
	Columns int
	// ControlColumns is the memory nodes to spread the control region
	// over; zero means every live one (partition headers on successive
	// nodes), 1 keeps every partition's counters on one node.
	ControlColumns int
}

// Ref names a topic's two regions: what opens it.
type Ref struct {
	Name                string
	Control, Data       uint32 // region ids
	ControlKey, DataKey uint64 // region keys: the capabilities
}

// Topic is an open topic. Its methods are safe for concurrent use.
type Topic struct {
	ref  Ref
	l    Layout
	ctl  *pool.Region
	data *pool.Region
	// noIndex: the control region ends before the time index (a topic
	// made before there was one): lookups by time read every batch
	// header, and nothing is indexed (Rebuild gives it one).
	noIndex bool
}

// Create makes a topic of layout l: its control region (one copy, a
// 64-byte stripe, so that partition headers lie on successive memory
// nodes) and its data region, with the topic header written.
func Create(ctx context.Context, pc *pool.Client, name string, l Layout, o CreateOptions) (*Topic, error) {
	if err := l.Check(); err != nil {
		return nil, err
	}
	if err := CheckName(name); err != nil {
		return nil, err
	}
	if o.Stripe%Align != 0 {
		return nil, fmt.Errorf("%w: a stripe of %d bytes is not a multiple of %d", ErrBadLayout, o.Stripe, Align)
	}
	ctl, err := pc.Alloc(ctx, l.ControlSize(), pool.AllocOptions{Stripe: partHeaderBytes, Replicas: 1, Columns: o.ControlColumns})
	if err != nil {
		return nil, fmt.Errorf("mq: creating the control region of %q (%d bytes): %w", name, l.ControlSize(), err)
	}
	data, err := pc.Alloc(ctx, l.DataSize(), pool.AllocOptions{Stripe: o.Stripe, Replicas: o.Replicas, Columns: o.Columns})
	if err != nil {
		_ = pc.Free(ctx, ctl)
		return nil, fmt.Errorf("mq: creating the data region of %q (%d bytes): %w", name, l.DataSize(), err)
	}
	if _, err := data.WriteAtContext(ctx, appendHeader(nil, l), 0); err != nil && !errors.Is(err, pool.ErrDegraded) {
		_ = pc.Free(ctx, ctl)
		_ = pc.Free(ctx, data)
		return nil, fmt.Errorf("mq: writing the header of %q: %w", name, err)
	}
	ref := Ref{Name: name, Control: ctl.ID(), Data: data.ID(), ControlKey: ctl.Key(), DataKey: data.Key()}
	return &Topic{ref: ref, l: l, ctl: ctl, data: data}, nil
}

// Open opens the topic ref names and reads its layout.
func Open(ctx context.Context, pc *pool.Client, ref Ref) (*Topic, error) {
	ctl, err := pc.Open(ctx, ref.Control, ref.ControlKey)
	if err != nil {
		return nil, fmt.Errorf("mq: opening the control region of %q: %w", ref.Name, err)
	}
	data, err := pc.Open(ctx, ref.Data, ref.DataKey)
	if err != nil {
		return nil, fmt.Errorf("mq: opening the data region of %q: %w", ref.Name, err)
	}
	b := make([]byte, headerLen)
	if _, err := data.ReadAtContext(ctx, b, 0); err != nil {
		return nil, fmt.Errorf("mq: reading the header of %q: %w", ref.Name, err)
	}
	l, err := parseHeader(b)
	if err != nil {
		return nil, err
	}
	if uint64(ctl.Size()) < l.timesStart() || uint64(data.Size()) < l.DataSize() {
		return nil, fmt.Errorf("%w: the regions of %q are smaller than its layout", ErrBadLayout, ref.Name)
	}
	return &Topic{ref: ref, l: l, ctl: ctl, data: data, noIndex: uint64(ctl.Size()) < l.ControlSize()}, nil
}

// Free frees the topic's regions: every access to them fails from then
// on.
func (t *Topic) Free(ctx context.Context, pc *pool.Client) error {
	return errors.Join(pc.Free(ctx, t.ctl), pc.Free(ctx, t.data))
}

// Ref is what opens the topic.
func (t *Topic) Ref() Ref { return t.ref }

// Layout is the topic's geometry.
func (t *Topic) Layout() Layout { return t.l }

// Replicas is the data region's copies.
func (t *Topic) Replicas() int { return t.data.Spec().Replicas }

// CheckName reports whether name is usable as a topic's name: 1 to 64
// letters, digits, '_', '-' or '.', the first a letter or digit.
func CheckName(name string) error {
	ok := len(name) >= 1 && len(name) <= maxName
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		ok = alnum || i > 0 && (c == '_' || c == '-' || c == '.')
	}
	if !ok {
		return fmt.Errorf("%w: topic name %q (want 1 to %d letters, digits, '_', '-' or '.', the first a letter or digit)", ErrBadName, name, maxName)
	}
	return nil
}

// ErrBadName is wrapped by the error for an unusable topic name.
var ErrBadName = errors.New("mq: bad topic name")

// PartitionState is a partition's header as read at one moment.
type PartitionState struct {
	// Start is the oldest offset retained; Committed the end of what
	// readers may read; Tail the end of what producers reserved.
	Start, Committed, Tail uint64
	// Holes is the holes sealed: reservations whose producer did not
	// write them in time.
	Holes uint64
}

// State reads partition p's header.
func (t *Topic) State(ctx context.Context, p int) (PartitionState, error) {
	if err := t.checkPartition(p); err != nil {
		return PartitionState{}, err
	}
	var b [wordClaim]byte
	if _, err := t.ctl.ReadAtContext(ctx, b[:], int64(t.l.partAddr(p))); err != nil {
		return PartitionState{}, fmt.Errorf("mq: partition %d of %q: %w", p, t.ref.Name, err)
	}
	return PartitionState{
		Tail:      binary.LittleEndian.Uint64(b[wordTail:]),
		Committed: binary.LittleEndian.Uint64(b[wordCommitted:]),
		Start:     binary.LittleEndian.Uint64(b[wordStart:]),
		Holes:     binary.LittleEndian.Uint64(b[wordHoles:]),
	}, nil
}

func (t *Topic) checkPartition(p int) error {
	if p < 0 || p >= t.l.Partitions {
		return fmt.Errorf("%w: partition %d of %q (it has %d)", ErrBadRequest, p, t.ref.Name, t.l.Partitions)
	}
	return nil
}

// ErrBadRequest is wrapped by the error for a request the topic cannot
// take: a partition it lacks, an offset it never had.
var ErrBadRequest = errors.New("mq: bad request")

// word reads the control word w of partition p.
func (t *Topic) word(ctx context.Context, p int, w uint64) (uint64, error) {
	var b [8]byte
	if _, err := t.ctl.ReadAtContext(ctx, b[:], int64(t.l.partAddr(p)+w)); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// cas swaps control word w of partition p from old to nu and reports
// whether it did, with the word's value before.
func (t *Topic) cas(ctx context.Context, p int, w, old, nu uint64) (uint64, bool, error) {
	got, err := t.ctl.CompareAndSwap(ctx, t.l.partAddr(p)+w, old, nu)
	return got, err == nil && got == old, err
}

// readLog reads len(b) bytes of partition p's log at offset off.
func (t *Topic) readLog(ctx context.Context, p int, b []byte, off uint64) error {
	done := 0
	for _, pc := range t.l.pieces(p, off, uint64(len(b))) {
		if _, err := t.data.ReadAtContext(ctx, b[done:done+int(pc[1])], int64(pc[0])); err != nil {
			return fmt.Errorf("mq: partition %d of %q at %d: %w", p, t.ref.Name, off, err)
		}
		done += int(pc[1])
	}
	return nil
}

// writeLog writes b to partition p's log at offset off; a write that
// reached only one of two copies reports pool.ErrDegraded.
func (t *Topic) writeLog(ctx context.Context, p int, b []byte, off uint64) error {
	done := 0
	var degraded error
	for _, pc := range t.l.pieces(p, off, uint64(len(b))) {
		if _, err := t.data.WriteAtContext(ctx, b[done:done+int(pc[1])], int64(pc[0])); err != nil {
			if !errors.Is(err, pool.ErrDegraded) {
				return fmt.Errorf("mq: partition %d of %q at %d: %w", p, t.ref.Name, off, err)
			}
			degraded = err
		}
		done += int(pc[1])
	}
	return degraded
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
