package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ndma/ndma/fabric/ctrlstore"
)

// Defaults of Config.
const (
	DefaultPrefix      = "/ndma/"
	DefaultLeaseTTL    = 10 * time.Second
	DefaultDialTimeout = 5 * time.Second
	// maxRecv bounds one answer from etcd: a key list of
	// ctrlstore.MaxRegions keys, or one value (etcd's own request limit
	// is 1.5 MiB by default).
	maxRecv = 4 << 20
)

// Config configures a Store. Zero values select the documented defaults.
type Config struct {
	// Endpoints is etcd's client addresses, host:port (or URLs). At
	// least one.
	Endpoints []string
	// Prefix is where the switch's keys live. Zero means DefaultPrefix;
	// a "/" is added at the end if missing.
	Prefix string
	// Name names the switch's liveness key (switch/<Name>): its
	// address, for instance. Not empty; no "/".
	Name string
	// LeaseTTL is how long the liveness key outlives a switch that
	// stopped without closing the store. Zero means DefaultLeaseTTL;
	// etcd rounds a TTL below its minimum (about 2s) up.
	LeaseTTL time.Duration
	// DialTimeout bounds Open's first connection and each request.
	// Zero means DefaultDialTimeout.
	DialTimeout time.Duration
	// Logger receives the store's warnings and errors; nil discards
	// them.
	Logger *slog.Logger
}

// ErrConfig wraps configuration errors.
var ErrConfig = errors.New("etcdstore: invalid config")

func (c *Config) setDefaults() error {
	if len(c.Endpoints) == 0 {
		return fmt.Errorf("%w: no etcd endpoints", ErrConfig)
	}
	if c.Name == "" || strings.Contains(c.Name, "/") {
		return fmt.Errorf("%w: switch name %q: want a non-empty name without '/'", ErrConfig, c.Name)
	}
	if c.LeaseTTL < 0 || c.DialTimeout < 0 {
		return fmt.Errorf("%w: negative duration", ErrConfig)
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if !strings.HasSuffix(c.Prefix, "/") {
		c.Prefix += "/"
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Stats counts what a Store did.
type Stats struct {
	// Backlog is the changes queued, not yet written (one per region).
	Backlog int
	// Written counts the records written and deleted; Failed the
	// attempts etcd did not answer (retried); Conflicts the regions
	// another writer had changed (left to it); Foreign the changes
	// another writer made that the watch saw; Refused the records,
	// read or watched, that did not decode or named another region;
	// Dropped the changes not queued because the queue was full.
	Written, Failed, Conflicts, Foreign, Refused, Dropped uint64
	// LeaseLost counts the times the liveness lease expired under a
	// running switch (etcd unreachable for LeaseTTL) and was granted
	// again.
	LeaseLost uint64
}

// Store is a ctrlstore.Store in etcd. Its methods are safe for
// concurrent use.
type Store struct {
	cfg     Config
	cli     *clientv3.Client
	log     *slog.Logger
	regions []*ctrlstore.Record
	loadRev int64

	mu         sync.Mutex
	q          queue
	revs       map[uint32]int64    // mod revision this store last wrote or read, by region
	sent       map[uint32][]uint64 // hashes of the values sent since the last one known written, and it (sentDelete: a delete), newest first, at most maxSent, by region
	conflicted map[uint32]bool     // regions another writer changed: not written again (conflict)
	stats      Stats
	inflight   int // changes taken from q, not yet written
	lease      clientv3.LeaseID
	wake       chan struct{}

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

const sentDelete = 0

// maxSent bounds the values of one region kept as this store's own
// while their writes' outcomes are unknown (etcd did not answer): any of
// them may be the one etcd holds, and its watch event is this store's.
const maxSent = 16

// own reports whether a value of hash h is one this store sent for a
// region whose sent values are list: no entry stands for a delete (the
// entry of a region deleted is dropped).
func own(list []uint64, h uint64) bool {
	return slices.Contains(list, h) || (len(list) == 0 && h == sentDelete)
}

var _ ctrlstore.Store = (*Store)(nil)

// Open connects to etcd, reads the region records under the prefix,
// puts the switch's liveness key under a new lease and starts keeping
// it alive, writing and watching. It fails if etcd cannot be reached
// within DialTimeout, or holds more than ctrlstore.MaxRegions region
// keys.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.Endpoints, DialTimeout: cfg.DialTimeout,
		MaxCallRecvMsgSize: maxRecv, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcdstore: %w", err)
	}
	s := &Store{cfg: cfg, cli: cli, log: cfg.Logger, revs: make(map[uint32]int64), sent: make(map[uint32][]uint64),
		conflicted: make(map[uint32]bool), wake: make(chan struct{}, 1)}
	s.q.init(2 * ctrlstore.MaxRegions)
	if err := s.load(ctx); err != nil {
		cli.Close()
		return nil, err
	}
	if err := s.grantLease(ctx); err != nil {
		cli.Close()
		return nil, err
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(3)
	go s.writer()
	go s.keepAlive()
	go s.watch()
	return s, nil
}

// regionKey is region id's key.
func (s *Store) regionKey(id uint32) string { return fmt.Sprintf("%sregion/%010d", s.cfg.Prefix, id) }

// regionID parses a region key; ok is false for any other key.
func (s *Store) regionID(key []byte) (uint32, bool) {
	rest, ok := strings.CutPrefix(string(key), s.cfg.Prefix+"region/")
	if !ok || len(rest) != 10 {
		return 0, false
	}
	id, err := strconv.ParseUint(rest, 10, 32)
	return uint32(id), err == nil && id != 0
}

// LivenessKey is the key the switch's lease holds.
func (s *Store) LivenessKey() string { return s.cfg.Prefix + "switch/" + s.cfg.Name }

// load reads every region record: the key list first (bounded), then
// each value at the same revision.
func (s *Store) load(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.DialTimeout)
	defer cancel()
	pfx := s.cfg.Prefix + "region/"
	keys, err := s.cli.Get(cctx, pfx, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(ctrlstore.MaxRegions+1))
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("etcdstore: etcd at %s did not answer within %v", strings.Join(s.cfg.Endpoints, ","), s.cfg.DialTimeout)
	} else if err != nil {
		return fmt.Errorf("etcdstore: reading %s from etcd at %s: %w", pfx, strings.Join(s.cfg.Endpoints, ","), err)
	}
	if len(keys.Kvs) > ctrlstore.MaxRegions {
		return fmt.Errorf("etcdstore: more than %d region records under %s: more than a switch holds", ctrlstore.MaxRegions, pfx)
	}
	s.loadRev = keys.Header.Revision
	for _, kv := range keys.Kvs {
		gctx, cancel := context.WithTimeout(ctx, s.cfg.DialTimeout)
		got, err := s.cli.Get(gctx, string(kv.Key), clientv3.WithRev(s.loadRev))
		cancel()
		if err != nil {
			return fmt.Errorf("etcdstore: reading %s: %w", kv.Key, err)
		}
		if len(got.Kvs) != 1 {
			continue
		}
		kv := got.Kvs[0]
		rec, id, err := s.decode(kv.Key, kv.Value)
		if id != 0 {
			s.revs[id] = kv.ModRevision
		}
		if err != nil {
			s.stats.Refused++
			s.log.Error("etcdstore: region record refused; the memory nodes' reports rebuild the region", "key", string(kv.Key), "err", err)
			continue
		}
		s.regions = append(s.regions, rec)
	}
	return nil
}

// decode decodes the record at key; id is the region the key names (0:
// none).
func (s *Store) decode(key, val []byte) (*ctrlstore.Record, uint32, error) {
	id, ok := s.regionID(key)
	if !ok {
		return nil, 0, fmt.Errorf("%w: key %q names no region", ctrlstore.ErrRecord, key)
	}
	rec, err := ctrlstore.ParseRecord(val)
	if err != nil {
		return nil, id, err
	}
	if rec.Region != id {
		return nil, id, fmt.Errorf("%w: key %q holds region %d's record", ctrlstore.ErrRecord, key, rec.Region)
	}
	return rec, id, nil
}

// Regions returns the records Open read, by region id.
func (s *Store) Regions() []*ctrlstore.Record { return s.regions }

// Put queues r's record; it never blocks.
func (s *Store) Put(r *ctrlstore.Record) { s.enqueue(r.Region, ctrlstore.AppendRecord(nil, r)) }

// Delete queues the deletion of region id's record; it never blocks.
func (s *Store) Delete(id uint32) { s.enqueue(id, nil) }

func (s *Store) enqueue(id uint32, val []byte) {
	s.mu.Lock()
	ok := s.q.push(id, val)
	if !ok {
		s.stats.Dropped++
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Backlog = s.q.len() + s.inflight
	return st
}

// Close writes what is queued (waiting at most DialTimeout for etcd),
// stops the store, revokes the lease (the liveness key goes at once)
// and closes the connection. The Store must not be used afterwards.
func (s *Store) Close() error {
	deadline := time.Now().Add(s.cfg.DialTimeout)
	for s.Stats().Backlog > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	s.cancel()
	s.wg.Wait()
	s.mu.Lock()
	lease := s.lease
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.DialTimeout)
	defer cancel()
	_, rerr := s.cli.Revoke(ctx, lease)
	return errors.Join(rerr, s.cli.Close())
}

// hash is the hash the watch tells this store's own values by.
func hash(val []byte) uint64 {
	if val == nil {
		return sentDelete
	}
	h := fnv.New64a()
	h.Write(val)
	return h.Sum64() | 1
}
