package kvd

import (
	"errors"
	"log/slog"
	"net"
	"regexp"
	"time"

	"github.com/ndma/ndma/internal/daemon"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
)

// Defaults applied by Start to zero-valued Config fields.
const (
	// DefaultListen is the UDP address the owner's endpoint takes when
	// Config.Listen is empty: any interface, a free port.
	DefaultListen = ":0"
	// MaxRank bounds Config.Rank (kv.Layout's owners are at most its
	// shards, at most 65536).
	MaxRank = 1<<16 - 1
	// MaxWriteTimeout bounds Config.WriteTimeout.
	MaxWriteTimeout = time.Minute
	// MaxLease bounds Config.Lease.
	MaxLease = time.Minute
)

// Config configures an owner daemon.
type Config struct {
	// Listen is the UDP address of the owner's endpoint, "host:port"
	// (empty: DefaultListen).
	Listen string
	// Switch is the forwarding node's address, "host:port" (required).
	Switch string
	// Token authenticates control messages to the switch; it must not
	// be empty unless Insecure is set (and must be empty with it).
	Token []byte
	// Insecure talks to the switch without a fabric token.
	Insecure bool
	// Security, when set, is the daemon's credential (role member):
	// every datagram is then sealed under it. Nil: datagrams travel
	// unsealed (`ndma kvd` refuses that unless --insecure).
	Security        *secure.Identity
	SecurityOptions secure.Options
	// MTU is the largest datagram sent, header included (zero:
	// transport.DefaultMTU).
	MTU int
	// Space names the key space (1 to 64 letters, digits, '_' and '-',
	// the first a letter or digit); its owners' service is
	// kv.ServiceName(Space), which only credentials named
	// kv-SPACE[/INSTANCE] may serve on a sealed fabric.
	Space string
	// Region and RegionKey are the key space's pool region (a space
	// file's; both required).
	Region    uint32
	RegionKey uint64
	// Rank is the owner rank this daemon runs, 0 to the layout's
	// Owners-1.
	Rank int
	// WriteTimeout bounds each pool write of the owner (zero:
	// kv.DefaultWriteTimeout).
	WriteTimeout time.Duration
	// Lease is how long the owner goes on writing after the switch last
	// confirmed it holds its rank (zero: kv.DefaultLease); see
	// kv.OwnerConfig.Lease.
	Lease time.Duration
	// GrowAt is the load past which the owner grows a shard's table, in
	// a key space created with room for it (zero: kv.DefaultGrowAt);
	// see kv.OwnerConfig.GrowAt.
	GrowAt float64
	// Clients are the scopes, besides the key space's own, whose
	// processes may use the key space on a sealed fabric (see
	// kv.OwnerConfig.Clients).
	Clients []string
	// Standby lets Start return while another process holds the rank:
	// this one takes it over when the switch counts that one dead.
	Standby bool
	// MetricsAddr, if not empty, is a TCP address on which Prometheus
	// metrics are served at /metrics.
	MetricsAddr string
	// Logger receives the daemon's log (nil: discarded).
	Logger *slog.Logger
}

// ErrConfig is wrapped by the error Start returns for an invalid Config
// field value (inside a *FieldError naming the field).
var ErrConfig = errors.New("invalid value")

// FieldError is the error of a Config field that is invalid (wrapping
// ErrConfig) or could not be put to use.
type FieldError = daemon.FieldError

var fields = daemon.Fields{Pkg: "kvd", Sentinel: ErrConfig}

// spaceName is what a key space's name may be.
var spaceName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// CheckSpace reports what makes name unusable as a key space's name.
func CheckSpace(name string) error {
	if !spaceName.MatchString(name) {
		return fields.Invalid("Space", "%q (want 1 to 64 letters, digits, '_' or '-', the first a letter or digit)", name)
	}
	return nil
}

func (c *Config) validate() error {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fields.Invalid("Listen", "%q: %v", c.Listen, err)
	}
	if _, _, err := net.SplitHostPort(c.Switch); err != nil {
		return fields.Invalid("Switch", "%q: %v", c.Switch, err)
	}
	if err := secure.CheckToken(c.Token, c.Insecure); err != nil {
		return fields.InvalidErr("Token", err)
	}
	if c.Security != nil {
		if c.Security.Cert.Role != secure.RoleMember {
			return fields.Invalid("Security", "a credential of role %v (%q): an owner needs one of role %v", c.Security.Cert.Role, c.Security.Cert.Name, secure.RoleMember)
		}
		if err := c.Security.Cert.Verify(c.Security.Authority); err != nil {
			return fields.InvalidErr("Security", err)
		}
	}
	if c.MTU == 0 {
		c.MTU = transport.DefaultMTU
	}
	if c.MTU < transport.MinMTU || c.MTU > transport.MaxMTU {
		return fields.Invalid("MTU", "%d bytes (want %d to %d)", c.MTU, transport.MinMTU, transport.MaxMTU)
	}
	if err := CheckSpace(c.Space); err != nil {
		return err
	}
	if c.Region == 0 || c.RegionKey == 0 {
		return fields.Invalid("Region", "region %d, key %#x (want a key space's region and key: its space file)", c.Region, c.RegionKey)
	}
	if c.Rank < 0 || c.Rank > MaxRank {
		return fields.Invalid("Rank", "%d (want 0 to %d)", c.Rank, MaxRank)
	}
	if c.WriteTimeout < 0 || c.WriteTimeout > MaxWriteTimeout {
		return fields.Invalid("WriteTimeout", "%v (want 0 to %v)", c.WriteTimeout, MaxWriteTimeout)
	}
	if c.Lease < 0 || c.Lease > MaxLease {
		return fields.Invalid("Lease", "%v (want 0 to %v)", c.Lease, MaxLease)
	}
	if !(c.GrowAt >= 0 && c.GrowAt <= 1) {
		return fields.Invalid("GrowAt", "%v (want 0 to 1)", c.GrowAt)
	}
	for _, s := range c.Clients {
		if n, err := secure.ParseName(secure.RoleClient, s); err != nil || n.Scope != s {
			return fields.Invalid("Clients", "%q (want scopes: labels of A-Z, a-z, 0-9, '-' and '_')", s)
		}
	}
	if c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			return fields.Invalid("MetricsAddr", "%q: %v", c.MetricsAddr, err)
		}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}
