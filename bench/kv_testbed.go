package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/kv"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/testbed"
	"github.com/ndma/ndma/testbed/fidelity"
	"github.com/ndma/ndma/transport"
)

// kvTestbedTargets are the targets a testbed run measures (the front
// ends run on loopback only).
var kvTestbedTargets = []string{KVNative, KVRedis, KVMemcached}

// Ports of the servers on a testbed's first host.
const (
	kvRedisPort     = 6379
	kvMemcachedPort = 11211
)

// kvAgentSpec is what a testbed run's agent process (RunKVAgent) is
// given, as the first line of its standard input.
type kvAgentSpec struct {
	Target string   `json:"target"`
	Config KVConfig `json:"config"`
	// Index is the agent's client host, from 0: its clients draw from
	// seeds after the earlier hosts'. Load: this agent loads the
	// records before it says it is ready.
	Index int  `json:"index"`
	Load  bool `json:"load,omitempty"`
	// Local is the agent's host address; Addr the server's (Redis,
	// memcached).
	Local string `json:"local"`
	Addr  string `json:"addr,omitempty"`
	// Switch, Token and Credential (a file; empty: unsealed) join NDMA's
	// fabric.
	Switch     string `json:"switch,omitempty"`
	Token      string `json:"token,omitempty"`
	Credential string `json:"credential,omitempty"`
}

// kvAgentMsg is a line an agent writes: ready, or its result.
type kvAgentMsg struct {
	Ready bool `json:"ready,omitempty"`
	Done  bool `json:"done,omitempty"`
	// The result: GET and SET latencies, failed operations, values of
	// another key, and the agent's CPU time over the measured time.
	Gets  map[int]uint64 `json:"gets,omitempty"`
	Sets  map[int]uint64 `json:"sets,omitempty"`
	Errs  int            `json:"errors,omitempty"`
	Wrong int            `json:"wrong,omitempty"`
	CPUS  float64        `json:"cpu_s,omitempty"`
}

func (m kvAgentMsg) final() bool { return m.Ready || m.Done }

// RunKVAgent is one client host's process of a testbed run of the
// key-value benchmark (`ndma bench kv-agent`, started by RunKV in a host
// namespace): it reads its spec from the first line of in, reaches the
// store (loading the records if the spec says so), says it is ready,
// and on a line "go FROM END" (unix ns) runs the spec's clients until
// END, measuring from FROM; then it reports and ends when in ends.
func RunKVAgent(ctx context.Context, in io.Reader, out io.Writer) error {
	lines := bufio.NewScanner(in)
	if !lines.Scan() {
		return errors.New("bench: kv agent: no spec on standard input")
	}
	var sp kvAgentSpec
	if err := json.Unmarshal(lines.Bytes(), &sp); err != nil {
		return fmt.Errorf("bench: kv agent: spec: %w", err)
	}
	cfg := &sp.Config
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("bench: kv agent: %w", err)
	}
	st, closeStore, err := sp.attach(ctx)
	if err != nil {
		return fmt.Errorf("bench: kv agent: %s: %w", sp.Target, err)
	}
	defer closeStore()
	keys, lkeys, lvals := kvKeys(cfg)
	if sp.Load {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := st.load(lctx, lkeys, lvals)
		cancel()
		if err != nil {
			return fmt.Errorf("bench: kv agent: loading %d records: %w", cfg.Records, err)
		}
	}
	enc := json.NewEncoder(out)
	if err := enc.Encode(kvAgentMsg{Ready: true}); err != nil {
		return err
	}
	if !lines.Scan() {
		return fmt.Errorf("bench: kv agent: no line \"go FROM END\" (%v)", lines.Err())
	}
	var from, end int64
	if n, err := fmt.Sscanf(lines.Text(), "go %d %d", &from, &end); n != 2 || err != nil || end <= from {
		return fmt.Errorf("bench: kv agent: want a line \"go FROM END\", got %q", lines.Text())
	}
	measureFrom, until := time.Unix(0, from), time.Unix(0, end)
	var cpu0 time.Duration
	var cpuWG sync.WaitGroup
	cpuWG.Go(func() {
		time.Sleep(time.Until(measureFrom))
		cpu0 = rusageCPU()
	})
	samples := kvMix(ctx, cfg, st, keys, sp.Index*cfg.Clients, measureFrom, until)
	cpuWG.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	res := kvAgentMsg{Done: true, CPUS: (rusageCPU() - cpu0).Seconds()}
	var gets, sets latHist
	for _, s := range samples {
		for _, d := range s.gets {
			gets.add(d)
		}
		for _, d := range s.sets {
			sets.add(d)
		}
		res.Errs += s.errs
		res.Wrong += s.wrong
	}
	res.Gets, res.Sets = gets.sparse(), sets.sparse()
	if err := enc.Encode(res); err != nil {
		return err
	}
	for lines.Scan() {
	}
	return nil
}

// attach returns a client of the spec's store and what closes it.
func (sp *kvAgentSpec) attach(ctx context.Context) (kvStore, func(), error) {
	cfg := &sp.Config
	switch sp.Target {
	case KVRedis:
		s, err := newRedisStore(ctx, sp.Addr, cfg.Clients, "the testbed's first host")
		if err != nil {
			return nil, nil, err
		}
		return s, s.close, nil
	case KVMemcached:
		s, err := newMemcachedStore(ctx, sp.Addr, cfg.Clients, "the testbed's first host")
		if err != nil {
			return nil, nil, err
		}
		return s, func() { s.mc.Close() }, nil
	case KVNative:
	default:
		return nil, nil, fmt.Errorf("target %q", sp.Target)
	}
	opts, err := agentSecurity(sp.Credential)
	if err != nil {
		return nil, nil, err
	}
	ep, err := endpoint.Listen(sp.Local, endpoint.Config{Transport: transport.Config{MTU: cfg.MTU}}, opts)
	if err != nil {
		return nil, nil, err
	}
	fo := endpoint.FabricOptions{Token: []byte(sp.Token), Insecure: sp.Token == ""}
	pc, err := pool.New(ep, sp.Switch, pool.Options{Fabric: fo})
	if err != nil {
		ep.Close()
		return nil, nil, err
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := kv.Open(octx, ep, pc, kv.ClientConfig{Switch: sp.Switch, Fabric: fo, Space: kvSpace, OneSidedFrom: cfg.OneSidedFrom})
	if err != nil {
		ep.Close()
		return nil, nil, fmt.Errorf("opening the key space: %w", err)
	}
	return &kvNativeStore{c: c, f: &kvFabric{}}, func() { ep.Close() }, nil
}

// runKVTestbed runs one target across cfg.Testbed (see RunKV) and makes
// its row.
func runKVTestbed(ctx context.Context, cfg *KVConfig, target string) (res KVResult, err error) {
	st := cfg.Testbed
	hosts := cfg.ClientHosts
	switch {
	case len(st.Hosts) < 1+hosts:
		return res, fmt.Errorf("%w: %d client hosts need %d hosts (the servers' and one each); the testbed has %d", ErrBadValue, hosts, 1+hosts, len(st.Hosts))
	case target == KVNative && len(st.MemNodes) == 0:
		return res, fmt.Errorf("%w: NDMA's store keeps its key space in the pool: bring the testbed up with memory nodes (--memnodes)", ErrBadValue)
	case len(st.Leaves) > 0:
		return res, fmt.Errorf("%w: a testbed with leaf switches (the store's owners are a service at one switch)", ErrBadValue)
	}
	dir, err := os.MkdirTemp("", "ndma-bench-kv-testbed")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	fidTarget, err := fidelity.TargetOf(st)
	if err != nil {
		return res, err
	}
	h0 := st.Hosts[0]
	servers, err := newProcGroup("ndma-bench-kv-servers")
	if err != nil {
		return res, err
	}
	defer servers.stop()
	inNS := func(bin string, args ...string) []string {
		return append([]string{"netns", "exec", h0.NS, bin}, args...)
	}
	spec := kvAgentSpec{Target: target, Config: *cfg, Switch: st.SwitchAddr, Token: st.Token}
	spec.Config.MTU = st.DatagramMTU
	// credential issues a member credential of the key space's scope,
	// unless the testbed runs without credentials (then: --insecure).
	credential := func(name string) ([]string, string, error) {
		path := filepath.Join(dir, strings.ReplaceAll(name, "/", "-")+".cred")
		ok, err := testbed.IssueCredential(st, secure.RoleMember, name, path)
		if err != nil {
			return nil, "", err
		}
		if !ok {
			return []string{"--insecure"}, "", nil
		}
		return []string{"--credential", path}, path, nil
	}
	switch target {
	case KVRedis:
		spec.Addr = net.JoinHostPort(h0.Addr.String(), strconv.Itoa(kvRedisPort))
		err = servers.start("redis-server", "ip", inNS(cfg.RedisServer, "--port", strconv.Itoa(kvRedisPort), "--bind", h0.Addr.String(),
			"--save", "", "--appendonly", "no", "--protected-mode", "no")...)
	case KVMemcached:
		spec.Addr = net.JoinHostPort(h0.Addr.String(), strconv.Itoa(kvMemcachedPort))
		mb := max(64, 2*cfg.Records*(cfg.ValueSize+128)>>20+16)
		err = servers.start("memcached", "ip", inNS(cfg.Memcached, "-p", strconv.Itoa(kvMemcachedPort), "-l", h0.Addr.String(),
			"-U", "0", "-m", strconv.Itoa(mb), "-u", "root")...)
	case KVNative:
		err = startKVOwners(ctx, cfg, st, servers, inNS, credential, dir)
		// The key space is freed when the run ends, its owners stopped
		// first (servers.stop, deferred above, runs after this).
		defer func() {
			servers.stop()
			if e := dropKVSpace(st, servers, inNS, credential, dir, cfg.Binary); e != nil && err == nil {
				err = e
			}
		}()
	}
	if err != nil {
		return res, err
	}

	var agents []*agentProc[kvAgentMsg]
	defer func() {
		for _, a := range agents {
			if e := a.stop(); e != nil && err == nil {
				err = e
			}
		}
	}()
	for j := range hosts {
		h := st.Hosts[1+j]
		as := spec
		as.Index, as.Load, as.Local = j, j == 0, h.Addr.String()+":0"
		if target == KVNative {
			if _, as.Credential, err = credential(kvSpaceScope + "/client-" + strconv.Itoa(j)); err != nil {
				return res, err
			}
		}
		a, err := startAgent[kvAgentMsg](ctx, st, cfg.Binary, "kv-agent", h.NS, dir, "client"+strconv.Itoa(j), as)
		if err != nil {
			return res, err
		}
		agents = append(agents, a)
		if j == 0 {
			// The first loads the records before the others start.
			if _, err := a.next(ctx, 3*time.Minute, nil); err != nil {
				return res, err
			}
		}
	}
	for _, a := range agents[1:] {
		if _, err := a.next(ctx, agentWait, nil); err != nil {
			return res, err
		}
	}

	mon, err := fidelity.Start(ctx, fidTarget, 0)
	if err != nil {
		return res, err
	}
	monitoring := true
	defer func() {
		if monitoring {
			_, _ = mon.Stop(context.WithoutCancel(ctx))
		}
	}()
	start := time.Now().Add(100 * time.Millisecond) // the go lines' way to every agent
	measureFrom := start.Add(cfg.Duration / 5)
	end := measureFrom.Add(cfg.Duration)
	for _, a := range agents {
		if err := a.send(fmt.Sprintf("go %d %d", measureFrom.UnixNano(), end.UnixNano())); err != nil {
			return res, err
		}
	}
	// The servers' CPU over the measured time: the peer's server, or
	// the owners and the testbed's switch and memory nodes.
	cpu := func() map[string]time.Duration {
		m := servers.cpu()
		if target == KVNative {
			maps.Copy(m, testbedDaemonCPU(st))
		}
		return m
	}
	sleepUntil(ctx, measureFrom)
	cpu0 := cpu()
	sleepUntil(ctx, end)
	cpu1 := cpu()
	results := make([]kvAgentMsg, len(agents))
	for j, a := range agents {
		if results[j], err = a.next(ctx, agentWait, nil); err != nil {
			return res, err
		}
	}
	for _, a := range agents {
		if err := a.stop(); err != nil {
			return res, err
		}
	}
	agents = nil
	servers.stop()
	monitoring = false
	rec, err := mon.Stop(context.WithoutCancel(ctx))
	if err != nil {
		return res, err
	}
	if err := rec.Window(measureFrom.Sub(mon.Started()), end.Sub(mon.Started())); err != nil {
		return res, err
	}
	verdict, err := rec.Judge(cfg.Fidelity)
	if err != nil {
		return res, err
	}
	return kvTestbedRow(cfg, target, st, results, cpu0, cpu1, verdict)
}

// testbedDaemonCPU is the CPU time so far of the testbed's switch and
// memory node daemons, summed by role ("switch", "memd"); a daemon
// whose /proc entry cannot be read is left out.
func testbedDaemonCPU(st *testbed.State) map[string]time.Duration {
	m := make(map[string]time.Duration)
	for _, d := range st.Daemons {
		if d.Role != "switch" && d.Role != "memd" {
			continue
		}
		if self, _, err := procCPU(strconv.Itoa(d.PID)); err == nil {
			m[d.Role] += time.Duration(self * float64(time.Second))
		}
	}
	return m
}

// kvSpaceScope is the scope of the benchmark's key space: its owners'
// and clients' credentials are named in it.
const kvSpaceScope = "kv-" + kvSpace

// startKVOwners creates the key space from the first host and starts
// its owners there, each sealed under a credential of the space's
// scope.
func startKVOwners(ctx context.Context, cfg *KVConfig, st *testbed.State, servers *procGroup, inNS func(string, ...string) []string,
	credential func(string) ([]string, string, error), dir string) error {
	buckets, page, heap := kvLayout(cfg)
	mtu := strconv.Itoa(st.DatagramMTU)
	fab := []string{"--switch", st.SwitchAddr, "--token-file", filepath.Join(st.Dir, "token")}
	cred, _, err := credential(kvSpaceScope + "/create")
	if err != nil {
		return err
	}
	spaceFile := filepath.Join(dir, "bench.space")
	if err := servers.run(ctx, "kv create", "ip", inNS(cfg.Binary, append(append([]string{"kv", "create", "--space", kvSpace,
		"--out", spaceFile, "--owners", strconv.Itoa(kvOwners), "--shards", strconv.Itoa(kvShards), "--buckets", strconv.Itoa(buckets),
		"--page", strconv.FormatUint(page, 10), "--heap", strconv.FormatUint(heap, 10)}, fab...), cred...)...)...); err != nil {
		return err
	}
	for r := range kvOwners {
		cred, _, err := credential(kvSpaceScope + "/" + strconv.Itoa(r))
		if err != nil {
			return err
		}
		if err := servers.start(fmt.Sprintf("kvd%d", r), "ip", inNS(cfg.Binary, append(append([]string{"kvd", "--space-file", spaceFile,
			"--rank", strconv.Itoa(r), "--mtu", mtu}, fab...), cred...)...)...); err != nil {
			return err
		}
	}
	return nil
}

// dropKVSpace frees the run's key space (ndma kv drop from the first
// host), if it was created.
func dropKVSpace(st *testbed.State, servers *procGroup, inNS func(string, ...string) []string,
	credential func(string) ([]string, string, error), dir, bin string) error {
	spaceFile := filepath.Join(dir, "bench.space")
	if _, err := os.Stat(spaceFile); err != nil {
		return nil
	}
	cred, _, err := credential(kvSpaceScope + "/drop")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return servers.run(ctx, "kv drop", "ip", inNS(bin, append([]string{"kv", "drop", "--space-file", spaceFile, "--force",
		"--switch", st.SwitchAddr, "--token-file", filepath.Join(st.Dir, "token")}, cred...)...)...)
}

// kvTestbedRow makes a testbed run's row from the agents' results, the
// servers' CPU over the measured time (cpu0, cpu1) and the monitor's
// verdict.
func kvTestbedRow(cfg *KVConfig, target string, st *testbed.State, results []kvAgentMsg, cpu0, cpu1 map[string]time.Duration,
	verdict fidelity.Verdict) (KVResult, error) {
	res := KVResult{Target: target, Records: cfg.Records, ValueSize: cfg.ValueSize, ReadRatio: cfg.ReadRatio, Clients: cfg.Clients * cfg.ClientHosts,
		Processes: map[string]float64{}, Hosts: len(st.Hosts), ClientHosts: cfg.ClientHosts, RateBits: st.RateBits, Fidelity: &verdict}
	var gets, sets latHist
	var cpu float64
	for _, r := range results {
		if err := errors.Join(gets.fromSparse(r.Gets), sets.fromSparse(r.Sets)); err != nil {
			return res, err
		}
		res.Errors += r.Errs
		res.Wrong += r.Wrong
		cpu += r.CPUS
	}
	res.Ops = int(gets.n + sets.n)
	if res.Ops == 0 {
		return res, errors.New("no operation completed in the measured time")
	}
	res.OpsPerSec = float64(res.Ops) / cfg.Duration.Seconds()
	res.GetP50, res.GetP99 = gets.pctUS(50), gets.pctUS(99)
	res.SetP50, res.SetP99 = sets.pctUS(50), sets.pctUS(99)
	perOp := func(s float64) float64 { return round(s*1e6/float64(res.Ops), 4) }
	res.ClientCPU = perOp(cpu)
	res.ServerCPU = serverCPU(res.Processes, cpu0, cpu1, perOp)
	return res, nil
}
