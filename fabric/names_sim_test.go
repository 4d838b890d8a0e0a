package fabric_test

import (
	"crypto/rand"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// Names bound at the switch: on the simulated fabric the switch knows
// each member's certified identity (as a security layer below it tells
// it, SetIdentities), and insiders with credentials of the fabric try to
// take services and ranks their names do not bind.

// namedFabric is a simFabric whose switch reads the certified identity
// of each address from certs.
type namedFabric struct {
	*simFabric
	certs map[netip.AddrPort]secure.Cert
}

func newNamedFabric(t *testing.T, seed int64) *namedFabric {
	f := &namedFabric{simFabric: newSimFabric(t, seed, simnet.LinkConfig{Rate: 10e9, Latency: 5 * time.Microsecond}, fabric.Config{}),
		certs: map[netip.AddrPort]secure.Cert{}}
	f.sw.SetIdentities(func(a netip.AddrPort) (secure.Cert, bool) {
		c, ok := f.certs[a]
		return c, ok
	})
	return f
}

// add attaches a member certified as role and name.
func (f *namedFabric) add(role secure.Role, name string) *simMember {
	m := f.addMembers(1)[0]
	f.certs[m.addr] = secure.Cert{Role: role, Name: name}
	return m
}

// refusal is how the switch answered one control request: its response,
// or its error and Operand1.
type refusal struct {
	resp    *ctrl.Msg
	err     error
	operand uint64
}

// ask sends req from m and waits for the switch's answer.
func (f *namedFabric) ask(m *simMember, req *ctrl.Msg) refusal {
	f.t.Helper()
	if req.MTU == 0 {
		req.MTU = m.core.MTU()
	}
	buf, err := secure.AppendCtrl(nil, req, f.token)
	if err != nil {
		f.t.Fatal(err)
	}
	var r refusal
	done := false
	m.post(&endpoint.Op{Kind: endpoint.KindControl, Peer: f.swAddr, Buf: buf, Timeout: time.Minute}, func(op *endpoint.Op) {
		done = true
		if r.err, r.operand = op.Err, op.Old; op.Err != nil {
			return
		}
		r.resp = &ctrl.Msg{}
		r.err = secure.ParseCtrl(op.Resp, r.resp, f.token)
	})
	f.run(func() bool { return done }, time.Minute, req.Type.String())
	return r
}

// nameRefused fails the test unless r is the switch's refusal of a
// request the sender's credential name does not bind.
func (f *namedFabric) nameRefused(r refusal, what string) {
	f.t.Helper()
	if !errors.Is(r.err, wire.StatusAuth) || r.operand != ctrl.AuthNameRefused {
		f.t.Fatalf("seed %d: %s: %v (operand %d), want StatusAuth with AuthNameRefused", f.seed, what, r.err, r.operand)
	}
}

// TestSimServiceCapture: a member credential of another scope (evil/0)
// registers service "kv" before its owner: the switch refuses it, and
// refuses a client credential named after the service for its role; the
// owner (kv/a) then registers, and a client's anycasts reach the owner
// alone. evil/0 still serves a service of its own scope.
func TestSimServiceCapture(t *testing.T) {
	const seed = 431
	f := newNamedFabric(t, seed)
	evil := f.add(secure.RoleMember, "evil/0")
	kvClient := f.add(secure.RoleClient, "kv")
	owner := f.add(secure.RoleMember, "kv/a")
	cli := f.add(secure.RoleClient, "c")
	evil.serve = func(*endpoint.Request) ([]byte, error) { return []byte("evil"), nil }
	owner.serve = func(*endpoint.Request) ([]byte, error) { return []byte("owner"), nil }

	reg := func(m *simMember, service string) refusal {
		return f.ask(m, &ctrl.Msg{Type: ctrl.Register, Service: service, Size: 1, Rank: 0, Policy: uint8(ctrl.PolicyRoundRobin)})
	}
	f.nameRefused(reg(evil, "kv"), "evil/0 registering kv")
	f.nameRefused(reg(evil, "kv.shard0"), "evil/0 registering kv.shard0")
	if r := reg(kvClient, "kv"); !errors.Is(r.err, wire.StatusAuth) || r.operand != ctrl.AuthRoleRefused {
		t.Fatalf("seed %d: a client credential named kv registering kv: %v (operand %d), want its role refused", seed, r.err, r.operand)
	}
	if n := f.sw.Stats().NameRefused; n != 2 {
		t.Fatalf("seed %d: %d registrations refused for the name, want 2", seed, n)
	}
	r := reg(owner, "kv")
	if r.err != nil {
		t.Fatalf("seed %d: kv/a registering kv after the attempts: %v", seed, r.err)
	}
	owner.core.SetMember(r.resp.Group, r.resp.Member)
	gid := r.resp.Group
	if r := reg(evil, "evil.kv"); r.err != nil {
		t.Fatalf("seed %d: evil/0 registering a service of its own scope: %v", seed, r.err)
	}
	const n = 20
	answered := 0
	for i := range n {
		op := &endpoint.Op{Kind: endpoint.KindAnycast, Peer: f.swAddr, Group: gid, Addr: uint64(i), Buf: []byte{byte(i)}, Timeout: time.Minute}
		cli.post(op, func(op *endpoint.Op) {
			if op.Err != nil || string(op.Resp) != "owner" {
				t.Errorf("seed %d: anycast %d to kv: %q, %v; want the owner's answer", seed, i, op.Resp, op.Err)
			}
			answered++
		})
	}
	f.run(func() bool { return answered == n }, time.Minute, "anycasts to kv")
}

// TestSimRankCapture: a credential of job train-42 takes no rank of job
// train-42-v2, whose name it prefixes, nor another rank of its own job; a
// server credential of another scope takes no rank of either; names
// outside the grammar (issued before it, or forged into a certificate)
// bind nothing. The real ranks then form their jobs, and a group of a
// job's own with the storage service as its guest takes the job's ranks
// and the storage nodes, no one else.
func TestSimRankCapture(t *testing.T) {
	const seed = 432
	f := newNamedFabric(t, seed)
	attacker := f.add(secure.RoleMember, "train-42/0")
	server := f.add(secure.RoleMember, "h3")
	oldName := f.add(secure.RoleMember, "train-42.v2/1")
	padded := f.add(secure.RoleMember, "train-42-v2/01")
	v2 := []*simMember{f.add(secure.RoleMember, "train-42-v2/0"), f.add(secure.RoleMember, "train-42-v2/1")}
	job := []*simMember{attacker, f.add(secure.RoleMember, "train-42/1")}

	join := func(m *simMember, job string, rank int) refusal {
		return f.ask(m, &ctrl.Msg{Type: ctrl.Join, Job: job, Size: 2, Rank: rank})
	}
	for _, c := range []struct {
		m    *simMember
		job  string
		rank int
	}{
		{attacker, "train-42-v2", 1},
		{attacker, "train-42-v2", ctrl.RankAny},
		{attacker, "train-42-v2.x", 1},
		{attacker, "train-42", 1},
		{attacker, "train-42-v2.w@stor", 1},
		{server, "train-42-v2", 1},
		{server, "train-42.x", 1},
		{oldName, "train-42.v2", 1},
		{padded, "train-42-v2", 1},
	} {
		f.nameRefused(join(c.m, c.job, c.rank), f.certs[c.m.addr].Name+" joining "+c.job)
	}
	f.join("train-42-v2", v2)
	f.join("train-42", job)

	// A write group of train-42 with the storage service's scope as its
	// guest: rank 0 the job's, ranks 1 and 2 storage nodes.
	nodes := []*simMember{f.add(secure.RoleMember, "stor/s0"), f.add(secure.RoleMember, "stor/s1")}
	const wg = "train-42.stor.w1@stor"
	f.nameRefused(f.ask(v2[0], &ctrl.Msg{Type: ctrl.Join, Job: wg, Size: 3, Rank: 1}), "train-42-v2/0 joining "+wg)
	f.nameRefused(f.ask(server, &ctrl.Msg{Type: ctrl.Join, Job: wg, Size: 3, Rank: 1}), "h3 joining "+wg)
	members := append([]*simMember{job[1]}, nodes...)
	joined := 0
	for i, m := range members {
		m.control(&ctrl.Msg{Type: ctrl.Join, Job: wg, Size: 3, Rank: i}, func(r *ctrl.Msg, err error) {
			if err != nil || r.Member != uint16(i) || len(r.Members) != 3 {
				t.Errorf("seed %d: %s joining %s as rank %d: %+v, %v", seed, f.certs[m.addr].Name, wg, i, r, err)
			}
			joined++
		})
	}
	f.run(func() bool { return joined == len(members) }, time.Minute, "join "+wg)
	if n := f.sw.Stats().NameRefused; n != 11 {
		t.Fatalf("seed %d: %d joins refused for the name, want 11", seed, n)
	}
}

// TestIssueRefusesUnboundNames: the authority issues none of the names
// the switch would read as binding nothing or something else than they
// say, and the names it issues are the ones the switch binds.
func TestIssueRefusesUnboundNames(t *testing.T) {
	a, err := secure.NewAuthority([]byte("fabric secret of the issue test"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		role secure.Role
		name string
	}{
		{secure.RoleMember, "train-42/01"},
		{secure.RoleMember, "train-42/0/x"},
		{secure.RoleMember, "train-42.v2/1"},
		{secure.RoleMember, "kv.x"},
		{secure.RoleMember, "kv@evil"},
		{secure.RoleClient, "evil/0"},
		{secure.RoleMemoryNode, "m/0"},
	} {
		if _, err := a.Issue(c.role, c.name, rand.Reader); !errors.Is(err, secure.ErrIdentity) {
			t.Errorf("Issue(%v, %q): %v, want ErrIdentity", c.role, c.name, err)
		}
	}
	for _, c := range []struct {
		name, job string
		rank      int
	}{{"train-42/7", "train-42", 7}, {"stor/s0", "stor", 0}, {"kv", "kv", 3}} {
		id, err := a.Issue(secure.RoleMember, c.name, rand.Reader)
		if err != nil {
			t.Fatalf("Issue(member, %q): %v", c.name, err)
		}
		if !fabric.RankMay(id.Cert.Name, c.job, c.rank) {
			t.Errorf("the switch refuses %q joining %s as rank %d", c.name, c.job, c.rank)
		}
	}
}

// TestSimAnycastCaller: the switch writes the certified scope of an
// anycast request's sender into the request it relays (the Caller a
// service sees), over whatever the sender wrote there: a client that
// claims the service's own scope is still itself to the service, a
// member's scope is its job's, and on a switch without identities no one
// is anyone.
func TestSimAnycastCaller(t *testing.T) {
	const seed = 433
	for _, named := range []bool{true, false} {
		var f *namedFabric
		if named {
			f = newNamedFabric(t, seed)
		} else {
			f = &namedFabric{simFabric: newSimFabric(t, seed, simnet.LinkConfig{Rate: 10e9, Latency: 5 * time.Microsecond}, fabric.Config{}),
				certs: map[netip.AddrPort]secure.Cert{}}
		}
		owner := f.add(secure.RoleMember, "kv/a")
		var seen []endpoint.Caller
		owner.serve = func(r *endpoint.Request) ([]byte, error) {
			seen = append(seen, r.Caller)
			return nil, nil
		}
		r := f.ask(owner, &ctrl.Msg{Type: ctrl.Register, Service: "kv", Size: 1, Rank: 0, Policy: uint8(ctrl.PolicyRoundRobin)})
		if r.err != nil {
			t.Fatalf("seed %d: register: %v", seed, r.err)
		}
		owner.core.SetMember(r.resp.Group, r.resp.Member)
		callers := []struct {
			m     *simMember
			scope string
		}{
			{f.add(secure.RoleClient, "c"), "c"},
			{f.add(secure.RoleMember, "app/3"), "app"},
			{f.add(secure.RoleMember, "kv/b"), "kv"},
		}
		answered := 0
		for i, c := range callers {
			// Every request claims the service's own scope.
			op := &endpoint.Op{Kind: endpoint.KindAnycast, Peer: f.swAddr, Group: r.resp.Group, Key: secure.ScopeTag("kv"),
				Buf: make([]byte, 3000), Timeout: time.Minute}
			c.m.post(op, func(op *endpoint.Op) {
				if op.Err != nil {
					t.Errorf("seed %d: anycast: %v", seed, op.Err)
				}
				answered++
			})
			f.run(func() bool { return answered == i+1 }, time.Minute, "anycast")
		}
		if len(seen) != len(callers) {
			t.Fatalf("seed %d: the service saw %d requests, want %d", seed, len(seen), len(callers))
		}
		for i, c := range callers {
			got := seen[i]
			switch {
			case !named && got.Certified():
				t.Errorf("seed %d: without identities, a request from %s came as caller %x, want none", seed, c.scope, uint64(got))
			case named && (!got.Is(c.scope) || c.scope != "kv" && got.Is("kv")):
				t.Errorf("seed %d: a request from scope %s came as caller %x, want %x", seed, c.scope, uint64(got), secure.ScopeTag(c.scope))
			}
		}
	}
}
