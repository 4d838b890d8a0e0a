package ctrlstore

import (
	"slices"
	"sync"
)

// Store is where a switch writes its pool map through. Put and Delete
// are called from the switch's packet loop: they must not block (a store
// queues them, bounded, and writes them in order in the background) and
// must not keep r's slices past the call unless it copies them.
type Store interface {
	// Regions returns the region records the store held when it opened,
	// by region id: a starting switch takes them into its map. It is
	// called once, before the first Put or Delete.
	Regions() []*Record
	// Put records region r.Region as r.
	Put(r *Record)
	// Delete removes region id's record (a freed region).
	Delete(id uint32)
}

// Mem is a Store in memory, for tests: a switch started again with the
// same Mem takes the regions its predecessor recorded. Its records are
// encoded and decoded as a remote store's are. The zero Mem is empty.
type Mem struct {
	mu   sync.Mutex
	recs map[uint32][]byte
	puts int
}

// Regions returns the records held, decoded; a record that does not
// decode is left out.
func (m *Mem) Regions() []*Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*Record, 0, len(m.recs))
	for _, b := range m.recs {
		if r, err := ParseRecord(b); err == nil {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *Record) int { return int(int64(a.Region) - int64(b.Region)) })
	return out
}

// Put stores r's encoding.
func (m *Mem) Put(r *Record) {
	b := AppendRecord(nil, r)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.recs == nil {
		m.recs = make(map[uint32][]byte)
	}
	m.recs[r.Region] = b
	m.puts++
}

// Delete removes region id's record.
func (m *Mem) Delete(id uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.recs, id)
}

// Record returns region id's record as stored (decoded), or nil.
func (m *Mem) Record(id uint32) *Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, _ := ParseRecord(m.recs[id])
	return r
}

// Puts is the number of Put calls so far.
func (m *Mem) Puts() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.puts
}
