package testbed

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
	// UplinkIface is a leaf namespace's end of its uplink to the spine
	// (Config.Leaves), a port of the leaf's bridge.
	UplinkIface = "uplink"
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
		n++
	}
	if cfg.HostRate != "" {
		st.HostRate, st.HostRateBits, st.HostBurst = cfg.HostRate, cfg.hostRateBits, cfg.hostBurst
		st.HostPeakRateBits = cfg.hostPeakBits
	}
	if cfg.peakBits > 0 || cfg.hostPeakBits > 0 || cfg.uplinkPeakBits > 0 {
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
	if cfg.Switches > 1 {
		for i := range cfg.Switches {
			st.SwitchAddrs = append(st.SwitchAddrs, netip.AddrPortFrom(st.Switch.Addr, uint16(switchPort(i))).String())
		}
	}
	// The leaves of a tree: a namespace each, addressed after the other
	// nodes, its hosts' ports on its bridge.
	for i := range cfg.Leaves {
		name := "l" + strconv.Itoa(i)
		addr := nodeAddr(subnet, n)
		n++
		l := Node{Name: name, NS: nsName(p, name), Addr: addr, Iface: UplinkIface, Port: name,
			Service: netip.AddrPortFrom(addr, SwitchPort).String()}
		st.Leaves = append(st.Leaves, l)
		st.LeafAddrs = append(st.LeafAddrs, l.Service)
	}
	for i := range st.Hosts {
		if cfg.Leaves > 0 {
			l := st.Leaves[i*cfg.Leaves/len(st.Hosts)]
			st.Hosts[i].Leaf, st.Hosts[i].PortNS = l.Service, l.NS
		}
	}
	if cfg.Leaves > 0 {
		st.UplinkRate, st.UplinkRateBits, st.UplinkBurst = cfg.UplinkRate, cfg.uplinkRateBits, cfg.uplinkBurst
		if st.UplinkRate == "" {
			st.UplinkRate = cfg.Rate
		}
		st.UplinkPeakRateBits = cfg.uplinkPeakBits
		if cfg.PriorityQueues {
			st.UplinkQueuePackets = queuePackets(st.UplinkRateBits, st.UplinkBurst, cfg.Latency, cfg.MTU)
		}
	}
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
	for i := range st.Leaves {
		st.Leaves[i].Present = true
	}
	return st, nil
}

// buildNetwork creates the node namespaces, the bridges, the veth pairs,
// the addresses and the tbf qdiscs.
func buildNetwork(ctx context.Context, st *State, nodes []Node, bits int) error {
	for _, n := range append(slices.Clone(st.Leaves), nodes...) {
		if _, err := command(ctx, "", "ip", "netns", "add", n.NS); err != nil {
			return fmt.Errorf("testbed: %w", err)
		}
	}
	mtu := st.MTU
	// bridge is the commands that make a namespace's bridge, with addr.
	bridge := func(addr netip.Addr) []string {
		return []string{
			"link set lo up",
			fmt.Sprintf("link add %s mtu %d type bridge stp_state 0 forward_delay 0", bridgeName, mtu),
			fmt.Sprintf("link set %s addrgenmode none", bridgeName),
			fmt.Sprintf("addr add %v/%d dev %s", addr, bits, bridgeName),
		}
	}
	// port is the commands that make a veth pair from a bridge's port to
	// the interface peer in namespace ns.
	port := func(name, peer, ns string) []string {
		return []string{
			fmt.Sprintf("link add %s mtu %d type veth peer name %s mtu %d netns %s", name, mtu, peer, mtu, ns),
			fmt.Sprintf("link set %s addrgenmode none", name),
			fmt.Sprintf("link set %s master %s", name, bridgeName),
			fmt.Sprintf("link set %s up", name),
		}
	}
	cmds := map[string][]string{st.Switch.NS: bridge(st.Switch.Addr)}
	order := []string{st.Switch.NS}
	for _, l := range st.Leaves {
		cmds[st.Switch.NS] = append(cmds[st.Switch.NS], port(l.Port, l.Iface, l.NS)...)
	}
	for _, l := range st.Leaves {
		// The leaf's end of the uplink exists once the spine made it.
		cmds[l.NS] = append(bridge(l.Addr),
			fmt.Sprintf("link set %s addrgenmode none", l.Iface),
			fmt.Sprintf("link set %s master %s", l.Iface, bridgeName),
			fmt.Sprintf("link set %s up", l.Iface))
		order = append(order, l.NS)
	}
	for _, n := range nodes {
		ns := portNS(st, n)
		cmds[ns] = append(cmds[ns], port(n.Port, nodeIface, n.NS)...)
	}
	for _, ns := range order {
		if err := batch(ctx, "ip", ns, append(cmds[ns], fmt.Sprintf("link set %s up", bridgeName))); err != nil {
			return err
		}
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
	// Both directions of every link: the bridge-side end's egress
	// (towards the node, or down a leaf's uplink) and the other end's.
	tcs := make(map[string][]string)
	shape := func(portNS, portDev, farNS, farDev string, s linkShape) error {
		tbf := fmt.Sprintf("root handle 1: tbf rate %dbit burst %d latency %dus", s.rate, s.burst, st.Latency.Microseconds())
		if s.peak > 0 {
			tbf += fmt.Sprintf(" peakrate %dbit mtu %d", s.peak, st.PeakBucket)
		}
		// With priority queues, a pfifo_fast replaces the tbf's byte
		// fifo: it sorts by skb priority, which the kernel derives from
		// the TOS a sender sets (IPTOS_LOWDELAY: band 0), and holds
		// txqueuelen packets per band, set before it is created.
		queue := func(dev string) []string {
			q := []string{fmt.Sprintf("qdisc replace dev %s %s", dev, tbf)}
			if s.qlen > 0 {
				q = append(q, fmt.Sprintf("qdisc add dev %s parent 1:1 handle 10: pfifo_fast", dev))
			}
			return q
		}
		if s.qlen > 0 {
			for _, e := range [][2]string{{portNS, portDev}, {farNS, farDev}} {
				if err := batch(ctx, "ip", e[0], []string{fmt.Sprintf("link set dev %s txqueuelen %d", e[1], s.qlen)}); err != nil {
					return err
				}
			}
		}
		tcs[portNS] = append(tcs[portNS], queue(portDev)...)
		return batch(ctx, "tc", farNS, queue(farDev))
	}
	for _, n := range nodes {
		sh := linkShape{st.RateBits, st.Burst, st.PeakRateBits, st.QueuePackets}
		if st.HostRateBits > 0 && slices.ContainsFunc(st.Hosts, func(h Node) bool { return h.NS == n.NS }) {
			sh = linkShape{st.HostRateBits, st.HostBurst, st.HostPeakRateBits, st.HostQueuePackets}
		}
		if err := shape(portNS(st, n), n.Port, n.NS, nodeIface, sh); err != nil {
			return err
		}
	}
	for _, l := range st.Leaves {
		sh := linkShape{st.UplinkRateBits, st.UplinkBurst, st.UplinkPeakRateBits, st.UplinkQueuePackets}
		if err := shape(st.Switch.NS, l.Port, l.NS, l.Iface, sh); err != nil {
			return err
		}
	}
	for _, ns := range order {
		if err := batch(ctx, "tc", ns, tcs[ns]); err != nil {
			return err
		}
	}
	return nil
}

// linkShape is a link's tbf: rate and peak rate in bits per second,
// bucket in bytes, and priority bands of qlen packets (0: none).
type linkShape struct {
	rate  uint64
	burst int
	peak  uint64
	qlen  int
}

// portNS is the namespace holding node n's port: its leaf's, or the
// switch namespace.
func portNS(st *State, n Node) string {
	if n.PortNS != "" {
		return n.PortNS
	}
	return st.Switch.NS
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
