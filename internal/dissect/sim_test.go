package dissect

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/internal/memtest"
	"github.com/ndma/ndma/internal/simhost"
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// A small fabric on simnet whose every datagram is recorded: a switch,
// memory nodes lending to its pool, endpoints and a standalone memory
// node, all sans-I/O cores in virtual time, deterministic from the seed.

// sent is one recorded datagram.
type sent struct {
	at       time.Time
	src, dst netip.AddrPort
	buf      []byte
}

// tap records what a node sends and passes everything else through.
type tap struct {
	addr netip.AddrPort
	node simnet.Node
	log  *[]sent
}

func (t *tap) Receive(now time.Time, d netio.Datagram) { t.node.Receive(now, d) }

func (t *tap) Poll(now time.Time, out []netio.Datagram) ([]netio.Datagram, time.Time) {
	n := len(out)
	out, next := t.node.Poll(now, out)
	for _, d := range out[n:] {
		*t.log = append(*t.log, sent{at: now, src: t.addr, dst: d.Addr, buf: append([]byte(nil), d.Buf...)})
	}
	return out, next
}

// host is an endpoint Core on simnet (internal/simhost) with completion
// callbacks and an optional periodic action (heartbeats).
type host struct {
	*simhost.Host[*endpoint.Op]
	f        *simFabric
	addr     netip.AddrPort
	core     *endpoint.Core
	tick     simhost.Ticker
	periodic func(now time.Time)
}

func (f *simFabric) hostOf(addr netip.AddrPort, core *endpoint.Core) *host {
	h := &host{f: f, addr: addr, core: core}
	h.Host = &simhost.Host[*endpoint.Op]{Core: core, Repoll: true, // callbacks may have posted more
		Before: func(now time.Time) {
			if h.periodic != nil && h.tick.Due(now) {
				h.periodic(now)
			}
		},
		Deadline: func() time.Time {
			if h.periodic == nil {
				return time.Time{}
			}
			return h.tick.Next()
		},
	}
	return h
}

func (h *host) post(op *endpoint.Op, cb func(*endpoint.Op)) {
	h.f.t.Helper()
	if err := h.core.Post(h.f.net.Now(), op); err != nil {
		h.f.t.Fatalf("seed %d: post %v: %v", h.f.seed, op.Kind, err)
	}
	if cb != nil {
		h.Track(op, cb)
	}
	h.f.net.Wake(h.addr)
}

// control sends a control request to the switch; cb gets the parsed
// response or the error.
func (h *host) control(req *ctrl.Msg, cb func(*ctrl.Msg, error)) {
	h.f.t.Helper()
	if req.Type.CarriesMTU() && req.MTU == 0 {
		req.MTU = h.core.MTU()
	}
	buf, err := secure.AppendCtrl(nil, req, h.f.token)
	if err != nil {
		h.f.t.Fatal(err)
	}
	h.post(&endpoint.Op{Kind: endpoint.KindControl, Peer: h.f.swAddr, Buf: buf, Timeout: time.Minute}, func(op *endpoint.Op) {
		if op.Err != nil {
			cb(nil, op.Err)
			return
		}
		var m ctrl.Msg
		if err := secure.ParseCtrl(op.Resp, &m, h.f.token); err != nil {
			cb(nil, err)
			return
		}
		cb(&m, nil)
	})
}

type simFabric struct {
	t      *testing.T
	seed   int64
	net    *simnet.Network
	sw     *fabric.Switch
	swAddr netip.AddrPort
	token  []byte
	link   simnet.LinkConfig
	log    []sent
}

func newSimFabric(t *testing.T, seed int64) *simFabric {
	t.Helper()
	t.Logf("seed %d", seed)
	f := &simFabric{t: t, seed: seed, net: simnet.New(seed), token: []byte("dissect-token"),
		swAddr: netip.MustParseAddrPort("10.0.0.1:7471"),
		link:   simnet.LinkConfig{Rate: 1e9, Latency: 10 * time.Microsecond}}
	sw, err := fabric.New(fabric.Config{Token: f.token, HeartbeatTimeout: time.Second,
		Transport: transport.Config{MTU: 9000, Seed: uint64(seed)}})
	if err != nil {
		t.Fatal(err)
	}
	f.sw = sw
	f.attach(f.swAddr, sw)
	return f
}

func (f *simFabric) attach(addr netip.AddrPort, n simnet.Node) {
	f.net.Attach(addr, &tap{addr: addr, node: n, log: &f.log}, f.link, f.link)
}

func (f *simFabric) newHost(addr netip.AddrPort, cfg endpoint.Config) *host {
	f.t.Helper()
	cfg.Transport = f.transport(addr)
	if cfg.OpTimeout == 0 {
		cfg.OpTimeout = time.Minute
	}
	core, err := endpoint.NewCore(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	h := f.hostOf(addr, core)
	f.attach(addr, h)
	return h
}

// transport is the transport configuration of the node at addr.
func (f *simFabric) transport(addr netip.AddrPort) transport.Config {
	return transport.Config{MTU: 9000, Seed: uint64(f.seed)*1000 + uint64(addr.Addr().As4()[3]) + uint64(addr.Port())}
}

// newMemNode is a memory node serving one region of size bytes to
// one-sided operations; it returns the node and the region's key.
func (f *simFabric) newMemNode(addr netip.AddrPort, size int) (*host, uint64) {
	f.t.Helper()
	st, err := memnode.NewStore(memnode.Config{})
	if err != nil {
		f.t.Fatal(err)
	}
	key, err := st.Alloc(size, wire.PermAll, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	return f.newHost(addr, endpoint.Config{Store: st}), key
}

// newPoolNode is a memory node (internal/memtest's SimNode) that lends a
// region of size bytes to the switch's pool: it offers it (ctrl.PoolNode)
// every 250 ms and reports its grants to every switch incarnation it has
// not reported to. It returns the region's key.
func (f *simFabric) newPoolNode(addr netip.AddrPort, size int, inc uint64) uint64 {
	f.t.Helper()
	n, err := memtest.NewSimNode(memtest.SimConfig{Switch: f.swAddr, Token: f.token, Size: size, Incarnation: inc,
		Every: 250 * time.Millisecond, Transport: f.transport(addr)})
	if err != nil {
		f.t.Fatal(err)
	}
	f.attach(addr, n)
	return n.Key
}

// member is an endpoint that takes part in groups and heartbeats them.
func (f *simFabric) newMember(addr netip.AddrPort) *host {
	h := f.newHost(addr, endpoint.Config{})
	h.core.EnableGroups()
	return h
}

// join makes hs a job group (rank = index), starts their heartbeats and
// returns the group id and the responses.
func (f *simFabric) join(job string, hs []*host) (uint32, []*ctrl.Msg) {
	f.t.Helper()
	resps := make([]*ctrl.Msg, len(hs))
	joined := 0
	for i, h := range hs {
		h.control(&ctrl.Msg{Type: ctrl.Join, Job: job, Size: len(hs), Rank: i}, func(r *ctrl.Msg, err error) {
			if err != nil {
				f.t.Fatalf("seed %d: join: %v", f.seed, err)
			}
			h.core.SetMember(r.Group, r.Member)
			h.core.SetGroupSwitch(r.Group, f.swAddr)
			resps[i] = r
			joined++
			hbBusy := false
			h.tick.Every = 250 * time.Millisecond
			h.periodic = func(time.Time) {
				if hbBusy {
					return
				}
				hbBusy = true
				h.control(&ctrl.Msg{Type: ctrl.Heartbeat, Group: r.Group, Member: r.Member}, func(*ctrl.Msg, error) { hbBusy = false })
			}
		})
	}
	f.run(func() bool { return joined == len(hs) }, time.Minute, "join "+job)
	return resps[0].Group, resps
}

func (f *simFabric) run(cond func() bool, limit time.Duration, what string) {
	f.t.Helper()
	if err := f.net.RunUntil(cond, limit); err != nil {
		f.t.Fatalf("seed %d: %s: %v", f.seed, what, err)
	}
}

// wait posts op on h and runs the network until it completes.
func (f *simFabric) wait(h *host, op *endpoint.Op, what string) *endpoint.Op {
	f.t.Helper()
	done := false
	h.post(op, func(*endpoint.Op) { done = true })
	f.run(func() bool { return done }, time.Minute, what)
	return op
}
