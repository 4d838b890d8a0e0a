package testbed

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ndma/ndma/secure"
)

// Timeouts of the testbed's own steps.
const (
	// readyTimeout bounds how long Up waits for a daemon to bind its
	// port.
	readyTimeout = 10 * time.Second
	// cleanupTimeout bounds the Down that Up runs after a failure.
	cleanupTimeout = 30 * time.Second
	// statusTimeout bounds the `ip netns list` of Status.
	statusTimeout = 10 * time.Second
)

// Interfaces: the bridge in the switch namespace and each node's end of
// its veth pair.
const (
	bridgeName = "br0"
	nodeIface  = "eth0"
)

// Check reports whether a testbed can be built here, and if not, why: an
// error wrapping ErrNotRoot, ErrNoIproute2 or ErrNoNetns with the detail.
// It creates and removes a probe namespace, "<prefix>-probe<pid>", and
// tries a veth pair, a bridge and a tbf qdisc inside it.
func Check(ctx context.Context, prefix string) error {
	if err := ValidatePrefix(prefix); err != nil {
		return fmt.Errorf("testbed: prefix: %w", err)
	}
	if err := checkTools(); err != nil {
		return err
	}
	probe := nsName(prefix, "probe"+strconv.Itoa(os.Getpid()))
	if _, err := command(ctx, "", "ip", "netns", "add", probe); err != nil {
		return fmt.Errorf("testbed: %w: %w", ErrNoNetns, err)
	}
	// Everything a testbed needs, tried inside the probe: a veth pair, a
	// bridge and a tbf qdisc (a kernel without those modules fails here,
	// with the reason, instead of halfway through Up).
	var useErr error
	for _, args := range [][]string{
		{"ip", "-n", probe, "link", "set", "lo", "up"},
		{"ip", "-n", probe, "link", "add", "pa", "type", "veth", "peer", "name", "pb"},
		{"ip", "-n", probe, "link", "add", "pbr", "type", "bridge"},
		{"tc", "-n", probe, "qdisc", "add", "dev", "pa", "root", "tbf", "rate", "100mbit", "burst", "32kb", "latency", "20ms"},
		{"ip", "netns", "exec", probe, "true"},
	} {
		if _, useErr = command(ctx, "", args[0], args[1:]...); useErr != nil {
			break
		}
	}
	if _, err := command(ctx, "", "ip", "netns", "del", probe); err != nil {
		return fmt.Errorf("testbed: %w: %w", ErrNoNetns, err)
	}
	if useErr != nil {
		return fmt.Errorf("testbed: %w: %w", ErrNoNetns, useErr)
	}
	return nil
}

// geteuid is os.Geteuid; tests replace it.
var geteuid = os.Geteuid

// checkTools reports whether the process is root and ip and tc are
// installed.
func checkTools() error {
	if uid := geteuid(); uid != 0 {
		return fmt.Errorf("testbed: %w to create namespaces, links and qdiscs (effective uid %d): run it with sudo", ErrNotRoot, uid)
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("testbed: %w: %s is not in $PATH (install the iproute2 package)", ErrNoIproute2, tool)
		}
	}
	return nil
}

// Up builds the testbed cfg describes and starts its daemons, and returns
// its state, also written to the state file. It refuses (ErrInUse) when a
// testbed with the prefix exists, even half of one. If a step fails, it
// removes what it built (as Down does) before returning the error. The
// daemons outlive the calling process: Down ends them.
func Up(ctx context.Context, cfg Config) (*State, error) {
	subnet, rate, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if err := Check(ctx, cfg.Prefix); err != nil {
		return nil, err
	}
	p := cfg.Prefix
	hint := fmt.Sprintf("run `ndma testbed down --prefix %s` first, or choose another prefix", p)
	statePath := filepath.Join(stateDir(cfg.StateDir, p), stateFileName)
	if _, err := os.Stat(statePath); err == nil {
		return nil, fmt.Errorf("testbed: %w: %q (its state file %s exists): %s", ErrInUse, p, statePath, hint)
	}
	existing, err := listNamespaces(ctx, p)
	if err != nil {
		return nil, err
	}
	if len(existing) > 0 {
		return nil, fmt.Errorf("testbed: %w: %q (namespaces %s exist): %s", ErrInUse, p, strings.Join(existing, ", "), hint)
	}
	// The switch namespace is the lock: of two Ups racing for one
	// prefix, only one creates it, and the other must not clean up.
	sw := nsName(p, "sw")
	if _, err := command(ctx, "", "ip", "netns", "add", sw); err != nil {
		if now, _ := listNamespaces(ctx, p); slices.Contains(now, sw) {
			return nil, fmt.Errorf("testbed: %w: %q (namespace %s exists): %s", ErrInUse, p, sw, hint)
		}
		return nil, fmt.Errorf("testbed: %w", err)
	}
	st, err := build(ctx, &cfg, subnet, rate)
	if err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if derr := DownAt(cctx, cfg.StateDir, p); derr != nil {
			err = errors.Join(err, fmt.Errorf("cleaning up after the failure: %w", derr))
		}
		return nil, err
	}
	return st, nil
}

// build does Up's work after the switch namespace exists.
func build(ctx context.Context, cfg *Config, subnet netip.Prefix, rate uint64) (*State, error) {
	p := cfg.Prefix
	dir := stateDir(cfg.StateDir, p)
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("testbed: state directory: %w", err)
	}
	// A directory without a state file is what a crashed Up or a
	// crashed Down leaves: logs of a testbed that is gone.
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("testbed: state directory: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("testbed: state directory: %w", err)
	}
	st := &State{
		Prefix:       p,
		Dir:          dir,
		Created:      time.Now().UTC().Truncate(time.Second),
		Subnet:       subnet.String(),
		Rate:         cfg.Rate,
		RateBits:     rate,
		Burst:        cfg.Burst,
		PeakRateBits: cfg.peakBits,
		Latency:      cfg.Latency,
		MTU:          cfg.MTU,
		DatagramMTU:  datagramMTU(cfg.MTU),
		GoMaxProcs:   cfg.GoMaxProcs,
		Switch:       Node{Name: "sw", NS: nsName(p, "sw"), Addr: nodeAddr(subnet, 1), Iface: bridgeName},
	}
	n := 2
	for i := range cfg.Hosts {
		name := "h" + strconv.Itoa(i)
		st.Hosts = append(st.Hosts, Node{Name: name, NS: nsName(p, name), Addr: nodeAddr(subnet, n), Iface: nodeIface, Port: name})
		n++
	}
	for j := range cfg.MemNodes {
		name := "m" + strconv.Itoa(j)
		st.MemNodes = append(st.MemNodes, Node{
			Name: name, NS: nsName(p, name), Addr: nodeAddr(subnet, n), Iface: nodeIface, Port: name,
			Service: netip.AddrPortFrom(nodeAddr(subnet, n), MemdPort).String(),
		})
		n++
	}
	for j := range cfg.StorNodes {
		name := "s" + strconv.Itoa(j)
		st.StorNodes = append(st.StorNodes, Node{
			Name: name, NS: nsName(p, name), Addr: nodeAddr(subnet, n), Iface: nodeIface, Port: name,
			Service: netip.AddrPortFrom(nodeAddr(subnet, n), StordPort).String(),
		})
		n++
	}
	if cfg.Gateway {
		st.Gateways = append(st.Gateways, Node{
			Name: "g0", NS: nsName(p, "g0"), Addr: nodeAddr(subnet, n), Iface: nodeIface, Port: "g0",
			Service: netip.AddrPortFrom(nodeAddr(subnet, n), StorgwPort).String(),
		})
	}
	if cfg.HostRate != "" {
		st.HostRate, st.HostRateBits, st.HostBurst = cfg.HostRate, cfg.hostRateBits, cfg.hostBurst
		st.HostPeakRateBits = cfg.hostPeakBits
	}
	if cfg.peakBits > 0 || cfg.hostPeakBits > 0 {
		st.PeakBucket = peakBucket(cfg.MTU)
	}
	if cfg.PriorityQueues {
		st.QueuePackets = queuePackets(rate, cfg.Burst, cfg.Latency, cfg.MTU)
		if st.HostRate != "" {
			st.HostQueuePackets = queuePackets(st.HostRateBits, st.HostBurst, cfg.Latency, cfg.MTU)
		}
	}
	st.SwitchAddr = netip.AddrPortFrom(st.Switch.Addr, SwitchPort).String()
	st.Switch.Service = st.SwitchAddr
	if err := st.save(); err != nil {
		return nil, fmt.Errorf("testbed: state file: %w", err)
	}
	nodes := append(slices.Clone(st.Hosts), st.MemNodes...)
	nodes = append(nodes, st.StorNodes...)
	nodes = append(nodes, st.Gateways...)
	if err := buildNetwork(ctx, st, nodes, subnet.Bits()); err != nil {
		return nil, err
	}
	if err := startDaemons(ctx, cfg, st); err != nil {
		return nil, err
	}
	for i := range st.Daemons {
		st.Daemons[i].Alive = alive(st.Daemons[i].PID, st.Daemons[i].Start)
	}
	st.Switch.Present = true
	for i := range st.Hosts {
		st.Hosts[i].Present = true
	}
	for i := range st.MemNodes {
		st.MemNodes[i].Present = true
	}
	for i := range st.StorNodes {
		st.StorNodes[i].Present = true
	}
	for i := range st.Gateways {
		st.Gateways[i].Present = true
	}
	return st, nil
}

// buildNetwork creates the node namespaces, the bridge, the veth pairs,
// the addresses and the tbf qdiscs.
func buildNetwork(ctx context.Context, st *State, nodes []Node, bits int) error {
	for _, n := range nodes {
		if _, err := command(ctx, "", "ip", "netns", "add", n.NS); err != nil {
			return fmt.Errorf("testbed: %w", err)
		}
	}
	mtu := st.MTU
	sw := []string{
		"link set lo up",
		fmt.Sprintf("link add %s mtu %d type bridge stp_state 0 forward_delay 0", bridgeName, mtu),
		fmt.Sprintf("link set %s addrgenmode none", bridgeName),
		fmt.Sprintf("addr add %v/%d dev %s", st.Switch.Addr, bits, bridgeName),
	}
	for _, n := range nodes {
		sw = append(sw,
			fmt.Sprintf("link add %s mtu %d type veth peer name %s mtu %d netns %s", n.Port, mtu, nodeIface, mtu, n.NS),
			fmt.Sprintf("link set %s addrgenmode none", n.Port),
			fmt.Sprintf("link set %s master %s", n.Port, bridgeName),
			fmt.Sprintf("link set %s up", n.Port),
		)
	}
	sw = append(sw, fmt.Sprintf("link set %s up", bridgeName))
	if err := batch(ctx, "ip", st.Switch.NS, sw); err != nil {
		return err
	}
	for _, n := range nodes {
		if err := batch(ctx, "ip", n.NS, []string{
			"link set lo up",
			fmt.Sprintf("link set %s addrgenmode none", nodeIface),
			fmt.Sprintf("addr add %v/%d dev %s", n.Addr, bits, nodeIface),
			fmt.Sprintf("link set %s up", nodeIface),
		}); err != nil {
			return err
		}
	}
	// Both directions of every link: the switch-side end's egress
	// (towards the node) and the node-side end's egress (towards the
	// switch).
	var swq []string
	for _, n := range nodes {
		rate, burst, peak, qlen := st.RateBits, st.Burst, st.PeakRateBits, st.QueuePackets
		if st.HostRateBits > 0 && slices.ContainsFunc(st.Hosts, func(h Node) bool { return h.NS == n.NS }) {
			rate, burst, peak, qlen = st.HostRateBits, st.HostBurst, st.HostPeakRateBits, st.HostQueuePackets
		}
		tbf := fmt.Sprintf("root handle 1: tbf rate %dbit burst %d latency %dus", rate, burst, st.Latency.Microseconds())
		if peak > 0 {
			tbf += fmt.Sprintf(" peakrate %dbit mtu %d", peak, st.PeakBucket)
		}
		// With priority queues, a pfifo_fast replaces the tbf's byte
		// fifo: it sorts by skb priority, which the kernel derives from
		// the TOS a sender sets (IPTOS_LOWDELAY: band 0), and holds
		// txqueuelen packets per band, set before it is created.
		queue := func(dev string) []string {
			q := []string{fmt.Sprintf("qdisc replace dev %s %s", dev, tbf)}
			if qlen > 0 {
				q = append(q, fmt.Sprintf("qdisc add dev %s parent 1:1 handle 10: pfifo_fast", dev))
			}
			return q
		}
		if qlen > 0 {
			txq := func(dev string) []string {
				return []string{fmt.Sprintf("link set dev %s txqueuelen %d", dev, qlen)}
			}
			if err := batch(ctx, "ip", st.Switch.NS, txq(n.Port)); err != nil {
				return err
			}
			if err := batch(ctx, "ip", n.NS, txq(nodeIface)); err != nil {
				return err
			}
		}
		swq = append(swq, queue(n.Port)...)
		if err := batch(ctx, "tc", n.NS, queue(nodeIface)); err != nil {
			return err
		}
	}
	return batch(ctx, "tc", st.Switch.NS, swq)
}

// startDaemons starts `ndma switch` in the switch namespace and `ndma
// memd` in each memory-node namespace, and waits until each has bound its
// port.
func startDaemons(ctx context.Context, cfg *Config, st *State) error {
	token := randomHex(16)
	st.Token = token
	tokenFile := filepath.Join(st.Dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		return fmt.Errorf("testbed: token file: %w", err)
	}
	if !cfg.NoCredentials {
		if err := issueCredentials(st); err != nil {
			return err
		}
	}
	// credential is the --credential flag of a daemon of node n, or
	// --insecure in a testbed without credentials.
	credential := func(n *Node) []string {
		if n.Credential == "" {
			return []string{"--insecure"}
		}
		return []string{"--credential", n.Credential}
	}
	mtu := strconv.Itoa(st.DatagramMTU)
	type started struct {
		exited <-chan error
		port   int
	}
	var waits []started
	start := func(role, ns, log string, port int, args ...string) error {
		d, exited, err := startDaemon(cfg.Binary, role, ns, filepath.Join(st.Dir, log), st.GoMaxProcs, args)
		if err != nil {
			return err
		}
		st.Daemons = append(st.Daemons, d)
		waits = append(waits, started{exited, port})
		// Saved at once, so that a crash of Up leaves the pid to Down.
		if err := st.save(); err != nil {
			return fmt.Errorf("testbed: state file: %w", err)
		}
		return nil
	}
	if err := start("switch", st.Switch.NS, "switch.log", SwitchPort,
		append([]string{"switch", "--listen", st.SwitchAddr, "--token-file", tokenFile, "--mtu", mtu}, credential(&st.Switch)...)...); err != nil {
		return err
	}
	for i := range st.MemNodes {
		m := &st.MemNodes[i]
		// The node's region key stays in its key file (mode 0600): the
		// region is lent to the pool and reachable only through it, so
		// no client needs the key, and nothing prints it.
		keyFile := filepath.Join(st.Dir, m.Name+".keys")
		line := fmt.Sprintf("0x%016x %d rwav\n", randomKey(), cfg.MemSize)
		if err := os.WriteFile(keyFile, []byte(line), 0o600); err != nil {
			return fmt.Errorf("testbed: key file: %w", err)
		}
		if err := start("memd", m.NS, m.Name+".log", MemdPort,
			append([]string{"memd", "--listen", m.Service, "--key-file", keyFile, "--mtu", mtu,
				"--switch", st.SwitchAddr, "--token-file", tokenFile}, credential(m)...)...); err != nil {
			return err
		}
	}
	for i := range st.StorNodes {
		sn := &st.StorNodes[i]
		if err := start("stord", sn.NS, sn.Name+".log", StordPort,
			append([]string{"stord", "--listen", sn.Service, "--dir", filepath.Join(st.Dir, sn.Name+".d"), "--id", strconv.Itoa(i), "--mtu", mtu,
				"--switch", st.SwitchAddr, "--token-file", tokenFile}, credential(sn)...)...); err != nil {
			return err
		}
	}
	for i := range st.Gateways {
		g := &st.Gateways[i]
		if err := start("storgw", g.NS, g.Name+".log", StorgwPort,
			append([]string{"storgw", "--listen", g.Service, "--mtu", mtu, "--switch", st.SwitchAddr, "--token-file", tokenFile}, credential(g)...)...); err != nil {
			return err
		}
	}
	for i, w := range waits {
		if err := waitReady(ctx, st.Daemons[i], w.exited, w.port); err != nil {
			return err
		}
	}
	return st.save()
}

// issueCredentials draws the testbed's fabric secret, writes it to the
// state directory's "secret" file, and issues under it a credential for
// every node, each in a file of its own named after the node ("sw.cred",
// "h0.cred", "m0.cred"): role switch for the switch, memory-node for each
// memory node, member for each host, a member credential of the storage
// service's scope for each storage node and gateway, and one of role client
// ("client.cred") for tools run outside Run. Every file is readable by
// its owner alone (mode 0600).
func issueCredentials(st *State) error {
	secret, err := secure.NewAuthoritySecret(rand.Reader)
	if err != nil {
		return fmt.Errorf("testbed: fabric secret: %w", err)
	}
	st.Secret = filepath.Join(st.Dir, "secret")
	err = os.WriteFile(st.Secret, secret, 0o600)
	a, aerr := secure.ParseAuthoritySecret(secret)
	clear(secret)
	if err != nil {
		return fmt.Errorf("testbed: secret file: %w", err)
	}
	if err = aerr; err != nil {
		return fmt.Errorf("testbed: fabric secret: %w", err)
	}
	issue := func(role secure.Role, name string) (string, error) {
		path := filepath.Join(st.Dir, name+".cred")
		return path, writeCredential(a, role, name, path)
	}
	// A storage node's or gateway's credential is a server's of the
	// storage service's scope (stor/s0, stor/g0; the daemons serve the
	// default service "stor"): the switch lets only those serve the
	// service and its sets (fabric.ServiceMay).
	issueServer := func(n *Node) (string, error) {
		path := filepath.Join(st.Dir, n.Name+".cred")
		return path, writeCredential(a, secure.RoleMember, "stor/"+n.Name, path)
	}
	if st.Switch.Credential, err = issue(secure.RoleSwitch, st.Switch.Name); err != nil {
		return err
	}
	for i := range st.MemNodes {
		if st.MemNodes[i].Credential, err = issue(secure.RoleMemoryNode, st.MemNodes[i].Name); err != nil {
			return err
		}
	}
	for i := range st.Hosts {
		if st.Hosts[i].Credential, err = issue(secure.RoleMember, st.Hosts[i].Name); err != nil {
			return err
		}
	}
	// Storage nodes and the gateway register services and join writers'
	// groups: role member.
	for _, ns := range [][]Node{st.StorNodes, st.Gateways} {
		for i := range ns {
			if ns[i].Credential, err = issueServer(&ns[i]); err != nil {
				return err
			}
		}
	}
	st.ClientCredential, err = issue(secure.RoleClient, "client")
	return err
}

// startDaemon starts binary with args in namespace ns, in a process group
// of its own (so that the terminal's Ctrl-C does not reach it), with stdout
// and stderr going to logPath and GOMAXPROCS=gomaxprocs when that is not 0.
// The channel receives its exit.
//
// It stays in the caller's session, with the ranks `testbed run` starts
// from it: with the kernel's autogroup scheduling (sched_autogroup_enabled,
// the default) a session of its own (setsid) puts a daemon in a scheduling
// group of its own, and the switch then preempted the ranks at every
// packet it received instead of taking them in batches: on 8 hosts and 2
// vCPUs it used 0.81-1.01 s of CPU per 16 MiB in-network Bcast instead of
// 0.50-0.68 s, and the Bcast took 1.47-1.76 s instead of 1.42-1.63 s
// (State.SchedulingApart tells when Run's caller is in another group).
func startDaemon(binary, role, ns, logPath string, gomaxprocs int, args []string) (Daemon, <-chan error, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return Daemon{}, nil, fmt.Errorf("testbed: %s log: %w", role, err)
	}
	defer logf.Close()
	argv := append([]string{"netns", "exec", ns, binary}, args...)
	cmd := exec.Command("ip", argv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if gomaxprocs > 0 {
		cmd.Env = append(os.Environ(), "GOMAXPROCS="+strconv.Itoa(gomaxprocs))
	}
	if err := cmd.Start(); err != nil {
		return Daemon{}, nil, fmt.Errorf("testbed: starting %s in %s: %w", role, ns, err)
	}
	// `ip netns exec` execs the binary: the pid and start time are the
	// daemon's.
	d := Daemon{Role: role, NS: ns, PID: cmd.Process.Pid, Args: append([]string{binary}, args...), Log: logPath, Start: processStart(cmd.Process.Pid)}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return d, exited, nil
}

// waitReady waits until d has bound its UDP port, d exits, readyTimeout
// passes, or ctx ends.
func waitReady(ctx context.Context, d Daemon, exited <-chan error, port int) error {
	deadline := time.NewTimer(readyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		if udpBound(d.PID, port) {
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("testbed: %s in %s exited while starting (%v): %s", d.Role, d.NS, err, logTail(d.Log))
		case <-deadline.C:
			return fmt.Errorf("testbed: %s in %s did not bind UDP port %d within %v: %s", d.Role, d.NS, port, readyTimeout, logTail(d.Log))
		case <-ctx.Done():
			return fmt.Errorf("testbed: waiting for %s in %s: %w", d.Role, d.NS, ctx.Err())
		case <-tick.C:
		}
	}
}

// logTail describes the end of a daemon's log for an error message.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("log %s: %v", path, err)
	}
	b = bytes.TrimSpace(b)
	if len(b) > 1000 {
		b = b[len(b)-1000:]
	}
	if len(b) == 0 {
		return fmt.Sprintf("log %s is empty", path)
	}
	return fmt.Sprintf("log %s ends:\n%s", path, b)
}

// Down removes the testbed with this prefix whose state is in
// DefaultStateDir(); see DownAt.
func Down(ctx context.Context, prefix string) error {
	return DownAt(ctx, DefaultStateDir(), prefix)
}

// DownAt removes the testbed with this prefix whose state lives under
// root (Config.StateDir): it ends the daemons the state file lists (by pid,
// checking their start time) and every process in a namespace named with
// the prefix (`ip netns pids`), with SIGTERM and, after a grace period,
// SIGKILL; it deletes every such namespace (`ip netns list`), which takes
// the bridge and veth pairs with it, and removes the state directory. So
// it cleans up after a crash and without the state file, and touches
// nothing whose name lacks the prefix. It is idempotent: with nothing to
// remove it does nothing and returns nil.
func DownAt(ctx context.Context, root, prefix string) error {
	if err := ValidatePrefix(prefix); err != nil {
		return fmt.Errorf("testbed: prefix: %w", err)
	}
	if err := checkTools(); err != nil {
		return err
	}
	var errs []error
	pids := make(map[int]uint64)
	st, err := loadState(root, prefix)
	switch {
	case err == nil:
		for _, d := range st.Daemons {
			pids[d.PID] = d.Start
		}
	case !errors.Is(err, fs.ErrNotExist):
		// A damaged state file: the scan below still finds the
		// namespaces and the processes in them.
		errs = append(errs, fmt.Errorf("testbed: state file: %w", err))
	}
	names, err := listNamespaces(ctx, prefix)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, ns := range names {
		nsPids, err := netnsPids(ctx, ns)
		if err != nil {
			errs = append(errs, err)
		}
		for _, pid := range nsPids {
			if _, ok := pids[pid]; !ok {
				pids[pid] = 0
			}
		}
	}
	if err := killProcesses(ctx, pids); err != nil {
		errs = append(errs, fmt.Errorf("testbed: %w", err))
	}
	// Hosts first, the switch last: a half-removed testbed still has its
	// switch namespace, which Up treats as "in use".
	slices.SortFunc(names, func(a, b string) int {
		return boolCmp(strings.HasSuffix(a, "-sw"), strings.HasSuffix(b, "-sw"))
	})
	for _, ns := range names {
		if _, err := command(ctx, "", "ip", "netns", "del", ns); err != nil {
			if still, lerr := listNamespaces(ctx, prefix); lerr != nil || slices.Contains(still, ns) {
				errs = append(errs, fmt.Errorf("testbed: %w", err))
			}
		}
	}
	if len(errs) == 0 {
		// Kept when something failed: the state file names what is
		// left for the next Down.
		if err := os.RemoveAll(stateDir(root, prefix)); err != nil {
			errs = append(errs, fmt.Errorf("testbed: state directory: %w", err))
		}
	}
	return errors.Join(errs...)
}

// boolCmp orders false before true.
func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	default:
		return -1
	}
}

// Status reports the testbed with this prefix whose state is in
// DefaultStateDir(); see StatusAt.
func Status(prefix string) (*State, error) {
	return StatusAt(DefaultStateDir(), prefix)
}

// StatusAt reports the testbed with this prefix whose state lives under
// root: its state file, with Present set on the namespaces that exist,
// Alive on the daemons that run, and Stray listing namespaces named with
// the prefix that the state does not list. Without a state file but with
// such namespaces (a crash), the State holds only Prefix, Dir and Stray.
// With neither, the error wraps ErrNotFound.
func StatusAt(root, prefix string) (*State, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return nil, fmt.Errorf("testbed: prefix: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	defer cancel()
	names, err := listNamespaces(ctx, prefix)
	if err != nil {
		return nil, err
	}
	st, err := loadState(root, prefix)
	if errors.Is(err, fs.ErrNotExist) {
		if len(names) == 0 {
			return nil, fmt.Errorf("testbed: %w: %q (no state file in %s and no namespaces named %s-…)", ErrNotFound, prefix, stateDir(root, prefix), prefix)
		}
		return &State{Prefix: prefix, Dir: stateDir(root, prefix), Stray: names}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("testbed: state file: %w", err)
	}
	exists := make(map[string]bool, len(names))
	for _, n := range names {
		exists[n] = true
	}
	known := make(map[string]bool)
	mark := func(n *Node) {
		n.Present = exists[n.NS]
		known[n.NS] = true
	}
	mark(&st.Switch)
	for i := range st.Hosts {
		mark(&st.Hosts[i])
	}
	for i := range st.MemNodes {
		mark(&st.MemNodes[i])
	}
	for i := range st.StorNodes {
		mark(&st.StorNodes[i])
	}
	for i := range st.Gateways {
		mark(&st.Gateways[i])
	}
	st.Stray = nil
	for _, n := range names {
		if !known[n] {
			st.Stray = append(st.Stray, n)
		}
	}
	for i := range st.Daemons {
		st.Daemons[i].Alive = alive(st.Daemons[i].PID, st.Daemons[i].Start)
	}
	return st, nil
}

// listNamespaces returns the network namespaces named with prefix
// (ownedNS), sorted.
func listNamespaces(ctx context.Context, prefix string) ([]string, error) {
	out, err := command(ctx, "", "ip", "netns", "list")
	if err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	var names []string
	for line := range strings.Lines(out) {
		// "name" or "name (id: 3)".
		f := strings.Fields(line)
		if len(f) > 0 && ownedNS(prefix, f[0]) {
			names = append(names, f[0])
		}
	}
	slices.Sort(names)
	return names, nil
}

// netnsPids returns the processes in namespace ns.
func netnsPids(ctx context.Context, ns string) ([]int, error) {
	out, err := command(ctx, "", "ip", "netns", "pids", ns)
	if err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	var pids []int
	for _, f := range strings.Fields(out) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// CommandError is a failed ip or tc command.
type CommandError struct {
	Args   []string // the command line
	Input  string   // the batch it read, if any
	Output string   // what it printed
	Err    error    // how it failed (usually an *exec.ExitError)
}

func (e *CommandError) Error() string {
	msg := strings.Join(e.Args, " ")
	if e.Input != "" {
		msg += " <<" + strconv.Quote(e.Input)
	}
	if out := strings.TrimSpace(e.Output); out != "" {
		return msg + ": " + out
	}
	return fmt.Sprintf("%s: %v", msg, e.Err)
}

// Unwrap returns the cause.
func (e *CommandError) Unwrap() error { return e.Err }

// command runs name with args, and stdin as its input if not empty, and
// returns its combined output.
func command(ctx context.Context, stdin, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), &CommandError{Args: append([]string{name}, args...), Input: stdin, Output: string(out), Err: err}
	}
	return string(out), nil
}

// batch runs lines through `tool -n ns -batch -` (tool is ip or tc).
func batch(ctx context.Context, tool, ns string, lines []string) error {
	if len(lines) == 0 {
		return nil
	}
	if _, err := command(ctx, strings.Join(lines, "\n")+"\n", tool, "-n", ns, "-batch", "-"); err != nil {
		return fmt.Errorf("testbed: %w", err)
	}
	return nil
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// randomKey returns a random region key; never zero (memd refuses it).
func randomKey() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		if k := binary.LittleEndian.Uint64(b[:]); k != 0 {
			return k
		}
	}
}
