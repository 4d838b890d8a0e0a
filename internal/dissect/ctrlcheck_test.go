package dissect

import (
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// fences checks the fences shown (a trailer's, or a control message's
// list; a report's when it is the only one) against want.
func (c *checker) fences(where string, d *fields, want []wire.Fence) {
	ids, tokens := d.all("ndma.fence.id"), d.all("ndma.fence.token")
	ok := len(ids) == len(want) && len(tokens) == len(want)
	for j := 0; ok && j < len(want); j++ {
		id, _ := strconv.ParseUint(ids[j].Show, 0, 32)
		tok, _ := strconv.ParseUint(tokens[j].Show, 0, 64)
		ok = id == uint64(want[j].ID) && tok == want[j].Token
	}
	if !ok {
		c.t.Errorf("%s: fences shown %v %v, want %v", where, ids, tokens, want)
	}
	if len(want) > 0 {
		c.seen["fences shown"]++
	}
}

// ctrl checks the decoded fields of control message m.
func (c *checker) ctrl(where string, d *fields, m *ctrl.Msg, payload []byte, w *workload, s sent) {
	t := c.t
	t.Helper()
	c.num(where, d, "ndma.ctrl.type", uint64(m.Type))
	c.contains(where, d, "ndma.ctrl.type", strings.ToUpper(m.Type.String()))
	c.flag(where, d, "ndma.ctrl.resp", m.Resp)
	if got := d.value("ndma.ctrl.tag"); got != hex.EncodeToString(payload[len(payload)-secure.CtrlTagLen:]) {
		t.Errorf("%s: control tag %q", where, got)
	}
	if d.has("ndma.ctrl.malformed") {
		t.Errorf("%s: a valid %v message shows as malformed", where, m.Type)
	}
	switch {
	case (m.Type == ctrl.Join || m.Type == ctrl.JoinVia) && !m.Resp:
		if d.show("ndma.ctrl.job") != m.Job {
			t.Errorf("%s: job %q, want %q", where, d.show("ndma.ctrl.job"), m.Job)
		}
		c.num(where, d, "ndma.ctrl.size", uint64(m.Size))
		c.num(where, d, "ndma.ctrl.rank", uint64(uint16(m.Rank))) // ctrl.RankAny is 0xFFFF
		c.num(where, d, "ndma.ctrl.mtu", uint64(m.MTU))
		if m.Type == ctrl.JoinVia {
			if e := d.all("ndma.ctrl.entry"); len(e) != 1 || e[0].Show != m.Members[0].Addr.String() {
				t.Errorf("%s: JOINVIA joiner %v, want %v", where, e, m.Members[0].Addr)
			}
		}
	case m.Type == ctrl.Join || m.Type == ctrl.JoinVia:
		c.num(where, d, "ndma.ctrl.group", uint64(m.Group))
		c.num(where, d, "ndma.ctrl.member", uint64(m.Member))
		c.num(where, d, "ndma.ctrl.epoch", m.Epoch)
		var got, want []string
		for _, e := range d.all("ndma.ctrl.entry") {
			got = append(got, e.Show)
		}
		for _, mi := range m.Members {
			want = append(want, mi.Addr.String())
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: JOIN response members %v, want %v", where, got, want)
		}
		if s.src == c.f.swAddr && strings.HasPrefix(s.dst.String(), "10.1.") && (m.Group != w.group || strings.Join(got, " ") != addrs(w.members)) {
			t.Errorf("%s: JOIN response of group %d members %v, the job is group %d of %v", where, m.Group, got, w.group, addrs(w.members))
		}
	case m.Type == ctrl.Heartbeat && !m.Resp:
		c.num(where, d, "ndma.ctrl.group", uint64(m.Group))
		c.num(where, d, "ndma.ctrl.member", uint64(m.Member))
	case m.Type == ctrl.Heartbeat:
		c.num(where, d, "ndma.ctrl.epoch", m.Epoch)
		c.num(where, d, "ndma.ctrl.count", uint64(len(m.Dead)))
	case m.Type == ctrl.PoolNode && !m.Resp:
		c.num(where, d, "ndma.ctrl.key", m.Key)
		c.num(where, d, "ndma.ctrl.capacity", m.Capacity)
		c.num(where, d, "ndma.ctrl.epoch", m.Epoch)
		c.flag(where, d, "ndma.ctrl.kept", m.Kept)
		if k, ok := w.poolKeys[s.src]; ok && m.Key != k {
			t.Errorf("%s: POOLNODE key %#x, the node lends %#x", where, m.Key, w.poolKeys[s.src])
		}
	case m.Type == ctrl.PoolNode:
		c.num(where, d, "ndma.ctrl.node", uint64(m.Node))
		c.num(where, d, "ndma.ctrl.epoch", m.Epoch)
	case m.Type == ctrl.PoolCreate && !m.Resp:
		c.pool(where, d, &m.Pool)
	case m.Type == ctrl.PoolCreate:
		c.num(where, d, "ndma.ctrl.region", uint64(m.Region))
		c.num(where, d, "ndma.ctrl.key", m.Key)
		c.pool(where, d, &m.Pool)
	case m.Type == ctrl.PoolOpen && !m.Resp:
		c.num(where, d, "ndma.ctrl.region", uint64(m.Region))
		c.num(where, d, "ndma.ctrl.key", m.Key)
	case m.Type == ctrl.PoolOpen:
		c.pool(where, d, &m.Pool)
	case (m.Type == ctrl.PoolGrant || m.Type == ctrl.PoolRebuild) && !m.Resp:
		c.fences(where, d, m.Fences)
		c.num(where, d, "ndma.ctrl.region", uint64(m.Region))
		c.num(where, d, "ndma.ctrl.key", m.Key)
		c.pool(where, d, &m.Pool)
		c.num(where, d, "ndma.ctrl.base", m.Base)
		c.num(where, d, "ndma.ctrl.length", m.Length)
		c.num(where, d, "ndma.ctrl.column", uint64(m.Node))
		c.num(where, d, "ndma.ctrl.epoch", m.Epoch)
		var got, want []string
		for _, e := range d.all("ndma.ctrl.entry") {
			got = append(got, e.Show)
		}
		for _, h := range m.Homes {
			want = append(want, h.Addr.String())
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: POOLGRANT homes %v, want %v", where, got, want)
		}
	case m.Type == ctrl.PoolReport && !m.Resp:
		c.flag(where, d, "ndma.ctrl.final", m.Final)
		c.num(where, d, "ndma.ctrl.count", uint64(len(m.Reports)))
		if len(m.Reports) > 0 {
			r := &m.Reports[0]
			c.num(where, d, "ndma.ctrl.region", uint64(r.Region))
			c.num(where, d, "ndma.ctrl.column", uint64(r.Column))
			c.num(where, d, "ndma.ctrl.epoch", r.Epoch)
			c.flag(where, d, "ndma.ctrl.degraded", r.Degraded)
			c.fences(where, d, r.Fences)
			if got := d.value("ndma.ctrl.digest"); got != hex.EncodeToString(r.Digest[:]) {
				t.Errorf("%s: key digest %q, want %x", where, got, r.Digest)
			}
		}
	case m.Type == ctrl.Register && !m.Resp:
		if d.show("ndma.ctrl.service") != m.Service {
			t.Errorf("%s: service %q, want %q", where, d.show("ndma.ctrl.service"), m.Service)
		}
		c.num(where, d, "ndma.ctrl.policy", uint64(m.Policy))
		c.num(where, d, "ndma.ctrl.rank", uint64(uint16(m.Rank))) // ctrl.RankAny is 0xFFFF
		c.num(where, d, "ndma.ctrl.mtu", uint64(m.MTU))
		if n := len(d.all("ndma.ctrl.range")); n != len(m.Ranges) {
			t.Errorf("%s: %d ranges shown, want %d", where, n, len(m.Ranges))
		}
	case m.Type == ctrl.Lookup && m.Resp:
		if n := len(d.all("ndma.ctrl.entry")); n != len(m.Members) {
			t.Errorf("%s: %d members shown, want %d", where, n, len(m.Members))
		}
	case m.Type == ctrl.PoolStat && m.Resp:
		c.num(where, d, "ndma.ctrl.refused", m.PoolRefused)
		c.num(where, d, "ndma.ctrl.health", uint64(m.PoolRegions[0].Health))
		c.contains(where, d, "ndma.ctrl.health", m.PoolRegions[0].Health.String())
	case m.Type == ctrl.JoinStatus && m.Resp:
		c.num(where, d, "ndma.ctrl.size", uint64(m.Size))
		var want []string
		for _, r := range m.JoinedRanks() {
			want = append(want, strconv.Itoa(r))
		}
		if got := d.show("ndma.ctrl.joined.list"); got != strings.Join(want, ",") {
			t.Errorf("%s: joined ranks %q, want %v", where, got, want)
		}
	case m.Type == ctrl.PoolRebuilt && !m.Resp:
		c.flag(where, d, "ndma.ctrl.failed", m.Failed)
	case m.Type == ctrl.PoolEpoch && !m.Resp:
		c.num(where, d, "ndma.ctrl.epoch", m.Epoch)
	}
}
