package switchd

import (
	"errors"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/internal/daemon"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// Defaults applied by Start to zero-valued Config fields.
const (
	// DefaultPort is the UDP port a switch listens on when Config.Listen
	// is empty: 7471.
	DefaultPort = 7471
	// DefaultListen is the listen address used when Config.Listen is
	// empty: every interface, port DefaultPort.
	DefaultListen = ":7471"
	// DefaultHeartbeatTimeout is how long a member may go without a
	// heartbeat before the switch declares it dead, when
	// Config.HeartbeatTimeout is zero.
	DefaultHeartbeatTimeout = time.Second
	// DefaultPoolSlots is the number of aggregation slots when
	// Config.PoolSlots is zero.
	DefaultPoolSlots = 1024
	// DefaultMTU is the largest datagram the switch's own streams send
	// when Config.MTU is zero, in bytes, header included.
	DefaultMTU = transport.DefaultMTU
)

// Bounds of Config fields.
const (
	// MinMTU and MaxMTU bound Config.MTU, in bytes: a datagram must hold
	// the 96-byte header and at least 64 bytes of payload, and fit one
	// UDP datagram.
	MinMTU = wire.HeaderLen + 64
	MaxMTU = netio.MaxDatagram
	// MaxPoolSlots bounds Config.PoolSlots (fabric.PoolConfig.Slots).
	MaxPoolSlots = 1 << 20
	// MaxReaders bounds Config.Readers.
	MaxReaders = 16
	// MinHeartbeatTimeout bounds Config.HeartbeatTimeout from below:
	// endpoints send four heartbeats per timeout, and a shorter one would
	// declare members dead on scheduling noise.
	MinHeartbeatTimeout = 10 * time.Millisecond
)

// Config configures a switch. Every field's zero value selects the
// documented default; Start validates the result.
type Config struct {
	// Listen is the UDP address to serve on, "host:port". Empty means
	// DefaultListen (":7471", every interface). Port 0 picks a free port;
	// Server.Addr reports it.
	Listen string

	// Token authenticates control messages (HMAC-SHA256): every endpoint
	// of the fabric must use the same token, and a control request under
	// another one is refused with wire.StatusAuth. It must not be empty
	// unless Insecure is set.
	Token []byte

	// Insecure runs the switch without a fabric token: anyone who can
	// reach it may join, register, create and free pool regions and lend
	// memory. Start refuses an empty Token without it (a *FieldError for
	// Token wrapping secure.ErrNoToken), and Insecure with a Token; with
	// it, Start logs a warning saying so.
	Insecure bool

	// Security, when set, is the switch's credential (of role
	// secure.RoleSwitch): every datagram the switch sends and receives
	// is then sealed by a secure.Layer (fabric.NewServerWith) under
	// SecurityOptions, and the switch talks only to processes that prove
	// a credential of the same fabric; everything else is dropped and
	// counted. The fabric token (Token) still authenticates control
	// messages. The switch's own streams then send datagrams of at most
	// MTU bytes with the tag, which MTU must leave room for. Nil means
	// datagrams travel unsealed.
	Security        *secure.Identity
	SecurityOptions secure.Options

	// HeartbeatTimeout is how long a member may go without a heartbeat
	// before it is declared dead, at least MinHeartbeatTimeout. Zero
	// means DefaultHeartbeatTimeout (1s). Endpoints should send
	// heartbeats four times per timeout.
	HeartbeatTimeout time.Duration

	// PoolSlots is the number of aggregation slots, 1 to MaxPoolSlots;
	// each holds one chunk of one reduction in flight (up to 9000 bytes).
	// Zero means DefaultPoolSlots (1024).
	PoolSlots int

	// MTU is the largest datagram the switch's own reliable streams
	// (control responses, aggregation results, anycast relays) send, in
	// bytes, header included, MinMTU to MaxMTU. Forwarded multicast and
	// unicast packets keep the size their sender gave them. Zero means
	// DefaultMTU (9000).
	MTU int

	// Fault injects faults into everything the switch sends: each rate
	// is a probability in [0, 1]; Fault.Seed seeds the generator (zero
	// means 1). The zero value injects nothing.
	Fault fabric.FaultConfig

	// BusyPoll is how long the receive loop polls its socket before it
	// sleeps until a datagram arrives (netio.UDPConfig.BusyPoll: Linux,
	// at most netio.MaxBusyPoll); zero, the default, sleeps at once. It
	// trades a core's time for the wake-up taken off each request.
	BusyPoll time.Duration

	// Readers is how many sockets the switch reads from, each bound to
	// Listen (SO_REUSEPORT, Linux) and read by a goroutine of its own:
	// the kernel spreads the traffic over them by flow, and one reader
	// steps the packets it got while another writes what the switch
	// sends, so that the switch can use more than one core. Zero means 1:
	// one socket, bound without SO_REUSEPORT (on a machine whose cores
	// are shared with the members, more readers cost more CPU per packet
	// than they gain). Other processes of the same user may bind the
	// address too while the switch runs with more than one.
	Readers int

	// Parent is the UDP address ("host:port") of the switch above this
	// one in a tree of switches; empty: none (the tree's root, or a
	// switch alone). Children are the switches below this one, each at
	// the address its datagrams come from. A job joined under a switch
	// with a parent spans the tree (fabric.Config.Parent).
	Parent   string
	Children []string
	parent   netip.AddrPort   // Parent resolved by validate
	children []netip.AddrPort // Children resolved by validate

	// MetricsAddr, if not empty, is a TCP address ("127.0.0.1:9471") on
	// which Prometheus metrics are served over HTTP at /metrics. Empty
	// means no metrics listener. Port 0 picks a free port;
	// Server.MetricsAddr reports it.
	MetricsAddr string

	// Etcd, if not empty, is etcd's client endpoints ("host:port"): the
	// switch keeps its pool map there (package etcdstore), takes it
	// from there when it starts, and holds a liveness key under a
	// lease. Empty means the map lives in the switch alone, rebuilt
	// from the memory nodes' reports after a restart.
	Etcd []string
	// EtcdPrefix is where the switch's keys live in etcd. Empty means
	// etcdstore.DefaultPrefix ("/ndma/").
	EtcdPrefix string

	// Logger receives the startup and shutdown lines and warnings. Nil
	// discards.
	Logger *slog.Logger
}

// ErrConfig is wrapped by the error Start returns for an invalid Config
// field value (inside a *FieldError naming the field).
var ErrConfig = errors.New("invalid value")

// FieldError is the error Start returns when a Config field is invalid
// (wrapping ErrConfig) or could not be put to use (a listen address
// already in use). Field is the Config field's name, such as "Listen",
// "MTU" or "Fault.Drop".
//
// It is config.FieldError: switchd, memd and testbed share the one type,
// and Pkg says whose Config it is.
type FieldError = daemon.FieldError

// fields makes the *FieldError values of Config fields.
var fields = daemon.Fields{Pkg: "switchd", Sentinel: ErrConfig}

// validate checks c and fills in defaults.
func (c *Config) validate() error {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fields.Invalid("Listen", "%q: %v", c.Listen, err)
	}
	if err := secure.CheckToken(c.Token, c.Insecure); err != nil {
		return fields.InvalidErr("Token", err)
	}
	if c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			return fields.Invalid("MetricsAddr", "%q: %v", c.MetricsAddr, err)
		}
	}
	if c.Security != nil {
		if c.Security.Cert.Role != secure.RoleSwitch {
			return fields.Invalid("Security", "a credential of role %v (%q): the switch needs one of role %v", c.Security.Cert.Role, c.Security.Cert.Name, secure.RoleSwitch)
		}
		if err := c.Security.Cert.Verify(c.Security.Authority); err != nil {
			return fields.InvalidErr("Security", err)
		}
	}
	if c.HeartbeatTimeout == 0 {
		c.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if c.HeartbeatTimeout < MinHeartbeatTimeout {
		return fields.Invalid("HeartbeatTimeout", "%v (want at least %v)", c.HeartbeatTimeout, MinHeartbeatTimeout)
	}
	if c.PoolSlots == 0 {
		c.PoolSlots = DefaultPoolSlots
	}
	if c.PoolSlots < 1 || c.PoolSlots > MaxPoolSlots {
		return fields.Invalid("PoolSlots", "%d (want 1 to %d)", c.PoolSlots, MaxPoolSlots)
	}
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	if c.MTU < MinMTU || c.MTU > MaxMTU {
		return fields.Invalid("MTU", "%d bytes (want %d to %d)", c.MTU, MinMTU, MaxMTU)
	}
	if c.Readers < 0 || c.Readers > MaxReaders {
		return fields.Invalid("Readers", "%d (want 1 to %d)", c.Readers, MaxReaders)
	}
	if c.BusyPoll < 0 || c.BusyPoll > netio.MaxBusyPoll {
		return fields.Invalid("BusyPoll", "%v (want 0 to %v)", c.BusyPoll, netio.MaxBusyPoll)
	}
	if c.Security != nil && c.MTU < MinMTU+wire.TagLen {
		return fields.Invalid("MTU", "%d bytes: with Security, want at least %d (the tag takes %d)", c.MTU, MinMTU+wire.TagLen, wire.TagLen)
	}
	for _, r := range []struct {
		field string
		rate  float64
	}{
		{"Fault.Drop", c.Fault.Drop},
		{"Fault.Dup", c.Fault.Dup},
		{"Fault.Reorder", c.Fault.Reorder},
		{"Fault.Corrupt", c.Fault.Corrupt},
	} {
		if math.IsNaN(r.rate) || r.rate < 0 || r.rate > 1 {
			return fields.Invalid(r.field, "rate %v (want a probability in [0, 1])", r.rate)
		}
	}
	if err := c.resolveTree(); err != nil {
		return err
	}
	for _, e := range c.Etcd {
		if e == "" {
			return fields.Invalid("Etcd", "an empty endpoint in %q", c.Etcd)
		}
	}
	if c.EtcdPrefix != "" && len(c.Etcd) == 0 {
		return fields.Invalid("EtcdPrefix", "%q without Etcd endpoints", c.EtcdPrefix)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// resolveTree resolves Parent and Children.
func (c *Config) resolveTree() error {
	resolve := func(field, s string) (netip.AddrPort, error) {
		ua, err := net.ResolveUDPAddr("udp", s)
		if err != nil {
			return netip.AddrPort{}, fields.Invalid(field, "%q: %v", s, err)
		}
		ap := ua.AddrPort()
		ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		if ap.Port() == 0 || ap.Addr().IsUnspecified() {
			return netip.AddrPort{}, fields.Invalid(field, "%q: want a host and a port to send to", s)
		}
		return ap, nil
	}
	var err error
	if c.Parent != "" {
		if c.parent, err = resolve("Parent", c.Parent); err != nil {
			return err
		}
	}
	if len(c.Children) > fabric.MaxChildren {
		return fields.Invalid("Children", "%d (want at most %d)", len(c.Children), fabric.MaxChildren)
	}
	c.children = c.children[:0]
	for _, s := range c.Children {
		ap, err := resolve("Children", s)
		if err != nil {
			return err
		}
		if ap == c.parent || slices.Contains(c.children, ap) {
			return fields.Invalid("Children", "%q listed twice, or also the parent", s)
		}
		c.children = append(c.children, ap)
	}
	return nil
}

// faultActive reports whether f injects anything.
func faultActive(f fabric.FaultConfig) bool {
	return f.Drop > 0 || f.Dup > 0 || f.Reorder > 0 || f.Corrupt > 0
}
