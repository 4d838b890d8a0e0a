package testbed

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/ndma/ndma/internal/config"
)

// Defaults applied by Up to zero-valued Config fields.
const (
	// DefaultPrefix names the testbed's namespaces and state when
	// Config.Prefix is empty.
	DefaultPrefix = "ndmatb"
	// DefaultHosts is the number of host namespaces when Config.Hosts is
	// zero.
	DefaultHosts = 2
	// DefaultRate is the rate of every link, each direction, when
	// Config.Rate is empty.
	DefaultRate = "100mbit"
	// DefaultLatency bounds how long a packet may wait in a link's tbf
	// queue when Config.Latency is zero.
	DefaultLatency = 20 * time.Millisecond
	// DefaultMTU is the MTU of every interface when Config.MTU is zero,
	// in bytes.
	DefaultMTU = 9000
	// DefaultSubnet is the private subnet addresses are taken from when
	// Config.Subnet is empty.
	DefaultSubnet = "10.77.0.0/16"
	// DefaultMemSize is the size of each memory node's region when
	// Config.MemSize is zero, in bytes (64 MiB).
	DefaultMemSize = 64 << 20
)

// Limits on Config fields.
const (
	// MaxPeakRate bounds Config.PeakRate, in bits per second: tbf
	// counts in 64 ns ticks, a tenth of a 9 KB frame at 10 Gbit/s.
	MaxPeakRate = 10e9
	// MaxPrefixLen is the longest prefix, in bytes.
	MaxPrefixLen = 24
	// MaxNodes bounds Hosts+MemNodes+StorNodes (and a gateway): the ports
	// of one bridge.
	MaxNodes = 1000
	// MinMTU and MaxMTU bound Config.MTU, in bytes: the smallest MTU an
	// IPv4 host must accept and the largest a veth takes.
	MinMTU, MaxMTU = 576, 65535
	// MaxSwitches bounds Config.Switches (coll.MaxSwitches).
	MaxSwitches = 16
)

// Ports the daemons listen on, in the switch and memory-node namespaces.
const (
	SwitchPort = 7471 // `ndma switch`, UDP
	MemdPort   = 7470 // `ndma memd`, UDP
	StordPort  = 7472 // `ndma stord`, UDP
	StorgwPort = 7473 // `ndma storgw`, UDP
)

// switchPort is the UDP port of switch process i (Config.Switches).
func switchPort(i int) int { return SwitchPort + 100*i }

// udpIPHeaders is what IPv4 and UDP add to a datagram, in bytes: a link of
// MTU m carries datagrams of at most m-udpIPHeaders bytes unfragmented.
const udpIPHeaders = 20 + 8

// maxDatagram is the largest UDP payload over IPv4, in bytes.
const maxDatagram = 65507

// Config describes a testbed. Every field's zero value selects the
// documented default; Up validates the result.
type Config struct {
	// Prefix begins the name of every namespace and names the state
	// directory, so that testbeds with different prefixes never touch
	// each other. It is 1 to MaxPrefixLen ASCII letters, digits and
	// underscores, beginning with a letter. Empty means DefaultPrefix
	// ("ndmatb").
	Prefix string

	// Hosts is the number of host namespaces, where Run starts one rank
	// each; 1 to MaxNodes with MemNodes. Zero means DefaultHosts (2).
	Hosts int

	// MemNodes is the number of memory-node namespaces, each running
	// `ndma memd`. Zero means none.
	MemNodes int

	// StorNodes is the number of storage-node namespaces, each running
	// `ndma stord` (node id i in namespace s<i>) with its directory in the
	// state directory. Zero means none.
	StorNodes int

	// Gateway adds a namespace ("g0") running `ndma storgw`, the
	// controller of the storage's controller-forwarding mode, on a host of
	// its own. It needs StorNodes.
	Gateway bool

	// Rate is the rate of every link in each direction, in tc's syntax: a
	// number and a unit, bit, kbit, mbit, gbit or tbit (bits per second,
	// powers of 1000) or bps, kbps, mbps, gbps, tbps (bytes per second),
	// such as "100mbit". Empty means DefaultRate ("100mbit").
	Rate string

	// HostRate, if not empty, is the rate of the host namespaces' links
	// instead (same syntax): a client with more bandwidth than each memory
	// node, say. Empty means Rate.
	HostRate string

	// UplinkRate is the rate of the links between the leaf switches'
	// namespaces and the spine's (Leaves), in each direction, in Rate's
	// syntax. Empty means Rate: every link of the fabric equal. Only
	// with Leaves.
	UplinkRate string

	// Burst is the size of each link's token bucket, in bytes: how much
	// may leave back to back at line speed. It must be at least MTU+14
	// (one frame). Zero means the larger of two frames and one
	// millisecond at the link's rate.
	Burst int

	// PeakRate bounds how fast frames leave a link back to back, in
	// Rate's syntax: tbf's peak rate, with a peak bucket of one frame
	// (plus an eighth for the rounding of tc's time units). It must be
	// above the link's rate and at most MaxPeakRate. "none" leaves it
	// out: then Burst bytes leave at the veth's speed after every idle
	// gap, at every hop, and a message of a few frames crosses a chain
	// of hops faster than real links of this rate carry it (a 7-hop
	// chain of 32 KiB in 4.1 ms at 100 Mbit/s, where serialization alone
	// takes 7.2 ms). Empty means twice each link's rate where that is at
	// most MaxPeakRate, otherwise none. A peak rate close to the rate
	// makes tbf's timer lose the rate itself (110 Mbit/s over 100 Mbit/s
	// links took 15-20% off a 16 MiB in-network collective on a 2-CPU
	// machine; twice the rate took nothing measurable: docs/BENCHMARKS.md).
	PeakRate string

	// Latency is how long a packet may wait in a link's queue before tbf
	// drops it; with Rate and Burst it sets the queue's size. Zero means
	// DefaultLatency (20 ms).
	Latency time.Duration

	// PriorityQueues gives each link's queue three strict-priority bands
	// (a pfifo_fast qdisc under the tbf): datagrams whose IP TOS byte is
	// IPTOS_LOWDELAY, the ACKs and other control datagrams NDMA marks
	// (netio.DefaultControlTOS), leave ahead of queued data, as on a
	// switch port with a priority queue for control traffic. The queue
	// then holds up to the same number of packets per band as a tbf
	// queue holds full frames (rate x Latency + Burst over MTU+14, with
	// each link's rate: the interfaces' txqueuelen) instead of a byte
	// count. False means one
	// first-in first-out queue per link.
	PriorityQueues bool

	// MTU is the MTU of every veth and the bridge, in bytes, MinMTU to
	// MaxMTU. Zero means DefaultMTU (9000). The daemons are started with
	// --mtu MTU-28, the largest datagram one frame carries.
	MTU int

	// Subnet is the IPv4 subnet, in a private range, that addresses come
	// from, such as "10.77.0.0/16". The switch namespace gets the first
	// address, then the hosts, then the memory nodes. It exists only
	// inside the testbed's namespaces. Empty means DefaultSubnet.
	Subnet string

	// MemSize is the size of each memory node's single region, in bytes.
	// Zero means DefaultMemSize (64 MiB).
	MemSize int64

	// StateDir is the directory under which Up keeps the state file, the
	// daemons' logs and the fabric token, in a subdirectory named after
	// Prefix. Empty means DefaultStateDir().
	StateDir string

	// Binary is the path of the ndma binary that runs `ndma switch` and
	// `ndma memd`. Empty means the running executable (os.Executable).
	Binary string

	// GoMaxProcs is the GOMAXPROCS of the testbed's Go processes: the
	// daemons Up starts and the ranks Run starts (unless the caller's
	// environment sets GOMAXPROCS). Zero means automatic: 1 when the
	// testbed's processes (switch, hosts, memory nodes) outnumber this
	// machine's CPUs, else Go's default. With every process sharing a few
	// cores, each one's second P only adds thread wake-ups (futex) on
	// every packet; one P per process cut small-message latency by 19-30%
	// on a 2-CPU machine (docs/BENCHMARKS.md). -1 means never set it.
	GoMaxProcs int

	// Switches is the number of `ndma switch` processes in the switch
	// namespace, 1 to MaxSwitches: the first on SwitchPort, switch i on
	// SwitchPort+100·i. With more than one, Run gives the ranks
	// NDMA_SWITCHES (every switch) and their in-network collectives are
	// sharded over them (coll.Config.Switches). Zero means 1.
	Switches int

	// Leaves, if not zero, makes the fabric a leaf-spine tree: the switch
	// namespace is the spine, running the root switch process, and each
	// leaf i is a namespace of its own ("<prefix>-l0", …) with a bridge,
	// an address and a leaf switch process on SwitchPort (started with
	// --parent; the root with a --child for each). The hosts sit in
	// blocks, one per leaf, their links ports of their leaf's bridge; each
	// leaf's bridge is joined to the spine's by an uplink shaped to
	// UplinkRate. Run gives a host's ranks its leaf as NDMA_SWITCH;
	// traffic between hosts of two leaves crosses both uplinks. Memory,
	// storage and gateway nodes stay on the spine and register with the
	// root. 0 to MaxSwitches and at most Hosts; not with Switches above 1.
	Leaves int

	// NoCredentials runs the testbed without the security layer: Up
	// then issues no credentials, the daemons start with --insecure
	// instead of --credential, and Run sets NDMA_INSECURE=1 instead of
	// NDMA_CREDENTIAL (the fabric token still authenticates control
	// messages). For comparing figures with the layer off; by default
	// every datagram is sealed.
	NoCredentials bool

	hostRateBits uint64 // HostRate in bits per second, set by validate
	hostBurst    int
	// UplinkRate in bits per second and the uplinks' bucket, set by
	// validate when there are Leaves.
	uplinkRateBits uint64
	uplinkBurst    int
	// Peak rates of the links and of the host links (HostRate), in bits
	// per second, set by validate; zero: none.
	peakBits, hostPeakBits, uplinkPeakBits uint64
}

// autoGoMaxProcs is Config.GoMaxProcs's automatic choice for procs
// processes on cpus CPUs: 1 when they outnumber the CPUs, else 0 (Go's
// default).
func autoGoMaxProcs(procs, cpus int) int {
	if procs > cpus {
		return 1
	}
	return 0
}

// ErrConfig is wrapped by the error Up returns for an invalid Config field
// value (inside a *FieldError naming the field).
var ErrConfig = errors.New("invalid value")

// FieldError is the error Up returns when a Config field is invalid. Field
// is the Config field's name, such as "Rate".
//
// It is config.FieldError: switchd, memd and testbed share the one type,
// and Pkg says whose Config it is.
type FieldError = config.FieldError

func invalid(field, format string, a ...any) error {
	return config.Invalid("testbed", ErrConfig, field, format, a...)
}

// DefaultStateDir is where testbed state lives when Config.StateDir is
// empty: /run/ndma-testbed when /run exists (root's runtime directory; it
// is cleared at boot, like the namespaces), else $XDG_RUNTIME_DIR/ndma-testbed,
// else ndma-testbed in the temporary directory.
func DefaultStateDir() string {
	if fi, err := os.Stat("/run"); err == nil && fi.IsDir() {
		return "/run/ndma-testbed"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "ndma-testbed")
	}
	return filepath.Join(os.TempDir(), "ndma-testbed")
}

// ValidatePrefix reports whether p can name a testbed: 1 to MaxPrefixLen
// ASCII letters, digits and underscores, beginning with a letter. The
// restriction keeps every name Down matches unambiguous ("a" never matches
// "a-b-sw") and the state directory inside StateDir.
func ValidatePrefix(p string) error {
	if p == "" || len(p) > MaxPrefixLen {
		return fmt.Errorf("%w: %q: want 1 to %d letters, digits or underscores", ErrConfig, p, MaxPrefixLen)
	}
	for i, c := range []byte(p) {
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if letter || i > 0 && (c >= '0' && c <= '9' || c == '_') {
			continue
		}
		return fmt.Errorf("%w: %q: want letters, digits or underscores, beginning with a letter", ErrConfig, p)
	}
	return nil
}

// validate checks c and fills in defaults. It returns the parsed subnet
// and rate (bits per second).
func (c *Config) validate() (netip.Prefix, uint64, error) {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if err := ValidatePrefix(c.Prefix); err != nil {
		return netip.Prefix{}, 0, &FieldError{Pkg: "testbed", Field: "Prefix", Err: err}
	}
	if c.Hosts == 0 {
		c.Hosts = DefaultHosts
	}
	if c.Hosts < 0 || c.MemNodes < 0 || c.StorNodes < 0 || c.Hosts+c.MemNodes+c.StorNodes+c.gateways() > MaxNodes {
		return netip.Prefix{}, 0, invalid("Hosts", "%d hosts, %d memory nodes, %d storage nodes and %d gateways (want 1 to %d in all)", c.Hosts, c.MemNodes, c.StorNodes, c.gateways(), MaxNodes)
	}
	if c.Switches == 0 {
		c.Switches = 1
	}
	if c.Switches < 1 || c.Switches > MaxSwitches {
		return netip.Prefix{}, 0, invalid("Switches", "%d switch processes (want 1 to %d)", c.Switches, MaxSwitches)
	}
	if c.Leaves < 0 || c.Leaves > MaxSwitches || c.Leaves > c.Hosts || (c.Leaves > 0 && c.Switches > 1) {
		return netip.Prefix{}, 0, invalid("Leaves", "%d leaf switches for %d hosts and %d switch processes (want 0 to %d, at most one per host, and one switch per job)", c.Leaves, c.Hosts, c.Switches, MaxSwitches)
	}
	if c.Gateway && c.StorNodes == 0 {
		return netip.Prefix{}, 0, invalid("Gateway", "a storage gateway without storage nodes (give StorNodes)")
	}
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	if c.MTU < MinMTU || c.MTU > MaxMTU {
		return netip.Prefix{}, 0, invalid("MTU", "%d bytes (want %d to %d)", c.MTU, MinMTU, MaxMTU)
	}
	if c.Rate == "" {
		c.Rate = DefaultRate
	}
	rate, err := ParseRate(c.Rate)
	if err != nil {
		return netip.Prefix{}, 0, &FieldError{Pkg: "testbed", Field: "Rate", Err: err}
	}
	frame := c.MTU + 14 // Ethernet header
	c.hostBurst = c.Burst
	if c.HostRate != "" {
		hr, err := ParseRate(c.HostRate)
		if err != nil {
			return netip.Prefix{}, 0, &FieldError{Pkg: "testbed", Field: "HostRate", Err: err}
		}
		c.hostRateBits = hr
		if c.hostBurst == 0 {
			c.hostBurst = max(2*frame, int(min(hr/8/1000, math.MaxInt32)))
		}
	}
	c.uplinkRateBits, c.uplinkBurst = 0, c.Burst
	switch {
	case c.UplinkRate != "" && c.Leaves == 0:
		return netip.Prefix{}, 0, invalid("UplinkRate", "uplinks without leaf switches (give Leaves)")
	case c.Leaves > 0:
		ur := rate
		if c.UplinkRate != "" {
			if ur, err = ParseRate(c.UplinkRate); err != nil {
				return netip.Prefix{}, 0, &FieldError{Pkg: "testbed", Field: "UplinkRate", Err: err}
			}
		}
		c.uplinkRateBits = ur
		if c.uplinkBurst == 0 {
			c.uplinkBurst = max(2*frame, int(min(ur/8/1000, math.MaxInt32)))
		}
	}
	if c.Burst == 0 {
		c.Burst = max(2*frame, int(min(rate/8/1000, math.MaxInt32)))
	}
	if c.Burst < frame {
		return netip.Prefix{}, 0, invalid("Burst", "%d bytes is less than one %d-byte frame at MTU %d", c.Burst, frame, c.MTU)
	}
	if err := c.validatePeak(rate); err != nil {
		return netip.Prefix{}, 0, err
	}
	if c.Latency == 0 {
		c.Latency = DefaultLatency
	}
	if c.Latency < time.Millisecond || c.Latency > 10*time.Second {
		return netip.Prefix{}, 0, invalid("Latency", "%v (want 1ms to 10s)", c.Latency)
	}
	if c.Subnet == "" {
		c.Subnet = DefaultSubnet
	}
	subnet, err := netip.ParsePrefix(c.Subnet)
	if err != nil {
		return netip.Prefix{}, 0, invalid("Subnet", "%q: %v", c.Subnet, err)
	}
	if !subnet.Addr().Is4() || !subnet.Addr().IsPrivate() {
		return netip.Prefix{}, 0, invalid("Subnet", "%v: want an IPv4 subnet in a private range (10/8, 172.16/12, 192.168/16)", subnet)
	}
	if subnet.Masked() != subnet {
		return netip.Prefix{}, 0, invalid("Subnet", "%v has host bits set (did you mean %v?)", subnet, subnet.Masked())
	}
	// The network address, the switch, the nodes, and the broadcast
	// address must fit.
	if need := 2 + c.Hosts + c.MemNodes + c.StorNodes + c.gateways() + c.Leaves; subnet.Bits() > 30 || 1<<(32-subnet.Bits()) < need+1 {
		return netip.Prefix{}, 0, invalid("Subnet", "%v is too small for the switch, %d leaves, %d hosts, %d memory nodes, %d storage nodes and %d gateways", subnet, c.Leaves, c.Hosts, c.MemNodes, c.StorNodes, c.gateways())
	}
	if c.MemSize == 0 {
		c.MemSize = DefaultMemSize
	}
	if c.MemSize < 0 || c.MemSize > 1<<40 {
		return netip.Prefix{}, 0, invalid("MemSize", "%d bytes (want 1 to %d)", c.MemSize, int64(1<<40))
	}
	switch {
	case c.GoMaxProcs < -1:
		return netip.Prefix{}, 0, invalid("GoMaxProcs", "%d (want -1: Go's default, 0: automatic, or a count of at least 1)", c.GoMaxProcs)
	case c.GoMaxProcs == 0:
		c.GoMaxProcs = autoGoMaxProcs(c.Switches+c.Hosts+c.MemNodes+c.StorNodes+c.gateways(), runtime.NumCPU())
	case c.GoMaxProcs == -1:
		c.GoMaxProcs = 0
	}
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir()
	}
	if c.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return netip.Prefix{}, 0, &FieldError{Pkg: "testbed", Field: "Binary", Err: fmt.Errorf("finding the running executable: %w", err)}
		}
		c.Binary = exe
	}
	bin, err := filepath.Abs(c.Binary)
	if err != nil {
		return netip.Prefix{}, 0, &FieldError{Pkg: "testbed", Field: "Binary", Err: err}
	}
	if fi, err := os.Stat(bin); err != nil {
		return netip.Prefix{}, 0, &FieldError{Pkg: "testbed", Field: "Binary", Err: err}
	} else if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return netip.Prefix{}, 0, invalid("Binary", "%s is not an executable file", bin)
	}
	c.Binary = bin
	return subnet, rate, nil
}

// datagramMTU is the largest UDP datagram one frame of a link with MTU mtu
// carries, in bytes.
func datagramMTU(mtu int) int { return min(mtu-udpIPHeaders, maxDatagram) }

// rateUnits are tc's rate units, in bits per second; longest first, so
// that "kbit" is not read as "…bit".
var rateUnits = []struct {
	suffix string
	mult   float64
}{
	{"kbit", 1e3}, {"mbit", 1e6}, {"gbit", 1e9}, {"tbit", 1e12},
	{"kbps", 8e3}, {"mbps", 8e6}, {"gbps", 8e9}, {"tbps", 8e12},
	{"bit", 1}, {"bps", 8},
}

// validatePeak sets peakBits and hostPeakBits from PeakRate for links of
// rate bits per second (and hostRateBits, if set).
func (c *Config) validatePeak(rate uint64) error {
	c.peakBits, c.hostPeakBits, c.uplinkPeakBits = 0, 0, 0
	switch strings.ToLower(strings.TrimSpace(c.PeakRate)) {
	case "none":
		return nil
	case "":
		if 2*rate <= MaxPeakRate {
			c.peakBits = 2 * rate
		}
		if c.hostRateBits > 0 && 2*c.hostRateBits <= MaxPeakRate {
			c.hostPeakBits = 2 * c.hostRateBits
		}
		if c.uplinkRateBits > 0 && 2*c.uplinkRateBits <= MaxPeakRate {
			c.uplinkPeakBits = 2 * c.uplinkRateBits
		}
		return nil
	}
	pr, err := ParseRate(c.PeakRate)
	if err != nil {
		return &FieldError{Pkg: "testbed", Field: "PeakRate", Err: err}
	}
	if pr > MaxPeakRate {
		return invalid("PeakRate", "%s is above %s, finer than tbf can time a frame", FormatRate(pr), FormatRate(MaxPeakRate))
	}
	if top := max(rate, c.hostRateBits, c.uplinkRateBits); pr <= top {
		return invalid("PeakRate", "%s must be above every link's rate (%s), or none", FormatRate(pr), FormatRate(top))
	}
	c.peakBits = pr
	if c.hostRateBits > 0 {
		c.hostPeakBits = pr
	}
	if c.uplinkRateBits > 0 {
		c.uplinkPeakBits = pr
	}
	return nil
}

// peakBucket is the peak bucket for frames of mtu+14 bytes: one frame
// and an eighth, so that tc's rounding of the time to send it at the peak
// rate never makes it smaller than a frame (tbf would drop every full
// one).
func peakBucket(mtu int) int {
	f := mtu + 14
	return f + f/8
}

// queuePackets is the length, in packets, of each priority band of a link
// of rate bits per second, bucket burst bytes and queue bound latency
// (Config.PriorityQueues): as many full frames of mtu as the tbf's byte
// limit, rate x latency + burst, holds, and at least 2.
func queuePackets(rate uint64, burst int, latency time.Duration, mtu int) int {
	limit := float64(rate)/8*latency.Seconds() + float64(burst)
	return max(2, int(math.Ceil(limit/float64(mtu+14))))
}

// ParseRate parses a link rate in tc's syntax and returns it in bits per
// second: a positive decimal number followed by bit, kbit, mbit, gbit or
// tbit (bits per second, powers of 1000), or bps, kbps, mbps, gbps or tbps
// (bytes per second, as in tc), without regard to case. Examples:
// "100mbit" (10^8), "1gbit", "12.5mbps" (10^8). The rate must be at least
// 8 kbit/s. Errors wrap ErrConfig.
func ParseRate(s string) (uint64, error) {
	lower := strings.ToLower(strings.TrimSpace(s))
	for _, u := range rateUnits {
		num, ok := strings.CutSuffix(lower, u.suffix)
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(num, 64)
		if err != nil || num == "" || num[0] < '0' || num[0] > '9' {
			break
		}
		bits := v * u.mult
		if bits < 8e3 || bits > 1e15 {
			return 0, fmt.Errorf("%w: %q: want 8kbit to 1000tbit", ErrConfig, s)
		}
		return uint64(math.Round(bits)), nil
	}
	return 0, fmt.Errorf("%w: %q: want a number and a unit, such as 100mbit, 1gbit or 12mbps (bytes)", ErrConfig, s)
}

// FormatRate writes a rate in bits per second in the shortest of tc's
// units that shows it exactly, such as "100mbit".
func FormatRate(bits uint64) string {
	for _, u := range []struct {
		suffix string
		mult   uint64
	}{{"tbit", 1e12}, {"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}} {
		if bits >= u.mult && bits%u.mult == 0 {
			return fmt.Sprintf("%d%s", bits/u.mult, u.suffix)
		}
	}
	return fmt.Sprintf("%dbit", bits)
}

// gateways is the number of storage gateways (0 or 1).
func (c *Config) gateways() int {
	if c.Gateway {
		return 1
	}
	return 0
}

// ErrInvalidRunOptions is returned by RunWith for options that do not
// validate.
var ErrInvalidRunOptions = errors.New("testbed: run: invalid options")

// RunOptions are RunWith's options.
type RunOptions struct {
	// Stall, when positive, freezes one rank drawn at random for Stall
	// once every StallEvery while the ranks run (SIGSTOP to its process
	// group, SIGCONT after), as a machine that does not schedule a
	// process for a while: a busy or oversubscribed host, a hypervisor
	// taking a virtual CPU. StallEvery must exceed Stall.
	Stall, StallEvery time.Duration
	// Seed draws the ranks to stall; 0 draws a seed.
	Seed uint64
	// OnStall, if not nil, is called with the rank after each stall.
	OnStall func(rank int)
	// PerHost is the number of ranks in each host namespace, from 1 to
	// MaxPerHost; 0 means 1. Rank i runs in host i/PerHost.
	PerHost int
}

// MaxPerHost bounds RunOptions.PerHost.
const MaxPerHost = 64

// Validate checks the options.
func (o *RunOptions) Validate() error {
	switch {
	case o.Stall < 0:
		return fmt.Errorf("%w: stall %v is negative", ErrInvalidRunOptions, o.Stall)
	case o.PerHost < 0 || o.PerHost > MaxPerHost:
		return fmt.Errorf("%w: %d ranks per host: want 1 to %d", ErrInvalidRunOptions, o.PerHost, MaxPerHost)
	case o.Stall > 0 && o.StallEvery <= o.Stall:
		return fmt.Errorf("%w: a stall of %v every %v: the period must be longer than the stall", ErrInvalidRunOptions, o.Stall, o.StallEvery)
	}
	return nil
}
