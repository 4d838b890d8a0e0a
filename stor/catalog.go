package stor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// The catalog: every storage node keeps the descriptor of every volume
// created while it was up, not only of those it holds, and a tombstone
// for each removed, so that a name stays taken (and listed, as
// unavailable) while every node holding the volume is down, and a removed
// volume does not come back with a node that was down at its removal.

// MaxCatalog bounds a node's catalog entries (volumes and tombstones);
// beyond it the oldest tombstone goes first, then a create is refused.
const MaxCatalog = 4 * MaxVolumes

// TombstoneLife is how long a node keeps a removed volume's tombstone.
const TombstoneLife = 30 * 24 * time.Hour

// CatalogEntry is one volume a node knows of: Removed is when it was
// removed (Unix ns; 0 while it exists).
type CatalogEntry struct {
	Desc    Descriptor `json:"desc"`
	Removed int64      `json:"removed,omitempty"`
}

// catalogFile is a node's catalog, catalog.json in its directory.
const catalogFile = "catalog.json"

// catalog is the catalog of a store. Caller holds s.mu for every method.
type catalog struct {
	path    string
	entries map[string]CatalogEntry // by name: the latest incarnation known
}

func loadCatalog(dir string) (*catalog, error) {
	c := &catalog{path: filepath.Join(dir, catalogFile), entries: map[string]CatalogEntry{}}
	b, err := os.ReadFile(c.path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, err
	}
	var es []CatalogEntry
	if err := json.Unmarshal(b, &es); err != nil {
		return nil, fmt.Errorf("stor: %s: %w", c.path, err)
	}
	for _, e := range es {
		if e.Desc.Check() == nil {
			c.entries[e.Desc.Name] = e
		}
	}
	return c, nil
}

func (c *catalog) save() error {
	es := make([]CatalogEntry, 0, len(c.entries))
	for _, e := range c.entries {
		es = append(es, e)
	}
	slices.SortFunc(es, func(a, b CatalogEntry) int { return cmpStr(a.Desc.Name, b.Desc.Name) })
	b, _ := json.Marshal(es)
	return writeFileSync(c.path, b)
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// add records e (a volume, or with Removed its tombstone) unless the
// catalog knows a later incarnation of the name, or the same one removed.
// It reports whether the catalog changed; ErrNoSpace when it is full.
func (c *catalog) add(e CatalogEntry, now time.Time) (bool, error) {
	c.expire(now)
	old, ok := c.entries[e.Desc.Name]
	switch {
	case ok && old.Desc.Created > e.Desc.Created:
		return false, nil
	case ok && old.Desc.Created == e.Desc.Created && (old.Removed != 0 || e.Removed == 0):
		return false, nil
	}
	if !ok && len(c.entries) >= MaxCatalog && !c.evictTombstone() {
		return false, fmt.Errorf("%w: the node's catalog holds %d volumes, the most it takes", ErrNoSpace, MaxCatalog)
	}
	c.entries[e.Desc.Name] = e
	return true, c.save()
}

// expire drops tombstones older than TombstoneLife.
func (c *catalog) expire(now time.Time) {
	for name, e := range c.entries {
		if e.Removed != 0 && now.Sub(time.Unix(0, e.Removed)) > TombstoneLife {
			delete(c.entries, name)
		}
	}
}

// evictTombstone drops the oldest tombstone, if any.
func (c *catalog) evictTombstone() bool {
	var oldest string
	for name, e := range c.entries {
		if e.Removed != 0 && (oldest == "" || e.Removed < c.entries[oldest].Removed) {
			oldest = name
		}
	}
	if oldest == "" {
		return false
	}
	delete(c.entries, oldest)
	return true
}

// list returns the entries, by name.
func (c *catalog) list() []CatalogEntry {
	out := make([]CatalogEntry, 0, len(c.entries))
	for _, e := range c.entries {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b CatalogEntry) int { return cmpStr(a.Desc.Name, b.Desc.Name) })
	return out
}
