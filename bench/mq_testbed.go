package bench

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/testbed"
	"github.com/ndma/ndma/testbed/fidelity"
)

// agentName names a testbed run's agent in errors and its log file.
func (sp *mqAgentSpec) agentName() string {
	if sp.Role == mqRoleSubscriber {
		return sp.Role + strconv.Itoa(sp.Index)
	}
	return sp.Role
}

// Ports of the peers' servers on a testbed's first host.
const (
	mqRedisPort = 6379
	mqNATSPort  = 4222
)

// runMQTestbed runs one target across cfg.Testbed (see RunMQ) and makes
// its row.
func runMQTestbed(ctx context.Context, cfg *MQConfig, name string) (res MQResult, err error) {
	st := cfg.Testbed
	native := name == MQNative || name == MQPush
	switch {
	case cfg.BrokerApart && len(st.Hosts) < 2+cfg.Subscribers:
		return res, fmt.Errorf("%w: %d subscribers and a broker apart need %d hosts (the producers', one each, the broker's); the testbed has %d", ErrBadValue, cfg.Subscribers, 2+cfg.Subscribers, len(st.Hosts))
	case len(st.Hosts) < 1+cfg.Subscribers:
		return res, fmt.Errorf("%w: %d subscribers need %d hosts (the producers' and one each); the testbed has %d", ErrBadValue, cfg.Subscribers, 1+cfg.Subscribers, len(st.Hosts))
	case native && len(st.MemNodes) == 0:
		return res, fmt.Errorf("%w: NDMA's queue keeps its logs in the pool: bring the testbed up with memory nodes (--memnodes)", ErrBadValue)
	case len(st.Leaves) > 0:
		return res, fmt.Errorf("%w: a testbed with leaf switches (the queue's push service lives at one switch)", ErrBadValue)
	}
	dir, err := os.MkdirTemp("", "ndma-bench-mq-testbed")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	target, err := fidelity.TargetOf(st)
	if err != nil {
		return res, err
	}
	h0 := st.Hosts[0]
	spec := mqAgentSpec{Target: name, Config: *cfg, Switch: st.SwitchAddr, Token: st.Token}
	spec.Config.MTU = st.DatagramMTU
	servers, err := newProcGroup("ndma-bench-mq-servers")
	if err != nil {
		return res, err
	}
	defer servers.stop()
	// The broker's host: the producers', or one of its own.
	bh := h0
	if cfg.BrokerApart {
		bh = st.Hosts[1+cfg.Subscribers]
	}
	inNS := func(bin string, args ...string) []string {
		return append([]string{"netns", "exec", bh.NS, bin}, args...)
	}
	switch name {
	case MQRedis:
		spec.Addr = net.JoinHostPort(bh.Addr.String(), strconv.Itoa(mqRedisPort))
		err = servers.start("redis-server", "ip", inNS(cfg.RedisServer, "--port", strconv.Itoa(mqRedisPort), "--bind", bh.Addr.String(),
			"--save", "", "--appendonly", "no", "--protected-mode", "no")...)
	case MQNATS:
		spec.Addr = "nats://" + net.JoinHostPort(bh.Addr.String(), strconv.Itoa(mqNATSPort))
		err = servers.start("nats-server", "ip", inNS(cfg.NATSServer, "--addr", bh.Addr.String(), "--port", strconv.Itoa(mqNATSPort),
			"--jetstream", "--store_dir", filepath.Join(servers.dir, "store"))...)
	}
	if err != nil {
		return res, err
	}
	// Each agent of NDMA's queue a member credential of scope mq (which
	// a push needs), unless the testbed runs without credentials.
	credential := func(who string) (string, error) {
		if !native {
			return "", nil
		}
		path := filepath.Join(dir, who+".cred")
		ok, err := testbed.IssueCredential(st, secure.RoleMember, "mq/bench-"+who, path)
		if !ok {
			path = ""
		}
		return path, err
	}
	var agents []*agentProc[mqAgentMsg]
	defer func() {
		for _, a := range agents {
			if e := a.stop(); e != nil && err == nil {
				err = e
			}
		}
	}()
	ps := spec
	ps.Role, ps.Local = mqRoleProducer, h0.Addr.String()+":0"
	if ps.Credential, err = credential("producer"); err != nil {
		return res, err
	}
	prod, err := startAgent[mqAgentMsg](ctx, st, cfg.Binary, "mq-agent", h0.NS, dir, ps.agentName(), ps)
	if err != nil {
		return res, err
	}
	agents = append(agents, prod)
	ready, err := prod.next(ctx, agentWait, nil)
	if err != nil {
		return res, err
	}
	subs := make([]*agentProc[mqAgentMsg], cfg.Subscribers)
	for j := range subs {
		h := st.Hosts[1+j]
		ss := spec
		ss.Role, ss.Index, ss.Local, ss.Topic = mqRoleSubscriber, j, h.Addr.String()+":0", ready.Topic
		if ss.Credential, err = credential("sub" + strconv.Itoa(j)); err != nil {
			return res, err
		}
		if subs[j], err = startAgent[mqAgentMsg](ctx, st, cfg.Binary, "mq-agent", h.NS, dir, ss.agentName(), ss); err != nil {
			return res, err
		}
		agents = append(agents, subs[j])
	}
	for _, s := range subs {
		if _, err := s.next(ctx, agentWait, nil); err != nil {
			return res, err
		}
	}

	mon, err := fidelity.Start(ctx, target, 0)
	if err != nil {
		return res, err
	}
	monitoring := true
	defer func() {
		if monitoring {
			_, _ = mon.Stop(context.WithoutCancel(ctx))
		}
	}()
	// The servers' CPU over the run: the broker, or the testbed's
	// switch and memory nodes.
	cpu := func() map[string]time.Duration {
		m := servers.cpu()
		if native {
			maps.Copy(m, testbedDaemonCPU(st))
		}
		return m
	}
	cpu0 := cpu()
	if err := prod.send("go"); err != nil {
		return res, err
	}
	began := time.Now()
	wait := cfg.Duration + agentWait
	if cfg.Records > 0 {
		wait = 24 * time.Hour // the producer reports its progress meanwhile
	}
	pr, err := prod.next(ctx, wait, func(m mqAgentMsg) {
		if cfg.Progress == nil {
			return
		}
		if cfg.Records > 0 {
			cfg.Progress(int(m.Acked), cfg.Records*cfg.Producers)
		} else {
			cfg.Progress(int(min(time.Since(began), cfg.Duration).Milliseconds()), int(cfg.Duration.Milliseconds()))
		}
	})
	if err != nil {
		return res, err
	}
	for _, s := range subs {
		if err := s.send("expect " + strconv.FormatInt(pr.Produced, 10)); err != nil {
			return res, err
		}
	}
	results := make([]mqAgentMsg, len(subs))
	for j, s := range subs {
		// A subscriber ends once it has every record, or none came for
		// MQDrainIdle.
		if results[j], err = s.next(ctx, 24*time.Hour, nil); err != nil {
			return res, err
		}
	}
	cpu1 := cpu()
	// The agents and the servers are waited for before the monitor
	// stops, so that it counts their CPU.
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
	return mqTestbedRow(cfg, name, st, pr, results, cpu0, cpu1, rec, mon.Started())
}

// mqTestbedRow makes a testbed run's row from the agents' results, the
// peer's server CPU (cpu0, cpu1) and the monitor's record of the run.
func mqTestbedRow(cfg *MQConfig, name string, st *testbed.State, pr mqAgentMsg, subs []mqAgentMsg,
	cpu0, cpu1 map[string]time.Duration, rec *fidelity.Recorder, monStart time.Time) (MQResult, error) {
	res := MQResult{Target: name, Producers: cfg.Producers, Subscribers: cfg.Subscribers, Partitions: cfg.Partitions,
		RecordSize: cfg.RecordSize, Batch: cfg.Batch, InFlight: cfg.InFlight, Copies: cfg.Copies, Processes: map[string]float64{},
		Produced: pr.Produced, Errors: pr.Errors, Hosts: len(st.Hosts), RateBits: st.RateBits, BrokerApart: cfg.BrokerApart}
	var ack, e2e latHist
	if err := ack.fromSparse(pr.Ack); err != nil {
		return res, err
	}
	var lastGot int64
	cpu := pr.CPUS
	for _, s := range subs {
		res.Delivered += s.Got
		res.OutOfOrder += s.OutOfOrder
		res.Wrong += s.Wrong
		if err := e2e.fromSparse(s.E2E); err != nil {
			return res, err
		}
		lastGot = max(lastGot, s.LastNS)
		cpu += s.CPUS
	}
	if res.Produced == 0 || res.Delivered == 0 {
		return res, fmt.Errorf("%d records acknowledged, %d delivered (%d produce requests failed)", res.Produced, res.Delivered, res.Errors)
	}
	start := time.Unix(0, pr.StartNS)
	if err := rec.Window(start.Sub(monStart), time.Unix(0, lastGot).Sub(monStart)); err != nil {
		return res, err
	}
	verdict, err := rec.Judge(cfg.Fidelity)
	if err != nil {
		return res, err
	}
	res.Fidelity = &verdict
	mb := float64(cfg.RecordSize) / 1e6
	res.ProducedPerSec = round(float64(res.Produced)/time.Unix(0, pr.LastAckNS).Sub(start).Seconds(), 5)
	res.DeliveredPerSec = round(float64(res.Delivered)/time.Unix(0, lastGot).Sub(start).Seconds(), 5)
	res.ProducedMBPerSec = round(res.ProducedPerSec*mb, 4)
	res.DeliveredMBPerSec = round(res.DeliveredPerSec*mb, 4)
	res.AckP50, res.AckP99 = ack.pctUS(50), ack.pctUS(99)
	res.EndToEndP50, res.EndToEndP99 = e2e.pctUS(50), e2e.pctUS(99)
	perRec := func(s float64) float64 { return round(s*1e6/float64(res.Delivered), 4) }
	res.ClientCPU = perRec(cpu)
	res.ServerCPU = serverCPU(res.Processes, cpu0, cpu1, perRec)
	return res, nil
}
