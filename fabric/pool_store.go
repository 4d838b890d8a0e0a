package fabric

import (
	"fmt"
	"maps"
	"slices"

	"github.com/ndma/ndma/fabric/ctrlstore"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
	"github.com/ndma/ndma/wire/poolmap"
)

// The pool map written through to a store (Config.Store; package
// ctrlstore).
//
// Every change of a region (created and ready, freed, its key learned,
// its epoch raised, a column lost, being rebuilt or rebuilt, a fence
// raised or adopted from a report) marks it dirty in the MMU; each Poll
// hands the dirty regions' records to the store (Put, or Delete for a
// region gone), which writes them in the background: the switch never
// waits for it. A region's records reach the store in the order the
// switch made them, the last one last.
//
// A starting switch takes the store's regions into its map before any
// node registers (loadStore): with their keys, epochs, fences and lost
// columns. Every column not lost waits for its node's report as a column
// rebuilt from reports does (pool_recover.go): the reports decide which
// copies are current (the highest epoch reported wins; a column not
// reported is lost), not the store's epoch, which may be ahead of what
// the nodes heard (a raise not yet sent) or behind what they hold (a
// record not yet written). A column the store has lost (or being
// rebuilt, which the restart cut short) stays lost until rebuilt, whatever
// its node reports. The nodes' reports still rebuild a region the
// store does not have (one created just before the switch stopped, its
// record not yet written).

// loadStore takes the store's records into the empty map; a record the
// map cannot hold (an extent that overlaps another's, more nodes than
// the table holds) is refused with an event and counted.
func (p *poolPlane) loadStore(recs []*ctrlstore.Record) {
	for _, rec := range recs {
		if err := p.loadRecord(rec); err != nil {
			p.sw.stats.PoolRecordsRefused++
			p.sw.logEvent(Event{Kind: EventRecordRefused, Region: rec.Region, Err: err})
			continue
		}
		p.sw.stats.PoolRegionsLoaded++
	}
}

// loadRecord adds the region rec describes to the map.
func (p *poolPlane) loadRecord(rec *ctrlstore.Record) error {
	l, err := poolmap.NewLayout(rec.Pool.Size, rec.Pool.Stripe, rec.Pool.Columns, rec.Pool.Replicas)
	switch {
	case err != nil:
		return err
	case len(rec.Homes) != l.Columns || len(rec.Lost) != l.Columns || len(rec.Rebuilding) != l.Columns:
		return fmt.Errorf("%d homes for %d columns", len(rec.Homes), l.Columns)
	case rec.Pool.Perm == 0 || wire.Perm(rec.Pool.Perm)&^wire.PermAll != 0:
		return fmt.Errorf("permissions %#x", rec.Pool.Perm)
	case rec.Region == 0 || p.mmu.regions[rec.Region] != nil:
		return fmt.Errorf("region id %d taken", rec.Region)
	case len(p.mmu.regions) >= MaxPoolRegions:
		return fmt.Errorf("%w: %d regions", ctrl.ErrNoSpace, len(p.mmu.regions))
	case rec.Key != 0 && ctrl.PoolKeyDigest(rec.Region, rec.Key) != rec.Digest:
		return fmt.Errorf("region %d: the key does not match the digest", rec.Region)
	}
	k := l.Columns
	r := &PoolRegion{ID: rec.Region, Key: rec.Key, Perm: wire.Perm(rec.Pool.Perm), Layout: l, Homes: make([]Home, k),
		Lost: make([]bool, k), Rebuilding: make([]bool, k), Ready: true, Epoch: rec.Epoch,
		digest: rec.Digest, unconfirmed: make([]bool, k)}
	for c, h := range rec.Homes {
		node, err := p.mmu.nodeFor(h.Addr)
		if err == nil && !node.reserve(h.Base, l.ColumnBytes(c)) {
			err = fmt.Errorf("%w: column %d's extent at %d on %v is not free", ctrl.ErrNoSpace, c, h.Base, h.Addr)
		}
		if err != nil {
			for j := range c {
				r.Homes[j].Node.release(r.Homes[j].Base, l.ColumnBytes(j))
			}
			return err
		}
		r.Homes[c] = Home{Node: node, Base: h.Base}
	}
	for c := range k {
		if rec.Lost[c] || rec.Rebuilding[c] {
			r.Lost[c] = true
			continue
		}
		r.unconfirmed[c] = true
		p.unconfirmedCols++
	}
	if !slices.Contains(r.unconfirmed, true) {
		r.unconfirmed = nil
	}
	for _, f := range rec.Fences {
		if len(r.fences) < wire.MaxFences {
			r.raiseFence(f)
		}
	}
	p.mmu.regions[r.ID] = r
	p.mmu.nextID = max(p.mmu.nextID, r.ID)
	return nil
}

// flushStore hands the dirty regions to the store: a ready region's
// record, or the deletion of a region gone.
func (p *poolPlane) flushStore() {
	st := p.sw.cfg.Store
	if st == nil || len(p.mmu.dirty) == 0 {
		return
	}
	for _, id := range slices.Sorted(maps.Keys(p.mmu.dirty)) {
		switch r := p.mmu.regions[id]; {
		case r == nil:
			st.Delete(id)
		case r.Ready:
			st.Put(r.record())
		}
	}
	clear(p.mmu.dirty)
}

// record is r as a store keeps it.
func (r *PoolRegion) record() *ctrlstore.Record {
	s := r.spec()
	return &ctrlstore.Record{Region: r.ID, Key: r.Key, Digest: r.digest, Epoch: r.Epoch,
		Pool:  ctrl.PoolSpec{Region: r.ID, Size: s.Size, Stripe: s.Stripe, Columns: s.Columns, Replicas: s.Replicas, Perm: s.Perm},
		Homes: r.homes(), Lost: slices.Clone(r.Lost), Rebuilding: slices.Clone(r.Rebuilding), Fences: r.fenceList()}
}

// touch marks region id changed: the next Poll writes it to the store.
// Without a store it does nothing.
func (m *MMU) touch(id uint32) {
	if m.dirty != nil {
		m.dirty[id] = true
	}
}
