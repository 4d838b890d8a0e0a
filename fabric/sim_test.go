package fabric_test

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/internal/simhost"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// The simulated fabric: one switch and many endpoint Cores on a simnet
// star, everything in virtual time and deterministic from the seed.

// simMember is one endpoint Core on simnet (internal/simhost) with
// heartbeats, completion callbacks and an anycast handler.
type simMember struct {
	*simhost.Host[*endpoint.Op]
	f       *simFabric
	core    *endpoint.Core
	addr    netip.AddrPort
	groups  []uint32
	member  map[uint32]uint16
	hbBusy  map[uint32]int
	hb      simhost.Ticker
	serve   func(r *endpoint.Request) ([]byte, error) // anycast handler
	crashed bool
	sw      netip.AddrPort // its switch, if not f.swAddr (a tree's)
}

// swAddr is the address of m's switch.
func (m *simMember) swAddr() netip.AddrPort {
	if m.sw.IsValid() {
		return m.sw
	}
	return m.f.swAddr
}

func newSimMember(f *simFabric, core *endpoint.Core, addr netip.AddrPort) *simMember {
	m := &simMember{f: f, core: core, addr: addr, member: map[uint32]uint16{}, hbBusy: map[uint32]int{}, hb: simhost.Ticker{Every: f.hb}}
	m.Host = &simhost.Host[*endpoint.Op]{Core: core, Before: m.beforePoll, Deadline: m.deadline, Repoll: true} // callbacks may have posted more
	return m
}

// beforePoll heartbeats the member's groups and answers its requests.
func (m *simMember) beforePoll(now time.Time) {
	if len(m.groups) > 0 && m.hb.Due(now) {
		// A heartbeat every interval, each given up after two intervals,
		// at most 4 in flight per group, as Endpoint does: a lost response
		// must not silence the member.
		for _, g := range m.groups {
			if m.hbBusy[g] >= 4 {
				continue
			}
			m.hbBusy[g]++
			m.controlTimeout(&ctrl.Msg{Type: ctrl.Heartbeat, Group: g, Member: m.member[g]}, 2*m.f.hb, func(*ctrl.Msg, error) {
				m.hbBusy[g]--
			})
		}
	}
	for _, r := range m.core.Requests() {
		if m.serve == nil {
			continue
		}
		data, err := m.serve(r)
		st := errStatus(err)
		_ = m.core.Reply(r, data, st)
	}
}

func (m *simMember) deadline() time.Time {
	if len(m.groups) == 0 {
		return time.Time{}
	}
	return m.hb.Next()
}

// post starts op now and calls cb when it completes.
func (m *simMember) post(op *endpoint.Op, cb func(*endpoint.Op)) {
	if err := m.core.Post(m.f.net.Now(), op); err != nil {
		m.f.t.Fatalf("seed %d: post %v: %v", m.f.seed, op.Kind, err)
	}
	if cb != nil {
		m.Track(op, cb)
	}
	m.f.net.Wake(m.addr)
}

// control sends a control request to the switch; cb gets the parsed
// response (or nil and the error).
func (m *simMember) control(req *ctrl.Msg, cb func(*ctrl.Msg, error)) {
	m.controlTimeout(req, time.Minute, cb)
}

func (m *simMember) controlTimeout(req *ctrl.Msg, timeout time.Duration, cb func(*ctrl.Msg, error)) {
	switch req.Type {
	case ctrl.Join, ctrl.Register, ctrl.Lookup:
		if req.MTU == 0 {
			req.MTU = m.core.MTU()
		}
	}
	buf, err := secure.AppendCtrl(nil, req, m.f.token)
	if err != nil {
		m.f.t.Fatal(err)
	}
	op := &endpoint.Op{Kind: endpoint.KindControl, Peer: m.swAddr(), Buf: buf, Timeout: timeout}
	m.post(op, func(op *endpoint.Op) {
		if cb == nil {
			return
		}
		if op.Err != nil {
			cb(nil, op.Err)
			return
		}
		var resp ctrl.Msg
		if err := secure.ParseCtrl(op.Resp, &resp, m.f.token); err != nil {
			cb(nil, err)
			return
		}
		cb(&resp, nil)
	})
}

type simFabric struct {
	t       *testing.T
	seed    int64
	net     *simnet.Network
	sw      *fabric.Switch
	swAddr  netip.AddrPort
	token   []byte
	hb      time.Duration
	link    simnet.LinkConfig
	members []*simMember
	cfg     fabric.Config
	swLink  simnet.LinkConfig
	// deadTimeout, if not zero, is the members' transport DeadTimeout.
	deadTimeout time.Duration
}

func newSimFabric(t *testing.T, seed int64, link simnet.LinkConfig, cfg fabric.Config) *simFabric {
	t.Helper()
	t.Logf("seed %d", seed)
	cfg.Token = []byte("sim-token")
	cfg.Transport.Seed = uint64(seed)
	if cfg.Transport.MTU == 0 {
		cfg.Transport.MTU = 9000
	}
	sw, err := fabric.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := &simFabric{t: t, seed: seed, net: simnet.New(seed), sw: sw, token: cfg.Token,
		swAddr: netip.MustParseAddrPort("10.0.0.1:7471"), hb: 250 * time.Millisecond, link: link, cfg: cfg}
	// simnet is a star of access links around a crossbar; the switch sits
	// on the crossbar with a port per member, so its own attachment is
	// infinitely fast with no latency (each member's access link is the
	// port) — but keeps the link's faults.
	swLink := link
	swLink.Rate, swLink.Latency = 0, 0
	f.swLink = swLink
	f.net.Attach(f.swAddr, sw, swLink, swLink)
	return f
}

// restartSwitch stops the switch, leaves it down for down, and starts a
// new one (same address and configuration, a new transport seed): every
// table it held is gone.
func (f *simFabric) restartSwitch(down time.Duration) {
	f.t.Helper()
	f.net.Detach(f.swAddr)
	f.net.RunFor(down)
	f.cfg.Transport.Seed += 1000
	sw, err := fabric.New(f.cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	f.sw = sw
	f.net.Attach(f.swAddr, sw, f.swLink, f.swLink)
}

// addMembers attaches n endpoint cores.
func (f *simFabric) addMembers(n int) []*simMember {
	var ms []*simMember
	for range n {
		i := len(f.members)
		core, err := endpoint.NewCore(endpoint.Config{
			Transport: transport.Config{MTU: max(9000, f.cfg.Transport.MTU), Seed: uint64(f.seed)*1000 + uint64(i) + 1, DeadTimeout: f.deadTimeout},
			OpTimeout: time.Hour,
		})
		if err != nil {
			f.t.Fatal(err)
		}
		core.EnableGroups()
		m := newSimMember(f, core, netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), 9000))
		f.members = append(f.members, m)
		f.net.Attach(m.addr, m, f.link, f.link)
		ms = append(ms, m)
	}
	return ms
}

// join makes ms a job group (rank = index) and returns its id.
func (f *simFabric) join(job string, ms []*simMember) uint32 {
	var gid uint32
	joined := 0
	for i, m := range ms {
		m.control(&ctrl.Msg{Type: ctrl.Join, Job: job, Size: len(ms), Rank: i}, func(r *ctrl.Msg, err error) {
			if err != nil {
				f.t.Fatalf("seed %d: join: %v", f.seed, err)
			}
			m.core.SetMember(r.Group, r.Member)
			m.core.SetGroupSwitch(r.Group, m.swAddr()) // as Endpoint.JoinJob does
			m.groups = append(m.groups, r.Group)
			m.member[r.Group] = r.Member
			gid = r.Group
			joined++
		})
	}
	f.run(func() bool { return joined == len(ms) }, time.Minute, "join "+job)
	return gid
}

func (f *simFabric) run(cond func() bool, limit time.Duration, what string) {
	f.t.Helper()
	if err := f.net.RunUntil(cond, limit); err != nil {
		f.t.Fatalf("seed %d: %s: %v\nswitch: %+v", f.seed, what, err, f.sw.Stats())
	}
}

// crash detaches a member: it stops receiving, sending and heartbeating.
func (f *simFabric) crash(m *simMember) {
	m.crashed = true
	f.net.Detach(m.addr)
}

func errStatus(err error) wire.Status {
	if err == nil {
		return wire.StatusOK
	}
	var st wire.Status
	if errors.As(err, &st) {
		return st
	}
	return wire.StatusBusy
}
