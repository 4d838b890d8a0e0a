package testbed

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Errors that say why a testbed cannot be built, used, or found; the
// errors returned wrap them (use errors.Is).
var (
	// ErrUnsupported: the operating system has no network namespaces.
	ErrUnsupported = errors.New("the testbed needs Linux (network namespaces)")
	// ErrNotRoot: creating namespaces, links and qdiscs needs root.
	ErrNotRoot = errors.New("the testbed needs root")
	// ErrNoIproute2: ip or tc is not installed.
	ErrNoIproute2 = errors.New("the testbed needs iproute2 (ip and tc)")
	// ErrNoNetns: network namespaces cannot be created here (a container
	// without CAP_SYS_ADMIN, a kernel without CONFIG_NET_NS, …).
	ErrNoNetns = errors.New("network namespaces are unavailable")
	// ErrInUse: a testbed with this prefix exists already.
	ErrInUse = errors.New("testbed prefix in use")
	// ErrNotFound: no testbed with this prefix exists.
	ErrNotFound = errors.New("no testbed with this prefix")
)

// State describes a running testbed. Up returns it and writes it, as JSON,
// to the state file; Status reads it back.
type State struct {
	Prefix  string    `json:"prefix"`
	Dir     string    `json:"dir"` // the state directory: state file, logs, token
	Created time.Time `json:"created"`

	Subnet   string `json:"subnet"`
	Rate     string `json:"rate"`      // each link, each direction, in tc's syntax
	RateBits uint64 `json:"rate_bits"` // Rate in bits per second
	Burst    int    `json:"burst"`     // token bucket, in bytes
	// HostRate, HostRateBits and HostBurst are the host links' own rate
	// and bucket when Config.HostRate set one (empty and zero otherwise).
	HostRate     string `json:"host_rate,omitempty"`
	HostRateBits uint64 `json:"host_rate_bits,omitempty"`
	HostBurst    int    `json:"host_burst,omitempty"`
	// UplinkRate, UplinkRateBits, UplinkBurst and UplinkPeakRateBits are
	// the uplinks' (between a leaf's namespace and the spine's) when the
	// fabric has Leaves; UplinkQueuePackets their priority bands' length.
	UplinkRate         string `json:"uplink_rate,omitempty"`
	UplinkRateBits     uint64 `json:"uplink_rate_bits,omitempty"`
	UplinkBurst        int    `json:"uplink_burst,omitempty"`
	UplinkPeakRateBits uint64 `json:"uplink_peak_rate_bits,omitempty"`
	UplinkQueuePackets int    `json:"uplink_queue_packets,omitempty"`
	// PeakRateBits and HostPeakRateBits are the links' and the host
	// links' peak rates (Config.PeakRate) in bits per second, PeakBucket
	// the peak bucket in bytes; zero when none.
	PeakRateBits     uint64        `json:"peak_rate_bits,omitempty"`
	HostPeakRateBits uint64        `json:"host_peak_rate_bits,omitempty"`
	PeakBucket       int           `json:"peak_bucket,omitempty"`
	Latency          time.Duration `json:"latency"` // tbf queue bound, in nanoseconds
	// QueuePackets is each priority band's length, in packets, when
	// Config.PriorityQueues set them up (the interfaces' txqueuelen);
	// zero for one first-in first-out queue per link. HostQueuePackets
	// is the host links' when HostRate gives them a rate of their own.
	QueuePackets     int `json:"queue_packets,omitempty"`
	HostQueuePackets int `json:"host_queue_packets,omitempty"`
	MTU              int `json:"mtu"` // every interface, in bytes
	DatagramMTU      int `json:"datagram_mtu"`
	// GoMaxProcs is the GOMAXPROCS the daemons run with and Run gives
	// the ranks (0: not set, Go's default); see Config.GoMaxProcs.
	GoMaxProcs int `json:"gomaxprocs,omitempty"`

	// Switch is the switch namespace; its Addr is the bridge's address.
	Switch Node `json:"switch"`
	// Hosts are the host namespaces, in rank order.
	Hosts []Node `json:"hosts"`
	// MemNodes are the memory-node namespaces.
	MemNodes []Node `json:"memnodes,omitempty"`
	// StorNodes are the storage-node namespaces (`ndma stord`), Gateways
	// the storage gateway's (`ndma storgw`), if any.
	StorNodes []Node `json:"stornodes,omitempty"`
	Gateways  []Node `json:"gateways,omitempty"`

	// SwitchAddr is where `ndma switch` listens ("10.77.0.1:7471"), the
	// NDMA_SWITCH of every rank.
	SwitchAddr string `json:"switch_addr"`
	// SwitchAddrs lists every switch process's address when the testbed
	// runs more than one (Config.Switches; SwitchAddr is the first): the
	// NDMA_SWITCHES of every rank. Empty with one switch.
	SwitchAddrs []string `json:"switch_addrs,omitempty"`
	// LeafAddrs lists the leaf switches' addresses when the switch is a
	// tree (Config.Leaves); SwitchAddr is then the root's.
	LeafAddrs []string `json:"leaf_addrs,omitempty"`
	// Leaves are the leaf namespaces, in order: Addr is the leaf bridge's
	// address (where its switch listens), Port the spine-side end of its
	// uplink (a port of the spine's bridge, named like the leaf) and
	// Iface the leaf-side end (UplinkIface, a port of the leaf's bridge).
	Leaves []Node `json:"leaves,omitempty"`
	// Token is the fabric token the switch was started with, the
	// NDMA_TOKEN of every rank.
	Token string `json:"token"`
	// Secret is the file holding the fabric secret the testbed's
	// credentials are issued under (the "secret" file of the state
	// directory, mode 0600; ndma credential issue --secret-file issues
	// more); empty when Config.NoCredentials ran the testbed without
	// credentials. The ranks never get it.
	Secret string `json:"secret,omitempty"`
	// ClientCredential is the file of a credential of role client, for
	// tools run in a host namespace outside Run (ip netns exec ...
	// ndma pool --credential FILE); empty without credentials.
	ClientCredential string `json:"client_credential,omitempty"`

	// Daemons are the processes Up started.
	Daemons []Daemon `json:"daemons"`

	// Stray lists namespaces named with the prefix that the state does
	// not list (left by a crash); Status fills it in, and Down removes
	// them.
	Stray []string `json:"stray,omitempty"`
}

// Node is one namespace of the testbed.
type Node struct {
	Name string     `json:"name"` // "sw", "h0", "m0"
	NS   string     `json:"ns"`   // the namespace, "<prefix>-h0"
	Addr netip.Addr `json:"addr"` // its address on the subnet
	// Iface is the interface that holds Addr: the bridge "br0" in the
	// switch namespace, "eth0" elsewhere.
	Iface string `json:"iface"`
	// Port is the switch-side end of the node's veth pair, a port of the
	// bridge named like the node ("h0"); empty for the switch.
	Port string `json:"port,omitempty"`
	// PortNS is the namespace holding Port when it is not the switch
	// namespace: a host's leaf namespace (Config.Leaves).
	PortNS string `json:"port_ns,omitempty"`
	// Service is the address of the daemon in the namespace, if any:
	// `ndma switch` in the switch namespace, `ndma memd` in a memory node.
	Service string `json:"service,omitempty"`
	// Credential is the file of the node's credential (mode 0600, in the
	// state directory): the switch's (role switch) and each memory
	// node's (role memory-node), given to their daemons with
	// --credential, and each host's (role member), Run's NDMA_CREDENTIAL
	// for the rank in that host; empty without credentials.
	Credential string `json:"credential,omitempty"`
	// Leaf is a host's switch when the testbed's switch is a tree
	// (Config.Leaves): the address of its leaf switch, which Run gives
	// its ranks as NDMA_SWITCH.
	Leaf string `json:"leaf,omitempty"`
	// Present is whether the namespace exists; Status fills it in.
	Present bool `json:"present"`
}

// Daemon is a process Up started.
type Daemon struct {
	Role string   `json:"role"` // "switch" or "memd"
	NS   string   `json:"ns"`
	PID  int      `json:"pid"`
	Args []string `json:"args"`
	Log  string   `json:"log"` // file receiving its stdout and stderr
	// Start is the process's start time in clock ticks after boot
	// (/proc/PID/stat), so that a reused pid is never mistaken for it.
	Start uint64 `json:"start"`
	// Alive is whether the process is running; Up and Status fill it in.
	Alive bool `json:"alive"`
	// Restarted: Status found the recorded process gone and the same
	// command line running again in the namespace (started again by
	// hand); PID and Start are that process's.
	Restarted bool `json:"restarted,omitempty"`
}

// Namespaces lists the state's namespaces: the switch, the leaves, the
// hosts, the memory, storage and gateway nodes.
func (s *State) Namespaces() []string {
	ns := []string{s.Switch.NS}
	for _, n := range s.Leaves {
		ns = append(ns, n.NS)
	}
	for _, n := range s.Hosts {
		ns = append(ns, n.NS)
	}
	for _, n := range s.MemNodes {
		ns = append(ns, n.NS)
	}
	for _, n := range s.StorNodes {
		ns = append(ns, n.NS)
	}
	for _, n := range s.Gateways {
		ns = append(ns, n.NS)
	}
	return ns
}

// stateFileName is the state file's name inside the state directory.
const stateFileName = "state.json"

// stateDir is the state directory of prefix under root.
func stateDir(root, prefix string) string { return filepath.Join(root, prefix) }

// save writes the state file atomically, readable by root only (it holds
// the token; the secret and the credentials are in files of their own).
func (s *State) save() error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(s.Dir, stateFileName+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(s.Dir, stateFileName))
}

// loadState reads the state file of prefix under root. A missing file is
// reported wrapping os.ErrNotExist.
func loadState(root, prefix string) (*State, error) {
	path := filepath.Join(stateDir(root, prefix), stateFileName)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if s.Prefix != prefix {
		return nil, fmt.Errorf("%s: state of prefix %q, not %q", path, s.Prefix, prefix)
	}
	return &s, nil
}

// Namespace names: "<prefix>-sw", "<prefix>-h<i>", "<prefix>-m<j>",
// "<prefix>-s<k>" (storage nodes), "<prefix>-g0" (the storage gateway),
// and "<prefix>-probe<pid>" for Check's probe.
func nsName(prefix, node string) string { return prefix + "-" + node }

// ownedNS reports whether the namespace name belongs to a testbed with
// this prefix: exactly one of the patterns nsName makes.
func ownedNS(prefix, name string) bool {
	rest, ok := strings.CutPrefix(name, prefix+"-")
	if !ok {
		return false
	}
	if rest == "sw" {
		return true
	}
	for _, kind := range []string{"h", "m", "s", "g", "l", "probe"} {
		if num, ok := strings.CutPrefix(rest, kind); ok && num != "" && strings.Trim(num, "0123456789") == "" {
			return true
		}
	}
	return false
}

// nodeAddr is the address of the n-th address of the subnet (n ≥ 1).
func nodeAddr(subnet netip.Prefix, n int) netip.Addr {
	a := subnet.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// RankError is one rank's failure in Run.
type RankError struct {
	Rank int
	Err  error
}

func (e RankError) Error() string { return fmt.Sprintf("rank %d: %v", e.Rank, e.Err) }

// RunError is the error Run returns when ranks fail: each failed rank, in
// rank order.
type RunError struct {
	Ranks []RankError
}

func (e *RunError) Error() string {
	var b strings.Builder
	if len(e.Ranks) == 1 {
		fmt.Fprintf(&b, "testbed: rank %d failed: %v", e.Ranks[0].Rank, e.Ranks[0].Err)
		return b.String()
	}
	b.WriteString("testbed: ranks ")
	for i, r := range e.Ranks {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(r.Rank))
	}
	b.WriteString(" failed")
	for i, r := range e.Ranks {
		sep := ": "
		if i > 0 {
			sep = "; "
		}
		fmt.Fprintf(&b, "%s%v", sep, r)
	}
	return b.String()
}

// Unwrap returns each rank's error.
func (e *RunError) Unwrap() []error {
	errs := make([]error, len(e.Ranks))
	for i, r := range e.Ranks {
		errs[i] = r.Err
	}
	return errs
}
