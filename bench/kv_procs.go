package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/redis/go-redis/v9"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/kv"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/transport"
)

// kvOwners and kvNodes are the owner and memory node processes of the
// benchmark's key space; kvShards its shards.
const (
	kvOwners = 2
	kvNodes  = 2
	kvShards = 16
	kvSpace  = "bench"
)

// kvFabric is NDMA's store as processes on loopback: a switch, memory
// nodes, a key space with its owners, and this process's client.
type kvFabric struct {
	g         *procGroup
	cfg       *KVConfig
	sw        string
	tokenFile string
	ep        *endpoint.Endpoint
	native    *kvNativeStore
	loaded    bool
	respStore *redisStore
	mcStore   *memcachedStore
	// The front end's (ndma kv serve) addresses, once started.
	redisAddr, mcAddr string
}

// kvLayout sizes the key space for cfg: buckets for twice the records,
// and heap for every record twice over (a value's new copy is written
// before the old one is freed) in its size class.
func kvLayout(cfg *KVConfig) (buckets int, page, heap uint64) {
	perShard := (cfg.Records + kvShards - 1) / kvShards
	buckets = 64
	for buckets < 2*perShard {
		buckets *= 2
	}
	class := uint64(64)
	for class < uint64(32+len(kvKey(0))+cfg.ValueSize) {
		class *= 2
	}
	page = max(class, 64<<10)
	heap = (uint64(2*perShard+cfg.Clients)*class + 2*page + page - 1) / page * page
	return buckets, page, heap
}

func startKVFabric(ctx context.Context, cfg *KVConfig, token []byte) (_ *kvFabric, err error) {
	g, err := newProcGroup("ndma-bench-kv")
	if err != nil {
		return nil, err
	}
	f := &kvFabric{g: g, cfg: cfg}
	defer func() {
		if err != nil {
			f.close()
		}
	}()
	buckets, page, heap := kvLayout(cfg)
	size := uint64(kvShards)*(heap+uint64(buckets)*kv.BucketBytes)/kvNodes + 8<<20
	fp, err := startFabric(ctx, g, cfg.Binary, cfg.MTU, kvNodes, size, token)
	if err != nil {
		return nil, err
	}
	f.sw, f.tokenFile = fp.sw, fp.tokenFile
	fabArgs, mtu := fp.args(), strconv.Itoa(cfg.MTU)
	fo := endpoint.FabricOptions{Token: token}
	spaceFile := filepath.Join(g.dir, "bench.space")
	if err := g.run(ctx, "kv create", cfg.Binary, append([]string{"kv", "create", "--space", kvSpace, "--out", spaceFile,
		"--owners", strconv.Itoa(kvOwners), "--shards", strconv.Itoa(kvShards), "--buckets", strconv.Itoa(buckets),
		"--page", strconv.FormatUint(page, 10), "--heap", strconv.FormatUint(heap, 10)}, fabArgs...)...); err != nil {
		return nil, err
	}
	for r := range kvOwners {
		if err := g.start(fmt.Sprintf("kvd%d", r), cfg.Binary, append([]string{"kvd", "--space-file", spaceFile,
			"--rank", strconv.Itoa(r), "--mtu", mtu}, fabArgs...)...); err != nil {
			return nil, err
		}
	}
	if f.ep, err = endpoint.Listen("127.0.0.1:0", endpoint.Config{Transport: transport.Config{MTU: cfg.MTU}}, endpoint.Options{}); err != nil {
		return nil, err
	}
	pc, err := pool.New(f.ep, f.sw, pool.Options{Fabric: fo})
	if err != nil {
		return nil, err
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := kv.Open(octx, f.ep, pc, kv.ClientConfig{Switch: f.sw, Fabric: fo, Space: kvSpace, OneSidedFrom: cfg.OneSidedFrom})
	if err != nil {
		return nil, fmt.Errorf("bench: opening the key space (logs in %s): %w", g.dir, err)
	}
	f.native = &kvNativeStore{c: c, f: f}
	return f, nil
}

// frontEnd starts the key space's front end (ndma kv serve) once, with
// both of its protocols, and returns their addresses.
func (f *kvFabric) frontEnd() (redisAddr, mcAddr string, err error) {
	if f.redisAddr != "" {
		return f.redisAddr, f.mcAddr, nil
	}
	if redisAddr, err = freeTCPAddr(); err != nil {
		return "", "", err
	}
	if mcAddr, err = freeTCPAddr(); err != nil {
		return "", "", err
	}
	if err := f.g.start("kv-serve", f.cfg.Binary, "kv", "serve", "--space", kvSpace, "--redis", redisAddr, "--memcached", mcAddr,
		"--switch", f.sw, "--insecure", "--token-file", f.tokenFile, "--one-sided-from", strconv.Itoa(f.cfg.OneSidedFrom)); err != nil {
		return "", "", err
	}
	f.redisAddr, f.mcAddr = redisAddr, mcAddr
	return redisAddr, mcAddr, nil
}

// resp returns a Redis client of the key space's front end.
func (f *kvFabric) resp(ctx context.Context) (kvStore, error) {
	if f.respStore != nil {
		return f.respStore, nil
	}
	addr, _, err := f.frontEnd()
	if err != nil {
		return nil, err
	}
	s, err := newRedisStore(ctx, addr, f.cfg.Clients, f.g.dir)
	if err != nil {
		return nil, err
	}
	s.loaded = f.loaded
	f.respStore = s
	return s, nil
}

// memc returns a memcached client of the key space's front end.
func (f *kvFabric) memc(ctx context.Context) (kvStore, error) {
	if f.mcStore != nil {
		return f.mcStore, nil
	}
	_, addr, err := f.frontEnd()
	if err != nil {
		return nil, err
	}
	s, err := newMemcachedStore(ctx, addr, f.cfg.Clients, f.g.dir)
	if err != nil {
		return nil, err
	}
	s.loaded = f.loaded
	f.mcStore = s
	return s, nil
}

func (f *kvFabric) close() {
	if f.respStore != nil {
		f.respStore.rc.Close()
	}
	if f.mcStore != nil {
		f.mcStore.mc.Close()
	}
	if f.ep != nil {
		f.ep.Close()
	}
	f.g.stop()
}

// kvNativeStore is the Go client.
type kvNativeStore struct {
	c *kv.Client
	f *kvFabric
}

func (s *kvNativeStore) get(ctx context.Context, key []byte) ([]byte, error) {
	v, _, err := s.c.Get(ctx, key)
	return v, err
}

func (s *kvNativeStore) set(ctx context.Context, key, val []byte) error {
	_, err := s.c.Set(ctx, key, val)
	return err
}

func (s *kvNativeStore) load(ctx context.Context, keys, vals [][]byte) error {
	if s.f.loaded {
		return nil // one key space for both of NDMA's targets
	}
	_, errs, err := s.c.SetMulti(ctx, keys, vals, kv.SetOptions{})
	if err == nil {
		err = errors.Join(errs...)
	}
	s.f.loaded = err == nil
	return err
}

// redisStore is a store spoken to through go-redis: redis-server, or
// NDMA's Redis front end.
type redisStore struct {
	rc     *redis.Client
	g      *procGroup // redis-server's, when this store started it
	loaded bool
}

func newRedisStore(ctx context.Context, addr string, clients int, logs string) (*redisStore, error) {
	rc := redis.NewClient(&redis.Options{Addr: addr, PoolSize: clients, MaxRetries: -1, Protocol: 2})
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := rc.Ping(ctx).Err()
		if err == nil {
			return &redisStore{rc: rc}, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			rc.Close()
			return nil, fmt.Errorf("bench: no Redis server answers at %s (logs in %s): %w", addr, logs, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *redisStore) get(ctx context.Context, key []byte) ([]byte, error) {
	return s.rc.Get(ctx, string(key)).Bytes()
}

func (s *redisStore) set(ctx context.Context, key, val []byte) error {
	return s.rc.Set(ctx, string(key), val, 0).Err()
}

func (s *redisStore) load(ctx context.Context, keys, vals [][]byte) error {
	if s.loaded {
		return nil
	}
	const batch = 256
	for i := 0; i < len(keys); i += batch {
		args := make([]any, 0, 2*batch)
		for j := i; j < min(i+batch, len(keys)); j++ {
			args = append(args, keys[j], vals[j])
		}
		if err := s.rc.MSet(ctx, args...).Err(); err != nil {
			return err
		}
	}
	s.loaded = true
	return nil
}

func (s *redisStore) close() {
	s.rc.Close()
	if s.g != nil {
		s.g.stop()
	}
}

// startRedis starts redis-server on loopback without persistence.
func startRedis(ctx context.Context, cfg *KVConfig) (*redisStore, error) {
	g, addr, err := startRedisServer(cfg.RedisServer, KVRedis)
	if err != nil {
		return nil, err
	}
	s, err := newRedisStore(ctx, addr, cfg.Clients, g.dir)
	if err != nil {
		g.stop()
		return nil, err
	}
	s.g = g
	return s, nil
}

// startRedisServer starts bin, a redis-server, on a free loopback port
// without persistence, and returns its process and address; target
// names the benchmark's target in the error when bin is missing.
func startRedisServer(bin, target string) (*procGroup, string, error) {
	g, err := newProcGroup("ndma-bench-redis")
	if err != nil {
		return nil, "", err
	}
	addr, err := freeTCPAddr()
	if err != nil {
		g.stop()
		return nil, "", err
	}
	_, port, _ := net.SplitHostPort(addr)
	if err := g.start("redis-server", bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"); err != nil {
		g.stop()
		return nil, "", fmt.Errorf("%w (install Debian's redis-server package, or leave %s out of the targets)", err, target)
	}
	return g, addr, nil
}

// freeTCPAddr returns a TCP address on 127.0.0.1 that was free a moment
// ago.
func freeTCPAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// memcachedStore is a store spoken to through gomemcache: memcached, or
// NDMA's memcached front end.
type memcachedStore struct {
	mc     *memcache.Client
	g      *procGroup // memcached's, when this store started it
	loaded bool
}

func newMemcachedStore(ctx context.Context, addr string, clients int, logs string) (*memcachedStore, error) {
	mc := memcache.New(addr)
	mc.MaxIdleConns = clients
	mc.Timeout = 5 * time.Second
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := mc.Ping()
		if err == nil {
			return &memcachedStore{mc: mc}, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			mc.Close()
			return nil, fmt.Errorf("bench: no memcached server answers at %s (logs in %s): %w", addr, logs, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// get and set take no context: the client bounds each call by its
// Timeout.
func (s *memcachedStore) get(_ context.Context, key []byte) ([]byte, error) {
	it, err := s.mc.Get(string(key))
	if err != nil {
		return nil, err
	}
	return it.Value, nil
}

func (s *memcachedStore) set(_ context.Context, key, val []byte) error {
	return s.mc.Set(&memcache.Item{Key: string(key), Value: val})
}

func (s *memcachedStore) load(ctx context.Context, keys, vals [][]byte) error {
	if s.loaded {
		return nil
	}
	for i := range keys {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s.set(ctx, keys[i], vals[i]); err != nil {
			return fmt.Errorf("key %s: %w", keys[i], err)
		}
	}
	s.loaded = true
	return nil
}

// startMemcached starts cfg.Memcached on a free loopback port (TCP only,
// memory for every record twice over) and returns a client of it.
func startMemcached(ctx context.Context, cfg *KVConfig) (*memcachedStore, error) {
	g, err := newProcGroup("ndma-bench-memcached")
	if err != nil {
		return nil, err
	}
	addr, err := freeTCPAddr()
	if err != nil {
		g.stop()
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	mb := max(64, 2*cfg.Records*(cfg.ValueSize+128)>>20+16)
	args := []string{"-p", port, "-l", "127.0.0.1", "-U", "0", "-m", strconv.Itoa(mb)}
	if os.Geteuid() == 0 {
		args = append(args, "-u", "root") // it refuses root without being told
	}
	if err := g.start("memcached", cfg.Memcached, args...); err != nil {
		g.stop()
		return nil, fmt.Errorf("%w (install Debian's memcached package, or leave %s out of the targets)", err, KVMemcached)
	}
	s, err := newMemcachedStore(ctx, addr, cfg.Clients, g.dir)
	if err != nil {
		g.stop()
		return nil, err
	}
	s.g = g
	return s, nil
}
