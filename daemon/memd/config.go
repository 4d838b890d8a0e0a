package memd

import (
	"errors"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/ndma/ndma/internal/daemon"
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/memnode/durable"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire"
)

// Defaults applied by Start to zero-valued Config fields.
const (
	// DefaultPort is the UDP port a memory node listens on when
	// Config.Listen is empty: 7470.
	DefaultPort = 7470
	// DefaultListen is the listen address used when Config.Listen is
	// empty: every interface, port DefaultPort.
	DefaultListen = ":7470"
	// DefaultSize is the size of the single region created when there is
	// no key file and Config.Size is zero, in bytes (64 MiB).
	DefaultSize = 64 << 20
)

// Bounds of the pool reply cache (memnode.Replies) of a node lending its
// memory to a switch: the results of mutating pool requests, kept so that
// a retransmitted request is not applied twice. At most ReplyCacheEntries
// entries (about ReplyCacheEntries × memnode.ReplyEntryBytes = 2.5 MiB),
// the oldest pushed out first, each kept ReplyCacheTTL — longer than a
// client's 10 s default op timeout, within which it retransmits. A
// durable node (Dir) keeps as many in its reply journal (memnode/durable),
// ReplyCacheEntries × durable.ReplyRecordLen bytes = 1 MiB.
const (
	ReplyCacheEntries = 16384
	ReplyCacheTTL     = 30 * time.Second
)

// MinMTU and MaxMTU bound Config.MTU, in bytes: a datagram must hold the
// 96-byte header and at least 64 bytes of payload, and fit one UDP
// datagram.
const (
	MinMTU = wire.HeaderLen + 64
	MaxMTU = netio.MaxDatagram
)

// Config configures a memory node. Every field's zero value selects the
// documented default; Start validates the result.
type Config struct {
	// Listen is the UDP address to serve on, "host:port"; with Switch on
	// another host it must not be a loopback address. Empty means
	// DefaultListen (":7470", every interface). Port 0 picks a free port;
	// Server.Addr reports it.
	Listen string

	// Size is the size of the single region created when KeyFile is
	// empty, in bytes, 1 to memnode.MaxRegionSize (1 TiB). Zero means
	// DefaultSize (64 MiB). Must be zero when KeyFile is set.
	Size int64

	// Perm is what the single region created when KeyFile is empty
	// allows. Zero means wire.PermAll. Must be zero when KeyFile is
	// set (the key file gives each region its own permissions).
	Perm wire.Perm

	// KeyFile, if not empty, names a file in memnode.LoadKeyFile's format
	// listing the regions to expose, with their keys, sizes and
	// permissions; it must list at least one region. Empty means one
	// region of Size bytes with permissions Perm under a random key.
	KeyFile string

	// MetricsAddr, if not empty, is a TCP address ("127.0.0.1:9470") on
	// which Prometheus metrics are served over HTTP at /metrics. Empty
	// means no metrics listener. Port 0 picks a free port;
	// Server.MetricsAddr reports it.
	MetricsAddr string

	// BusyPoll is how long the receive loop polls its socket before it
	// sleeps until a datagram arrives (netio.UDPConfig.BusyPoll: Linux,
	// at most netio.MaxBusyPoll); zero, the default, sleeps at once. It
	// trades a core's time for the wake-up taken off each request.
	BusyPoll time.Duration

	// MTU is the largest datagram the node sends, in bytes, header
	// included, MinMTU to MaxMTU. Zero means the transport's default
	// (transport.DefaultMTU, 9000).
	MTU int

	// Switch, if not empty, is the forwarding node ("host:port") whose
	// pool this node lends its first region to (POOLNODE), offering it
	// again four times per second as its heartbeat. Start waits up to a
	// second for the switch's answer to the first offer: a refusal (a
	// wrong Token) fails Start; no answer (a switch not up yet) is
	// logged and the offer repeated every second in the background.
	// Empty means the node serves its regions only directly.
	Switch string

	// Token is the fabric token for Switch's control messages. With
	// Switch set it must not be empty unless Insecure is set; without
	// Switch it must be empty.
	Token []byte

	// Insecure lends to Switch without a fabric token: the node then
	// accepts pool grants from anyone who can forge the switch's
	// address, and Start logs a warning saying so. Only with Switch, and
	// not together with Token.
	Insecure bool

	// Security, when set, is the node's credential (of role
	// secure.RoleMemoryNode): every datagram the node sends and receives
	// is then sealed by a secure.Layer (node.Options.Security) under
	// SecurityOptions, and the node talks only to processes that prove a
	// credential of the same fabric — its switch and clients alike;
	// everything else is dropped and counted. The fabric token (Token)
	// still authenticates the pool's control messages. Datagrams then
	// carry the tag within MTU, which must leave room for it. Nil means
	// datagrams travel unsealed.
	Security        *secure.Identity
	SecurityOptions secure.Options

	// Dir, if not empty, makes the node durable: the lent region is the
	// file Dir/memory (Size bytes, mapped shared) and the node's grants
	// are saved in Dir whenever they change (memnode/durable), so that a
	// node started again on Dir, after a crash or a power loss, takes
	// back its pool regions' bytes and reports them to the switch,
	// which serves the copies still current again. The replies to its
	// newest mutating requests are kept there too (Dir/replies, synced
	// as Sync says), so that a request resent across the restart is
	// answered, not applied again. Needs Switch and no
	// KeyFile. Start refuses a Dir of another Size, a corrupt grant
	// record and a Dir another process holds. Empty means the lent
	// memory dies with the node.
	Dir string

	// Sync is when writes to a durable node (Dir) reach the disk:
	// durable.SyncAlways, the zero value and default, flushes the bytes
	// each write touched before the node answers (an answered write is
	// on disk on every copy); an interval flushes in the background that
	// often (an answered write is in memory on every copy, on disk
	// within the interval). Must be zero without Dir.
	Sync durable.Sync

	// Logger receives the startup and shutdown lines and warnings. Nil
	// discards.
	Logger *slog.Logger
}

// ErrConfig is wrapped by the error Start returns for an invalid Config
// field value (inside a *FieldError naming the field).
var ErrConfig = errors.New("invalid value")

// FieldError is the error Start returns when a Config field is invalid
// (wrapping ErrConfig) or could not be put to use: a listen address already
// in use, a key file that cannot be read or parsed (wrapping the
// *memnode.KeyFileError), regions the store refuses. Field is the Config
// field's name, such as "Listen" or "KeyFile".
//
// It is config.FieldError: switchd, memd and testbed share the one type,
// and Pkg says whose Config it is.
type FieldError = daemon.FieldError

// fields makes the *FieldError values of Config fields.
var fields = daemon.Fields{Pkg: "memd", Sentinel: ErrConfig}

// loopbackHost reports whether host, from a listen address, is a loopback
// address or "localhost".
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

// validate checks c and fills in defaults.
func (c *Config) validate() error {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fields.Invalid("Listen", "%q: %v", c.Listen, err)
	}
	if c.BusyPoll < 0 || c.BusyPoll > netio.MaxBusyPoll {
		return fields.Invalid("BusyPoll", "%v (want 0 to %v)", c.BusyPoll, netio.MaxBusyPoll)
	}
	if c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			return fields.Invalid("MetricsAddr", "%q: %v", c.MetricsAddr, err)
		}
	}
	if c.Switch != "" {
		sw, err := netip.ParseAddrPort(c.Switch)
		if err != nil {
			return fields.Invalid("Switch", "%q: want an IP address and port: %v", c.Switch, err)
		}
		if host, _, _ := net.SplitHostPort(c.Listen); loopbackHost(host) && !sw.Addr().Unmap().IsLoopback() {
			return fields.Invalid("Listen", "%s is a loopback address, from which the switch at %s (another host) cannot be reached: listen on a routable address or 0.0.0.0",
				c.Listen, c.Switch)
		}
		if err := secure.CheckToken(c.Token, c.Insecure); err != nil {
			return fields.InvalidErr("Token", err)
		}
	} else if len(c.Token) > 0 || c.Insecure {
		return fields.Invalid("Token", "a fabric token or Insecure without Switch (they concern the switch this node lends to)")
	}
	if c.Dir != "" && (c.Switch == "" || c.KeyFile != "") {
		return fields.Invalid("Dir", "%q: a durable node keeps the region it lends a switch: want Switch set and no KeyFile", c.Dir)
	}
	if c.Sync != (durable.Sync{}) && c.Dir == "" {
		return fields.Invalid("Sync", "%v without Dir (it says when a durable node's writes reach Dir)", c.Sync)
	}
	if c.Sync.Every < 0 || c.Sync.Every > 0 && c.Sync.Every < durable.MinSyncEvery {
		return fields.Invalid("Sync", "every %v (want at least %v)", c.Sync.Every, durable.MinSyncEvery)
	}
	if c.KeyFile != "" {
		if c.Size != 0 {
			return fields.Invalid("Size", "%d bytes given together with a key file, which sets the region sizes", c.Size)
		}
		if c.Perm != 0 {
			return fields.Invalid("Perm", "%v given together with a key file, which sets the region permissions", c.Perm)
		}
	}
	if c.Size < 0 || c.Size > memnode.MaxRegionSize || c.Size > math.MaxInt {
		return fields.Invalid("Size", "%s (want 1 byte to %s)", formatBytes(c.Size), formatBytes(int64(min(memnode.MaxRegionSize, math.MaxInt))))
	}
	if c.Size == 0 && c.KeyFile == "" {
		c.Size = DefaultSize
	}
	if c.Perm&^wire.PermAll != 0 {
		return fields.Invalid("Perm", "unknown bits in %v", c.Perm)
	}
	if c.Perm == 0 && c.KeyFile == "" {
		c.Perm = wire.PermAll
	}
	if c.MTU != 0 && (c.MTU < MinMTU || c.MTU > MaxMTU) {
		return fields.Invalid("MTU", "%d bytes (want %d to %d)", c.MTU, MinMTU, MaxMTU)
	}
	if c.Security != nil {
		if c.Security.Cert.Role != secure.RoleMemoryNode {
			return fields.Invalid("Security", "a credential of role %v (%q): a memory node needs one of role %v", c.Security.Cert.Role, c.Security.Cert.Name, secure.RoleMemoryNode)
		}
		if err := c.Security.Cert.Verify(c.Security.Authority); err != nil {
			return fields.InvalidErr("Security", err)
		}
		if c.MTU != 0 && c.MTU < MinMTU+wire.TagLen {
			return fields.Invalid("MTU", "%d bytes: with Security, want at least %d (the tag takes %d)", c.MTU, MinMTU+wire.TagLen, wire.TagLen)
		}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}
