package stor

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"
)

// A node's directory:
//
//	node.json              {"id": N}: the node id, fixed at the first start
//	vols/NAME/desc.json    the volume's Descriptor and lease epoch
//	vols/NAME/data         the volume's bytes (sparse: only held extents are written)
//	vols/NAME/versions     one big-endian u64 per extent: the version of its last write applied
//	vols/NAME/resync       extents being copied from other replicas (u32 each); present only during a resync

// volMeta is desc.json.
type volMeta struct {
	Desc  Descriptor `json:"desc"`
	Epoch uint64     `json:"epoch"` // highest lease epoch granted
	// Missing: replicas that missed writes (node id → first version
	// missed), as the writer reported them; cleared when they caught up.
	Missing map[uint16]uint64 `json:"missing,omitempty"`
	// Gen is the volume's data generation this copy was last written in:
	// a writer starts a new one, recorded on every node it writes to,
	// whenever the nodes it writes to change (it opens the volume, drops a
	// node it found dead, takes one back). Members are the nodes of
	// generation Gen (nil before the first: every node of the volume).
	// A copy whose generation some other node has passed without it has
	// missed writes.
	Gen     uint64   `json:"gen,omitempty"`
	Members []uint16 `json:"members,omitempty"`
	// Outdated: this copy is known to have missed writes (a node holds a
	// later generation without it, a writer said so, or it has not
	// finished copying from a current replica). It serves no read and
	// counts as no replica until a resync from a current replica ends.
	Outdated bool `json:"outdated,omitempty"`
}

// members returns the nodes of the copy's generation. Caller holds v.mu.
func (m *volMeta) members() []uint16 {
	if m.Members == nil {
		return m.Desc.Nodes
	}
	return m.Members
}

// vol is one volume a node holds.
type vol struct {
	dir string

	mu        sync.Mutex
	meta      volMeta
	data      *os.File
	vfile     *os.File
	versions  []uint64
	stale     map[int]bool // extents awaiting a copy (resync): reads of them are refused
	ready     bool         // serves reads: not resyncing, not waiting for the writer
	holder    uint64       // lease holder (0: none)
	holderGen uint64       // the generation the holder writes in, as its last renewal said (0: none yet)
	direct    bool         // the holder sends each write to each node itself (a gateway), in no write group
	expires   time.Time    // lease expiry
	werr      Code         // first write error since the last flush
	removed   bool
	syncing   bool                   // a resync runs
	wgroups   map[string]*writeGroup // the writer's groups this node is in, by replica set
	// live: every write group whose writes this node still receives or
	// applies (those of wgroups and those draining), for reads to wait
	// for the writes that reached the node before them.
	live     map[*writeGroup]struct{}
	appliedW uint64 // writes applied, for stats
	// state says why the copy does not serve reads (stateReady when it
	// does), waitFor the nodes a resync waits to hear from.
	state   string
	waitFor []uint16
	// track: from the moment the copy may be behind (a resync starts,
	// or a writer takes it into its groups as outdated) until it is
	// ready, dirty records per extent the byte ranges [from, to) of the
	// writes applied, merged: a resync keeps those bytes, newer than any
	// copy's, and copies the rest.
	track bool
	dirty map[int][][2]uint64
}

// startTrack starts recording the writes applied; with reset, it
// forgets those recorded so far. Only writes of the writer's latest
// generation, which this node is in, may be kept over a copy's bytes: an
// earlier one may have been overwritten since in a generation without
// this node. Caller holds v.mu.
func (v *vol) startTrack(reset bool) {
	if !v.track || reset {
		v.track, v.dirty = true, map[int][][2]uint64{}
	}
}

// stopTrack forgets them. Caller holds v.mu.
func (v *vol) stopTrack() { v.track, v.dirty = false, nil }

// addDirty records that [lo, hi) of extent e was written, merging
// ranges that overlap or touch (at most one range per written block, as
// many as the extent has). Caller holds v.mu.
func (v *vol) addDirty(e int, lo, hi uint64) {
	rs := v.dirty[e]
	out := rs[:0:0]
	for _, r := range rs {
		if r[1] < lo || r[0] > hi {
			out = append(out, r)
			continue
		}
		lo, hi = min(lo, r[0]), max(hi, r[1])
	}
	v.dirty[e] = append(out, [2]uint64{lo, hi})
}

// A copy's states, as `vol stat` shows them.
const (
	stateReady     = "ready"     // current: serves reads
	stateVerifying = "verifying" // comparing with the other replicas after a start or a cut
	stateResyncing = "resyncing" // copying extents from another replica
	stateWaiting   = "waiting"   // nodes of its generation are down: it cannot tell whether it is current
	stateWriter    = "writer"    // a writer holds the lease and has not taken this node into its groups yet
	stateOutdated  = "outdated"  // missed writes; waits for a current replica to copy from
)

// store is a node's volumes on disk.
type store struct {
	dir      string
	id       uint16
	capacity uint64

	mu      sync.Mutex
	vols    map[string]*vol
	cat     *catalog // every volume the node knows of (under mu)
	used    uint64   // bytes of extents held, over all volumes
	extents int      // extents of all volumes: each costs a version in memory
}

// nodeFile is node.json.
type nodeFile struct {
	ID int `json:"id"`
}

// openStore opens (creating it if need be) the node directory dir. id is
// the node id asked for (-1: the one dir holds, or 0 for a new dir); a dir
// made for another id is refused.
func openStore(dir string, id int, capacity uint64) (*store, error) {
	if err := os.MkdirAll(filepath.Join(dir, "vols"), 0o700); err != nil {
		return nil, err
	}
	nf := filepath.Join(dir, "node.json")
	b, err := os.ReadFile(nf)
	switch {
	case err == nil:
		var f nodeFile
		if err := json.Unmarshal(b, &f); err != nil || f.ID < 0 || f.ID >= MaxNodes {
			return nil, fmt.Errorf("stor: %s: not a node file (%v)", nf, err)
		}
		if id >= 0 && id != f.ID {
			return nil, fmt.Errorf("stor: %s belongs to node %d, not %d", dir, f.ID, id)
		}
		id = f.ID
	case errors.Is(err, fs.ErrNotExist):
		if id < 0 {
			id = 0
		}
		if id >= MaxNodes {
			return nil, fmt.Errorf("stor: node id %d: want 0 to %d", id, MaxNodes-1)
		}
		b, _ := json.Marshal(nodeFile{ID: id})
		if err := writeFileSync(nf, b); err != nil {
			return nil, err
		}
	default:
		return nil, err
	}
	cat, err := loadCatalog(dir)
	if err != nil {
		return nil, err
	}
	s := &store{dir: dir, id: uint16(id), capacity: capacity, vols: map[string]*vol{}, cat: cat}
	ents, err := os.ReadDir(filepath.Join(dir, "vols"))
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		if !e.IsDir() || checkName(e.Name()) != nil {
			continue
		}
		v, err := s.load(e.Name())
		if err != nil {
			s.close()
			return nil, err
		}
		s.vols[v.meta.Desc.Name] = v
		s.used += v.meta.Desc.HeldBytes(s.id)
		s.extents += v.meta.Desc.Extents()
		// The catalog knows every volume the node holds (a directory
		// made before it kept one).
		if _, err := s.cat.add(CatalogEntry{Desc: v.meta.Desc}, time.Now()); err != nil {
			s.close()
			return nil, err
		}
	}
	return s, nil
}

// writeFileSync writes name atomically and durably (temp file, fsync,
// rename, fsync of the directory).
func writeFileSync(name string, b []byte) error {
	tmp := name + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, name); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(name))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func (s *store) load(name string) (*vol, error) {
	dir := filepath.Join(s.dir, "vols", name)
	b, err := os.ReadFile(filepath.Join(dir, "desc.json"))
	if err != nil {
		return nil, fmt.Errorf("stor: volume %s: %w", name, err)
	}
	v := &vol{dir: dir}
	if err := json.Unmarshal(b, &v.meta); err != nil {
		return nil, fmt.Errorf("stor: volume %s: desc.json: %w", name, err)
	}
	if err := v.meta.Desc.Check(); err != nil || v.meta.Desc.Name != name {
		return nil, fmt.Errorf("stor: volume %s: desc.json: %v", name, err)
	}
	if err := v.open(); err != nil {
		return nil, err
	}
	// Extents whose copy was interrupted are stale until copied again.
	if b, err := os.ReadFile(filepath.Join(dir, "resync")); err == nil {
		v.stale = map[int]bool{}
		for i := 0; i+4 <= len(b); i += 4 {
			if e := int(binary.BigEndian.Uint32(b[i:])); e < len(v.versions) {
				v.stale[e] = true
				v.versions[e] = 0
			}
		}
	}
	return v, nil
}

// open opens the volume's files and reads its versions.
func (v *vol) open() error {
	var err error
	if v.data, err = os.OpenFile(filepath.Join(v.dir, "data"), os.O_RDWR|os.O_CREATE, 0o600); err != nil {
		return err
	}
	if v.vfile, err = os.OpenFile(filepath.Join(v.dir, "versions"), os.O_RDWR|os.O_CREATE, 0o600); err != nil {
		v.data.Close()
		return err
	}
	n := v.meta.Desc.Extents()
	b := make([]byte, 8*n)
	if _, err := v.vfile.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		v.close()
		return err
	}
	v.versions = make([]uint64, n)
	for i := range v.versions {
		v.versions[i] = binary.BigEndian.Uint64(b[8*i:])
	}
	return nil
}

func (v *vol) close() {
	if v.data != nil {
		v.data.Close()
	}
	if v.vfile != nil {
		v.vfile.Close()
	}
}

func (s *store) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range s.vols {
		v.mu.Lock()
		v.close()
		v.mu.Unlock()
	}
}

// get returns volume name, or nil.
func (s *store) get(name string) *vol {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.vols[name]
}

// list returns the volumes held, by name.
func (s *store) list() []*vol {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*vol, 0, len(s.vols))
	for _, name := range slices.Sorted(maps.Keys(s.vols)) {
		out = append(out, s.vols[name])
	}
	return out
}

// create makes volume d on this node; creating the same volume again is
// not an error (a client retrying a create), a different one of the same
// name is ErrExists.
func (s *store) create(d Descriptor) (*vol, bool, error) {
	if err := d.Check(); err != nil {
		return nil, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if v := s.vols[d.Name]; v != nil {
		if v.meta.Desc.Created == d.Created && v.meta.Desc.Size == d.Size {
			return v, false, nil
		}
		return nil, false, fmt.Errorf("%w: %s (created %s)", ErrExists, d.Name, time.Unix(0, v.meta.Desc.Created).UTC().Format(time.RFC3339))
	}
	if e, ok := s.cat.entries[d.Name]; ok && e.Removed == 0 && e.Desc.Created != d.Created {
		return nil, false, fmt.Errorf("%w: %s (created %s, on nodes %v)", ErrExists, d.Name, time.Unix(0, e.Desc.Created).UTC().Format(time.RFC3339), e.Desc.Nodes)
	}
	if len(s.vols) >= MaxVolumes {
		return nil, false, fmt.Errorf("%w: the node holds %d volumes, the most it takes", ErrNoSpace, len(s.vols))
	}
	if s.extents+d.Extents() > MaxNodeExtents {
		return nil, false, fmt.Errorf("%w: %d extents asked, the node keeps versions for %d of %d", ErrNoSpace, d.Extents(), MaxNodeExtents-s.extents, MaxNodeExtents)
	}
	held := d.HeldBytes(s.id)
	if s.capacity > 0 && s.used+held > s.capacity {
		return nil, false, fmt.Errorf("%w: %d bytes asked, %d of %d free", ErrNoSpace, held, s.capacity-s.used, s.capacity)
	}
	dir := filepath.Join(s.dir, "vols", d.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, err
	}
	v := &vol{dir: dir, meta: volMeta{Desc: d}, ready: true, state: stateReady}
	b, _ := json.Marshal(v.meta)
	if err := writeFileSync(filepath.Join(dir, "desc.json"), b); err != nil {
		os.RemoveAll(dir)
		return nil, false, err
	}
	if err := v.open(); err != nil {
		os.RemoveAll(dir)
		return nil, false, err
	}
	if err := v.data.Truncate(int64(d.Size)); err != nil {
		v.close()
		os.RemoveAll(dir)
		return nil, false, err
	}
	if _, err := s.cat.add(CatalogEntry{Desc: d}, time.Now()); err != nil {
		v.close()
		os.RemoveAll(dir)
		return nil, false, err
	}
	s.vols[d.Name] = v
	s.used += held
	s.extents += d.Extents()
	return v, true, nil
}

// remove deletes volume name.
func (s *store) remove(name string) error {
	s.mu.Lock()
	v := s.vols[name]
	if v == nil {
		s.mu.Unlock()
		return ErrNoVolume
	}
	delete(s.vols, name)
	s.used -= v.meta.Desc.HeldBytes(s.id)
	s.extents -= v.meta.Desc.Extents()
	_, cerr := s.cat.add(CatalogEntry{Desc: v.meta.Desc, Removed: time.Now().UnixNano()}, time.Now())
	s.mu.Unlock()
	if cerr != nil {
		return cerr
	}
	v.mu.Lock()
	v.removed = true
	v.close()
	gs := v.takeGroups()
	v.mu.Unlock()
	for _, g := range gs {
		g.stop()
	}
	return os.RemoveAll(v.dir)
}

// leasedTo reports whether holder holds v's write lease now. Caller holds
// v.mu.
func (v *vol) leasedTo(holder uint64) bool {
	return v.holder == holder && holder != 0 && time.Now().Before(v.expires)
}

// saveMeta writes desc.json. Caller holds v.mu.
func (v *vol) saveMeta() error {
	b, _ := json.Marshal(v.meta)
	return writeFileSync(filepath.Join(v.dir, "desc.json"), b)
}

// check reports whether [off, off+n) lies in one extent of the volume that
// node holds, and returns the extent.
func (v *vol) check(node uint16, off uint64, n int) (int, error) {
	d := &v.meta.Desc
	if n < 0 || n > MaxIO {
		return 0, fmt.Errorf("%w: %d bytes (at most %d)", ErrTooLarge, n, MaxIO)
	}
	if off >= d.Size || uint64(n) > d.Size-off {
		return 0, fmt.Errorf("%w: %d bytes at %d of a %d-byte volume", ErrOutOfRange, n, off, d.Size)
	}
	e := int(off / d.Extent)
	if n > 0 && (off+uint64(n)-1)/d.Extent != uint64(e) {
		return 0, fmt.Errorf("%w: %d bytes at %d cross an extent boundary", ErrOutOfRange, n, off)
	}
	if !d.Holds(node, e) {
		return 0, fmt.Errorf("%w: extent %d is not on node %d", ErrOutOfRange, e, node)
	}
	return e, nil
}

// apply writes data at off and records ver as extent e's version (the
// later of the two, as multicast delivers writes in order). Caller holds
// v.mu.
func (v *vol) apply(e int, ver, off uint64, data []byte) error {
	if _, err := v.data.WriteAt(data, int64(off)); err != nil {
		return ioErr(err)
	}
	v.appliedW++
	if v.track {
		v.addDirty(e, off, off+uint64(len(data)))
	}
	if ver <= v.versions[e] {
		return nil
	}
	v.versions[e] = ver
	if v.stale[e] {
		// Its copy is still to come: the version on disk stays 0 until
		// then, so a crash before it copies the extent again.
		return nil
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], ver)
	if _, err := v.vfile.WriteAt(b[:], int64(8*e)); err != nil {
		return ioErr(err)
	}
	return nil
}

// writeExcept writes b at off but for the ranges in skip. Caller holds
// v.mu.
func (v *vol) writeExcept(b []byte, off uint64, skip [][2]uint64) error {
	keep := make([]bool, len(b))
	for _, r := range skip {
		lo, hi := max(r[0], off), min(r[1], off+uint64(len(b)))
		for i := lo; i < hi; i++ {
			keep[i-off] = true
		}
	}
	for i := 0; i < len(b); {
		if keep[i] {
			i++
			continue
		}
		j := i
		for j < len(b) && !keep[j] {
			j++
		}
		if _, err := v.data.WriteAt(b[i:j], int64(off)+int64(i)); err != nil {
			return ioErr(err)
		}
		i = j
	}
	return nil
}

// sync makes every write so far durable.
func (v *vol) sync() error {
	if err := datasync(v.data); err != nil {
		return ioErr(err)
	}
	if err := datasync(v.vfile); err != nil {
		return ioErr(err)
	}
	return nil
}

// ioErr maps a backing-store error: a full disk is ErrNoSpace, the rest
// ErrIO.
func ioErr(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EFBIG) {
		return fmt.Errorf("%w: %v", ErrNoSpace, err)
	}
	return fmt.Errorf("%w: %v", ErrIO, err)
}

// markStale records extents es as awaiting a copy, durably, before the
// copy starts: a crash during the resync copies them again at the next
// start. Caller holds v.mu.
func (v *vol) markStale(es []int) error {
	if v.stale == nil {
		v.stale = map[int]bool{}
	}
	b := make([]byte, 0, 4*(len(es)+len(v.stale)))
	for _, e := range es {
		v.stale[e] = true
	}
	for e := range v.stale {
		b = binary.BigEndian.AppendUint32(b, uint32(e))
	}
	return writeFileSync(filepath.Join(v.dir, "resync"), b)
}

// copied records extent e as copied at version ver: exactly ver if
// exact, else the later of ver and the extent's. Caller holds v.mu.
func (v *vol) copied(e int, ver uint64, exact bool) error {
	delete(v.stale, e)
	if exact {
		v.versions[e] = ver
	} else {
		v.versions[e] = max(v.versions[e], ver)
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v.versions[e])
	if _, err := v.vfile.WriteAt(b[:], int64(8*e)); err != nil {
		return ioErr(err)
	}
	if len(v.stale) == 0 {
		if err := v.sync(); err != nil {
			return err
		}
		if err := os.Remove(filepath.Join(v.dir, "resync")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}
