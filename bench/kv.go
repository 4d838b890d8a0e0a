package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/testbed"
	"github.com/ndma/ndma/testbed/fidelity"
)

// The targets of the key-value benchmark.
const (
	// KVNative is NDMA's key-value store through its Go client: GETs
	// read the memory nodes one-sidedly, SETs go to the owners.
	KVNative = "ndma"
	// KVResp is NDMA's key-value store through its Redis front end
	// (ndma kv serve), driven by the same Redis client as KVRedis.
	KVResp = "ndma-resp"
	// KVRedis is redis-server, persistence off.
	KVRedis = "redis"
	// KVMemc is NDMA's key-value store through its memcached front end
	// (ndma kv serve), driven by the same memcached client as
	// KVMemcached.
	KVMemc = "ndma-mc"
	// KVMemcached is memcached.
	KVMemcached = "memcached"
)

// KVTargets are the targets RunKV knows, in its default order.
var KVTargets = []string{KVNative, KVResp, KVMemc, KVRedis, KVMemcached}

// KVConfig configures RunKV. Zero values select the defaults.
type KVConfig struct {
	// Binary is the ndma binary: the switch, the memory nodes, the
	// owners and the Redis front end run as its processes on loopback,
	// as deployed (required).
	Binary string
	// RedisServer is the redis-server binary (empty: "redis-server"
	// from PATH); needed for KVRedis only.
	RedisServer string
	// Memcached is the memcached binary (empty: "memcached" from PATH);
	// needed for KVMemcached only.
	Memcached string
	// Targets are the stores measured, in order (empty: KVTargets).
	Targets []string
	// Records is the keys loaded before the run (zero: 10000).
	Records int
	// ValueSize is each value's bytes (zero: 100).
	ValueSize int
	// ReadRatio is the share of GETs, the rest SETs of loaded keys
	// (YCSB's workloads B and C are 0.95 and 1; zero: 0.95; negative: 0,
	// SETs only).
	ReadRatio float64
	// Zipf is the exponent of the keys' Zipf distribution (above 1;
	// zero: 1.1; negative: uniform).
	Zipf float64
	// Clients is the requests in flight at once (zero: 16).
	Clients int
	// Duration is each target's measured time, after a warm-up of a
	// fifth of it (zero: 5 s).
	Duration time.Duration
	// Seed draws the keys and operations (zero: 1).
	Seed int64
	// MTU of NDMA's processes (zero: 9000).
	MTU int
	// OneSidedFrom is NDMA's clients' kv.ClientConfig.OneSidedFrom (its
	// own and the Redis front end's: zero, the default; negative: every
	// value inline).
	OneSidedFrom int
	// Testbed, when set, runs the benchmark across a running testbed's
	// hosts instead of on loopback (see RunKV): the servers in its first
	// host, Clients clients in each of ClientHosts more (zero: every
	// other host). Fidelity is the rule its runs are judged by (zero:
	// the defaults).
	Testbed     *testbed.State `json:"-"`
	ClientHosts int            `json:"-"`
	Fidelity    fidelity.Rule  `json:"-"`
}

func (c *KVConfig) setDefaults() {
	if len(c.Targets) == 0 {
		c.Targets = KVTargets
		if c.Testbed != nil {
			c.Targets = kvTestbedTargets
		}
	}
	if c.Testbed != nil && c.ClientHosts == 0 {
		c.ClientHosts = max(1, len(c.Testbed.Hosts)-1)
	}
	if c.RedisServer == "" {
		c.RedisServer = "redis-server"
	}
	if c.Memcached == "" {
		c.Memcached = "memcached"
	}
	if c.Records == 0 {
		c.Records = 10000
	}
	if c.ValueSize == 0 {
		c.ValueSize = 100
	}
	switch {
	case c.ReadRatio == 0:
		c.ReadRatio = 0.95
	case c.ReadRatio < 0:
		c.ReadRatio = 0
	}
	if c.Zipf == 0 {
		c.Zipf = 1.1
	}
	if c.Clients == 0 {
		c.Clients = 16
	}
	if c.Duration == 0 {
		c.Duration = 5 * time.Second
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.MTU == 0 {
		c.MTU = 9000
	}
}

func (c *KVConfig) validate() error {
	for _, t := range c.Targets {
		if !slices.Contains(KVTargets, t) {
			return fmt.Errorf("%w: target %q (want one of %s)", ErrBadValue, t, strings.Join(KVTargets, ", "))
		}
		if c.Testbed != nil && !slices.Contains(kvTestbedTargets, t) {
			return fmt.Errorf("%w: target %s runs on loopback only (a testbed run measures %s)", ErrBadValue, t, strings.Join(kvTestbedTargets, ", "))
		}
	}
	if c.Testbed != nil && (c.ClientHosts < 1 || c.ClientHosts > 255) {
		return fmt.Errorf("%w: %d client hosts (want 1 or more)", ErrBadValue, c.ClientHosts)
	}
	switch {
	case c.Binary == "":
		return fmt.Errorf("%w: no ndma binary to run the store's processes", ErrBadValue)
	case c.Records < 1 || c.Records > 10_000_000:
		return fmt.Errorf("%w: %d records (want 1 to 10,000,000)", ErrBadValue, c.Records)
	case c.ValueSize < 1 || c.ValueSize > 60<<10:
		return fmt.Errorf("%w: values of %d bytes (want 1 B to 60 KiB)", ErrBadValue, c.ValueSize)
	case c.ReadRatio > 1:
		return fmt.Errorf("%w: read ratio %g (want 0 to 1)", ErrBadValue, c.ReadRatio)
	case c.Zipf > 0 && c.Zipf <= 1:
		return fmt.Errorf("%w: Zipf exponent %g (want above 1, or negative for uniform keys)", ErrBadValue, c.Zipf)
	case c.Clients < 1 || c.Clients > 1024:
		return fmt.Errorf("%w: %d clients (want 1 to 1024)", ErrBadValue, c.Clients)
	case c.Duration < 100*time.Millisecond:
		return fmt.Errorf("%w: duration %v (want at least 100ms)", ErrBadValue, c.Duration)
	}
	return nil
}

// KVResult is one target's row.
type KVResult struct {
	Target    string  `json:"target"`
	Records   int     `json:"records"`
	ValueSize int     `json:"value_size"`
	ReadRatio float64 `json:"read_ratio"`
	Clients   int     `json:"clients"`
	// Ops is the operations completed in the measured time, OpsPerSec
	// their rate.
	Ops       int     `json:"ops"`
	OpsPerSec float64 `json:"ops_per_s"`
	// GET and SET latencies, in microseconds (zero: no such operation).
	GetP50 float64 `json:"get_p50_us"`
	GetP99 float64 `json:"get_p99_us"`
	SetP50 float64 `json:"set_p50_us"`
	SetP99 float64 `json:"set_p99_us"`
	// ClientCPU is this process's CPU time per operation (the client
	// library's), ServerCPU the store's processes' summed, in
	// microseconds; Processes each of them.
	ClientCPU float64            `json:"client_cpu_us_per_op"`
	ServerCPU float64            `json:"server_cpu_us_per_op"`
	Processes map[string]float64 `json:"server_cpu_us_per_op_each"`
	// Errors counts failed operations; Wrong values that did not match
	// the key read (a value always names its key).
	Errors int `json:"errors"`
	Wrong  int `json:"wrong"`
	// Testbed runs only: Hosts is the testbed's host count, ClientHosts
	// those running clients (Clients is then their clients together),
	// RateBits its links' rate in bits per second, Fidelity the
	// monitor's verdict over the measured time. ClientCPU is then the
	// client hosts' processes', summed.
	Hosts       int               `json:"hosts,omitempty"`
	ClientHosts int               `json:"client_hosts,omitempty"`
	RateBits    uint64            `json:"rate_bits,omitempty"`
	Fidelity    *fidelity.Verdict `json:"fidelity,omitempty"`
}

// kvStore is a target as the load generator sees it.
type kvStore interface {
	get(ctx context.Context, key []byte) ([]byte, error)
	set(ctx context.Context, key, val []byte) error
	load(ctx context.Context, keys, vals [][]byte) error
}

// RunKV loads each target with Records keys and measures a mix of GETs
// and SETs from Clients concurrent clients; every row carries the CPU
// time per operation of the client and of each of the store's
// processes. Everything runs on this host's loopback: throughput and
// latency are those of this machine's CPUs, and CPU per operation is
// the figure to compare across stores.
//
// With cfg.Testbed the run crosses the testbed's links instead: the
// servers run in its first host (redis-server, memcached; NDMA's key
// space is created from there and its owners, kvd, run there, on the
// testbed's switch and memory nodes, sealed under credentials of the
// space's scope issued for the run), and each of ClientHosts more hosts
// runs Clients clients in a process of its own (`ndma bench kv-agent`);
// the first of them loads the records. Each row then holds the fidelity
// monitor's verdict over the measured time.
func RunKV(ctx context.Context, cfg KVConfig, emit func(KVResult) error) error {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	if cfg.Testbed != nil {
		for _, target := range cfg.Targets {
			res, err := runKVTestbed(ctx, &cfg, target)
			if err != nil {
				return fmt.Errorf("bench: %s: %w", target, err)
			}
			if err := emit(res); err != nil {
				return err
			}
		}
		return nil
	}
	var fab *kvFabric
	defer func() {
		if fab != nil {
			fab.close()
		}
	}()
	for _, target := range cfg.Targets {
		var st kvStore
		var procs *procGroup
		switch target {
		case KVNative, KVResp, KVMemc:
			if fab == nil {
				var err error
				if fab, err = startKVFabric(ctx, &cfg, secure.NewToken()); err != nil {
					return err
				}
			}
			procs = fab.g
			var err error
			switch target {
			case KVNative:
				st = fab.native
			case KVResp:
				st, err = fab.resp(ctx)
			default:
				st, err = fab.memc(ctx)
			}
			if err != nil {
				return err
			}
		case KVRedis:
			r, err := startRedis(ctx, &cfg)
			if err != nil {
				return err
			}
			defer r.close()
			st, procs = r, r.g
		case KVMemcached:
			m, err := startMemcached(ctx, &cfg)
			if err != nil {
				return err
			}
			defer func() { m.mc.Close(); m.g.stop() }()
			st, procs = m, m.g
		}
		res, err := runKVLoad(ctx, &cfg, target, st, procs)
		if err != nil {
			return fmt.Errorf("bench: %s: %w", target, err)
		}
		if err := emit(res); err != nil {
			return err
		}
	}
	return nil
}

// kvKey is record i's key; kvValue a value of size bytes naming its key
// and a version, so a reader can tell a value of another key.
func kvKey(i int) []byte { return fmt.Appendf(nil, "user%010d", i) }

func kvValue(key []byte, ver uint64, size int) []byte {
	v := fmt.Appendf(make([]byte, 0, size), "%s@%d|", key, ver)
	for len(v) < size {
		v = append(v, 'x')
	}
	return v[:size]
}

// valueOf reports whether v is a value kvValue made for key (or a
// prefix of one, when values are shorter than their header).
func valueOf(v, key []byte) bool {
	want := append(slices.Clip(key), '@')
	n := min(len(v), len(want))
	return n > 0 && string(v[:n]) == string(want[:n])
}

// runKVLoad loads st and runs the measured mix.
func runKVLoad(ctx context.Context, cfg *KVConfig, target string, st kvStore, procs *procGroup) (KVResult, error) {
	keys, lkeys, lvals := kvKeys(cfg)
	lctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err := st.load(lctx, lkeys, lvals)
	cancel()
	if err != nil {
		return KVResult{}, fmt.Errorf("loading %d records: %w", cfg.Records, err)
	}
	warm := cfg.Duration / 5
	start := time.Now()
	measureFrom, end := start.Add(warm), start.Add(warm+cfg.Duration)
	var (
		cpuStart = make(chan struct{})
		cpu0     map[string]time.Duration
		self0    time.Duration
	)
	go func() {
		time.Sleep(time.Until(measureFrom))
		cpu0, self0 = procs.cpu(), rusageCPU()
		close(cpuStart)
	}()
	samples := kvMix(ctx, cfg, st, keys, 0, measureFrom, end)
	<-cpuStart
	cpu1, self1 := procs.cpu(), rusageCPU()
	elapsed := time.Since(measureFrom)
	res := KVResult{Target: target, Records: cfg.Records, ValueSize: cfg.ValueSize, ReadRatio: cfg.ReadRatio, Clients: cfg.Clients,
		Processes: map[string]float64{}}
	var gets, sets []time.Duration
	for _, s := range samples {
		gets, sets = append(gets, s.gets...), append(sets, s.sets...)
		res.Errors += s.errs
		res.Wrong += s.wrong
	}
	res.Ops = len(gets) + len(sets)
	if res.Ops == 0 {
		return res, errors.New("no operation completed in the measured time")
	}
	res.OpsPerSec = float64(res.Ops) / elapsed.Seconds()
	res.GetP50, res.GetP99 = pctUS(gets, 50), pctUS(gets, 99)
	res.SetP50, res.SetP99 = pctUS(sets, 50), pctUS(sets, 99)
	perOp := func(d time.Duration) float64 { return round(us(d)/float64(res.Ops), 4) }
	res.ClientCPU = perOp(self1 - self0)
	var server time.Duration
	for name, t1 := range cpu1 {
		if t0, ok := cpu0[name]; ok {
			res.Processes[name] = perOp(t1 - t0)
			server += t1 - t0
		}
	}
	res.ServerCPU = perOp(server)
	return res, nil
}

// kvSample is one client's operations in the measured time.
type kvSample struct {
	gets, sets  []time.Duration
	errs, wrong int
}

// kvMix runs cfg.Clients clients on st, client c drawing its keys and
// operations from seed cfg.Seed*1000 + first + c, until end; each
// counts what it starts from measureFrom on.
func kvMix(ctx context.Context, cfg *KVConfig, st kvStore, keys [][]byte, first int, measureFrom, end time.Time) []kvSample {
	samples := make([]kvSample, cfg.Clients)
	var wg sync.WaitGroup
	for c := range cfg.Clients {
		wg.Go(func() {
			s := &samples[c]
			rng := rand.New(rand.NewSource(cfg.Seed*1000 + int64(first+c)))
			var zipf *rand.Zipf
			if cfg.Zipf > 0 {
				zipf = rand.NewZipf(rng, cfg.Zipf, 1, uint64(cfg.Records-1))
			}
			for n := uint64(1); ; n++ {
				now := time.Now()
				if !now.Before(end) || ctx.Err() != nil {
					return
				}
				i := rng.Intn(cfg.Records)
				if zipf != nil {
					i = int(zipf.Uint64())
				}
				read := rng.Float64() < cfg.ReadRatio
				octx, cancel := context.WithTimeout(ctx, 5*time.Second)
				var err error
				if read {
					var v []byte
					if v, err = st.get(octx, keys[i]); err == nil && !valueOf(v, keys[i]) {
						s.wrong++
					}
				} else {
					err = st.set(octx, keys[i], kvValue(keys[i], uint64(first+c)<<40|n, cfg.ValueSize))
				}
				cancel()
				took := time.Since(now)
				if now.Before(measureFrom) {
					continue
				}
				switch {
				case err != nil:
					s.errs++
				case read:
					s.gets = append(s.gets, took)
				default:
					s.sets = append(s.sets, took)
				}
			}
		})
	}
	wg.Wait()
	return samples
}

// kvKeys are the benchmark's records, key i being the i-th most
// popular under Zipf keys, and the order to load them in: a
// permutation drawn from cfg.Seed, as YCSB hashes its insert order, so
// that where a store puts a key does not follow its popularity. (Loaded
// in popularity order, NDMA's key space put every shard's hottest
// values in its heap's first pages, all on the first memory node: with
// Zipf keys on the testbed that node's link carried nearly every GET.)
func kvKeys(cfg *KVConfig) (keys, loadKeys, loadVals [][]byte) {
	keys = make([][]byte, cfg.Records)
	for i := range keys {
		keys[i] = kvKey(i)
	}
	order := rand.New(rand.NewSource(cfg.Seed)).Perm(cfg.Records)
	loadKeys = make([][]byte, cfg.Records)
	loadVals = make([][]byte, cfg.Records)
	for i, k := range order {
		loadKeys[i] = keys[k]
		loadVals[i] = kvValue(keys[k], 0, cfg.ValueSize)
	}
	return keys, loadKeys, loadVals
}

// pctUS is the p-th percentile of ds in microseconds (zero when empty).
func pctUS(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return round(us(ds[min(len(ds)-1, len(ds)*p/100)]), 5)
}
