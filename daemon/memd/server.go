package memd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"sync"
	"time"

	"github.com/ndma/ndma/internal/ctrlclient"
	"github.com/ndma/ndma/internal/daemon"
	"github.com/ndma/ndma/internal/secretfile"
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/memnode/durable"
	"github.com/ndma/ndma/memnode/node"
	"github.com/ndma/ndma/memnode/server"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// ShutdownTimeout bounds how long Close waits for metrics scrapes in
// progress to finish before it drops their connections.
const ShutdownTimeout = daemon.ShutdownTimeout

// ErrNoRegions is the cause of the *FieldError for a key file that lists
// no region.
var ErrNoRegions = errors.New("key file lists no region")

// Server is a running memory node. Create one with Start; all methods are
// safe for concurrent use.
type Server struct {
	log     *slog.Logger
	conn    *netio.UDPConn
	node    *node.Node
	mtu     int
	regions []memnode.RegionInfo // fixed after Start
	bytes   int64                // total size of regions

	dir      *durable.Dir    // nil without Config.Dir
	metrics  *daemon.Metrics // nil without a metrics listener
	stopLend context.CancelFunc
	lendDone chan struct{}
	leave    func()       // tells the switch this node stops lending (nil: not lending)
	close    func() error // shutdown, once
}

// Stats is a snapshot of a Server's counters.
type Stats struct {
	// Node holds the request and transport counters: requests served
	// and refused, the pool's, packets, retransmissions, malformed and
	// unexpected datagrams dropped, and so on.
	Node node.Stats
	// UDP holds the socket's datagram counters.
	UDP netio.UDPStats
	// Security holds the security layer's counters (zero without
	// Config.Security).
	Security secure.LayerStats
}

// Start creates the node's regions, opens its UDP socket and, if
// cfg.MetricsAddr is set, its metrics listener, and starts serving. An
// invalid or unusable cfg is reported as a *FieldError. The caller must
// Close the Server (or Run it) to release the socket and goroutines.
func Start(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var dir *durable.Dir
	if cfg.Dir != "" {
		var err error
		if dir, err = durable.Open(cfg.Dir, cfg.Size, ReplyCacheEntries, cfg.Sync, cfg.Logger); err != nil {
			return nil, fields.Unusable("Dir", err)
		}
	}
	store, err := newStore(&cfg, dir)
	if err != nil {
		closeDir(dir)
		return nil, err
	}
	conn, err := netio.ListenUDP(cfg.Listen, netio.UDPConfig{Logger: cfg.Logger, BusyPoll: cfg.BusyPoll})
	if err != nil {
		closeDir(dir)
		return nil, fields.Unusable("Listen", err)
	}
	mtu := cfg.MTU
	if mtu == 0 {
		mtu = transport.DefaultMTU
	}
	// Read the region table before the node owns the store: from then
	// on only the node's goroutines may touch it. The table
	// does not change while the node runs.
	regions := store.Regions()
	var total int64
	for _, r := range regions {
		total += int64(r.Size)
	}
	ncfg := node.Config{
		Store:     store,
		Transport: transport.Config{MTU: mtu},
	}
	if cfg.Switch != "" {
		// Serve the pool requests and grants of the switch the first
		// region is lent to (validate checked the address).
		ncfg.Pool = &server.PoolServe{Switch: netip.MustParseAddrPort(cfg.Switch), Key: regions[0].Key, Token: cfg.Token,
			Insecure: cfg.Insecure, Replies: ReplyCacheEntries, ReplyTTL: ReplyCacheTTL}
		if dir != nil {
			ncfg.Pool.Durable, ncfg.Pool.Kept, ncfg.Pool.KeptReplies = dir, dir.Kept(), dir.KeptReplies()
		}
	}
	nd, err := node.New(conn, ncfg, node.Options{Logger: cfg.Logger, Security: cfg.Security, SecurityOptions: cfg.SecurityOptions})
	if err != nil {
		conn.Close()
		closeDir(dir)
		if dir != nil && errors.Is(err, memnode.ErrGrant) {
			return nil, fields.Unusable("Dir", err)
		}
		return nil, fmt.Errorf("memd: %w", err)
	}
	s := &Server{
		log:     cfg.Logger,
		conn:    conn,
		node:    nd,
		mtu:     mtu,
		regions: regions,
		bytes:   total,
		dir:     dir,
	}
	s.close = sync.OnceValue(s.shutdown)
	if cfg.MetricsAddr != "" {
		if s.metrics, err = daemon.StartMetrics("memd", cfg.MetricsAddr, s.log, s.metricsHandler); err != nil {
			nd.Close()
			closeDir(dir)
			return nil, err
		}
	}
	attrs := []any{"addr", s.Addr().String(), "mtu", mtu, "regions", len(regions), "region_bytes", total}
	s.log.Info("memd: serving", s.metrics.AppendAttr(attrs)...)
	// Never the keys: they are capabilities (the operator has them, in
	// the key file or on stdout).
	for i, r := range regions {
		s.log.Info("memd: region", "index", i, "size", r.Size, "perm", r.Perm.String())
	}
	if dir != nil {
		s.log.Info("memd: durable: the lent memory and grants live in "+cfg.Dir, "sync", cfg.Sync.String(), "new", dir.Fresh(), "grants_kept", len(dir.Kept()), "replies_kept", len(dir.KeptReplies()))
	} else if avail, ok := availMem(); ok && s.bytes > avail {
		// The pages are touched only as clients write: a start is not
		// refused, but the operator is told what filling them will do.
		s.log.Warn(fmt.Sprintf("memd: the regions (%s) are larger than the memory available now (%s): as clients fill them the machine will swap, or the kernel kill a process",
			formatBytes(s.bytes), formatBytes(avail)))
	}
	if id := cfg.Security; id != nil {
		s.log.Info(fmt.Sprintf("memd: sealing every datagram (role %v, name %q): only processes with a credential of this fabric are answered", id.Cert.Role, id.Cert.Name),
			"key", secure.Fingerprint(id.Cert.Key), "authority", secure.Fingerprint(id.Authority), "encrypt", !cfg.SecurityOptions.AuthenticateOnly)
	}
	if cfg.Switch != "" && cfg.Insecure {
		s.log.Warn("memd: running without authentication: anyone who can send to " + s.Addr().String() +
			" with the address of the switch " + cfg.Switch + " can grant, rebuild and free pool regions on this node, and anyone who can send to the switch can pose as it")
	}
	s.lendDone = make(chan struct{})
	if cfg.Switch == "" {
		close(s.lendDone)
	} else if err := s.startLending(netip.MustParseAddrPort(cfg.Switch), ctrlclient.Options{Token: cfg.Token, Insecure: cfg.Insecure}, regions[0]); err != nil {
		close(s.lendDone)
		s.abort()
		return nil, err
	}
	return s, nil
}

// startLending makes the first offer of region r to the switch sw. A
// switch that refuses it (a wrong fabric token, a pool that cannot take
// the node) fails the start with a *FieldError for Switch: retrying would
// not change the answer. A switch that does not answer yet (not started,
// restarting) is offered the region again every second in the background
// until it accepts; the node then repeats the offer as its heartbeat.
func (s *Server) startLending(sw netip.AddrPort, opts ctrlclient.Options, r memnode.RegionInfo) error {
	ctx, cancel := context.WithCancel(context.Background())
	s.stopLend = cancel
	s.leave = func() {
		lctx, lcancel := context.WithTimeout(context.Background(), LeaveTimeout)
		defer lcancel()
		if err := s.node.Leave(lctx, sw, r.Key, opts); err != nil {
			s.log.Warn("memd: could not tell the switch that this node stops lending; it counts the node dead after its heartbeat timeout", "switch", sw, "err", err)
		}
	}
	id, err := s.node.Lend(ctx, sw, r.Key, uint64(r.Size), opts)
	if err == nil {
		s.log.Info("memd: lending to the pool", "switch", sw, "node", id, "bytes", r.Size)
		close(s.lendDone)
		return nil
	}
	if refusal(err) {
		cancel()
		return fields.Unusable("Switch", explainLendRefusal(sw.String(), err))
	}
	s.log.Warn("memd: no switch answers yet; offering the region again every second", "switch", sw, "err", err)
	go s.lend(ctx, sw, opts, r)
	return nil
}

// LeaveTimeout bounds how long Close waits for the switch to take the
// word that the node stops lending.
const LeaveTimeout = time.Second

// ErrLendRefused is wrapped by the error Start returns (inside a
// *FieldError for Switch) when the switch answers the node's first pool
// offer with a refusal; errors.Is also matches the switch's wire.Status
// (wire.StatusAuth for a fabric token the switch does not accept).
var ErrLendRefused = errors.New("the switch refused this node's pool offer")

// refusal reports whether err is the switch's answer (a status) rather
// than the lack of one.
func refusal(err error) bool {
	_, ok := errors.AsType[wire.Status](err)
	return ok
}

func explainLendRefusal(sw string, err error) error {
	if errors.Is(err, wire.StatusAuth) {
		return fmt.Errorf("%w: %s: %w: this node's fabric token is not the switch's; start memd with the switch's token", ErrLendRefused, sw, err)
	}
	return fmt.Errorf("%w: %s: %w", ErrLendRefused, sw, err)
}

// lend offers region r to the switch's pool every second until the switch
// accepts it, then lets the node repeat the offer as its heartbeat until
// ctx ends. It logs when the answer changes (no answer,
// a refusal), not every try.
func (s *Server) lend(ctx context.Context, sw netip.AddrPort, opts ctrlclient.Options, r memnode.RegionInfo) {
	defer close(s.lendDone)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	refused := false // the last answer was a refusal
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		id, err := s.node.Lend(ctx, sw, r.Key, uint64(r.Size), opts)
		if err == nil {
			s.log.Info("memd: lending to the pool", "switch", sw, "node", id, "bytes", r.Size)
			return
		}
		if ctx.Err() != nil || errors.Is(err, node.ErrClosed) {
			return
		}
		if now := refusal(err); now != refused {
			refused = now
			if now {
				s.log.Error("memd: the switch refuses the pool offer; retrying every second", "switch", sw, "err", explainLendRefusal(sw.String(), err))
			} else {
				s.log.Warn("memd: the switch stopped answering; retrying every second", "switch", sw, "err", err)
			}
		}
	}
}

// closeDir closes dir (nil: none) on a failed start.
func closeDir(dir *durable.Dir) {
	if dir != nil {
		_ = dir.Close()
	}
}

// newStore builds the store cfg describes: the key file's regions, or one
// region of cfg.Size bytes under a random key (dir's memory for a
// durable node).
func newStore(cfg *Config, dir *durable.Dir) (*memnode.Store, error) {
	if cfg.KeyFile == "" {
		st, err := memnode.NewStore(memnode.Config{MaxRegions: 1})
		if err != nil {
			return nil, fmt.Errorf("memd: %w", err)
		}
		if dir != nil {
			// The file's pages, not the machine's memory, bound it.
			if _, err := st.Register(dir.Mem(), cfg.Perm, 0); err != nil {
				return nil, fields.Unusable("Size", err)
			}
			return st, nil
		}
		if err := fitsMemory(cfg.Size); err != nil {
			return nil, fields.Unusable("Size", err)
		}
		// Key 0 draws a random key from crypto/rand. make gives lazily
		// mapped zero pages, so a large region costs no memory up front.
		if _, err := st.Alloc(int(cfg.Size), cfg.Perm, 0); err != nil {
			return nil, fields.Unusable("Size", err)
		}
		return st, nil
	}
	keyErr := func(err error) error {
		return fields.Unusable("KeyFile", fmt.Errorf("%s: %w", cfg.KeyFile, err))
	}
	// The keys are capabilities: a key file others can read or write is
	// refused, as a fabric token file is.
	f, err := secretfile.Open(cfg.KeyFile, "key file")
	if err != nil {
		return nil, fields.Unusable("KeyFile", err)
	}
	specs, err := memnode.LoadKeyFile(f)
	f.Close()
	if err != nil {
		return nil, keyErr(err)
	}
	if len(specs) == 0 {
		return nil, keyErr(ErrNoRegions)
	}
	st, err := memnode.NewStore(memnode.Config{MaxRegions: len(specs)})
	if err != nil {
		return nil, fmt.Errorf("memd: %w", err)
	}
	var total int64
	for _, sp := range specs {
		total += min(sp.Size, math.MaxInt64-total) // saturates
	}
	if err := fitsMemory(total); err != nil {
		return nil, keyErr(err)
	}
	// Errors name a region by its place in the file, never by its key.
	for i, sp := range specs {
		if sp.Size > math.MaxInt {
			return nil, keyErr(fmt.Errorf("region %d: %w: %d bytes exceed this platform's int", i+1, memnode.ErrBadSize, sp.Size))
		}
		if _, err := st.Alloc(int(sp.Size), sp.Perm, sp.Key); err != nil {
			return nil, keyErr(fmt.Errorf("region %d: %w", i+1, err))
		}
	}
	return st, nil
}

// ErrExceedsMemory is wrapped by the error Start returns (inside a
// *FieldError for Size or KeyFile) when the regions together are larger
// than the machine's RAM: the runtime could not allocate them, or the
// node would swap.
var ErrExceedsMemory = errors.New("regions larger than this machine's memory")

// physMem is physicalMemory, and availMem availableMemory, replaced by
// tests.
var (
	physMem  = physicalMemory
	availMem = availableMemory
)

// fitsMemory checks that regions of total bytes fit the machine's RAM,
// where the system reports it (Linux); elsewhere it accepts any total.
func fitsMemory(total int64) error {
	ram, ok := physMem()
	if !ok || total <= ram {
		return nil
	}
	return fmt.Errorf("%w: %s of regions requested, this machine has %s of memory: ask for less",
		ErrExceedsMemory, formatBytes(total), formatBytes(ram))
}

// formatBytes writes n bytes with a binary unit, to one decimal.
func formatBytes(n int64) string {
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	if n < 1<<10 {
		return fmt.Sprintf("%d bytes", n)
	}
	v, i := float64(n)/(1<<10), 0
	for v >= 1<<10 && i < len(units)-1 {
		v /= 1 << 10
		i++
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

// FormatKey writes a region key the way memd prints it: "0x" and 16
// lowercase hexadecimal digits. memnode.LoadKeyFile and
// strconv.ParseUint(s, 0, 64) read it back.
func FormatKey(key uint64) string { return fmt.Sprintf("0x%016x", key) }

// Addr is the UDP address the node serves on.
func (s *Server) Addr() netip.AddrPort { return s.conn.LocalAddr() }

// MetricsAddr is the metrics listener's TCP address ("127.0.0.1:9470"),
// or "" when Config.MetricsAddr was empty.
func (s *Server) MetricsAddr() string { return s.metrics.Addr() }

// MTU is the largest datagram the node sends, in bytes.
func (s *Server) MTU() int { return s.mtu }

// Regions describes the node's regions, sorted by key. The caller may
// modify the returned slice.
func (s *Server) Regions() []memnode.RegionInfo {
	out := make([]memnode.RegionInfo, len(s.regions))
	copy(out, s.regions)
	return out
}

// RegionBytes is the total size of the node's regions, in bytes.
func (s *Server) RegionBytes() int64 { return s.bytes }

// Stats returns the node's counters. It may be called after Close, for
// the final values.
func (s *Server) Stats() Stats {
	return Stats{Node: s.node.Stats(), UDP: s.conn.Stats(), Security: s.node.SecurityStats()}
}

// Run blocks until ctx is done, or until the metrics server fails, and
// then closes the server. It returns the metrics server's error, if that
// is what ended it, joined with Close's; a cancelled ctx is not an error.
func (s *Server) Run(ctx context.Context) error { return daemon.Run(ctx, s.metrics, s.Close) }

// abort releases what a failed Start opened: the metrics listener, the
// durable directory,
// node and its socket.
func (s *Server) abort() {
	_ = s.metrics.Shutdown()
	_ = s.node.Close()
	closeDir(s.dir)
}

// Close shuts the node down: it stops the metrics server gracefully
// (scrapes in progress get up to ShutdownTimeout to finish), then closes
// the node and its socket; responses that peers have not yet
// acknowledged are dropped, and those peers' operations time out. It logs
// the final counters and is idempotent: later calls return the first
// call's result.
func (s *Server) Close() error { return s.close() }

// shutdown is Close's work, done once.
func (s *Server) shutdown() error {
	if s.stopLend != nil {
		s.stopLend()
	}
	<-s.lendDone
	if s.leave != nil {
		s.leave()
	}
	var errs []error
	if err := s.metrics.Shutdown(); err != nil {
		errs = append(errs, err)
	}
	if err := s.node.Close(); err != nil {
		errs = append(errs, fmt.Errorf("memd: close: %w", err))
	}
	if s.dir != nil {
		// After the node: nothing writes the memory any more.
		if err := s.dir.Close(); err != nil {
			errs = append(errs, fmt.Errorf("memd: %w", err))
		}
	}
	st := s.Stats()
	t := &st.Node.Transport
	s.log.Info("memd: stopped",
		"requests_served", st.Node.Server.RequestsServed,
		"requests_refused", st.Node.Server.RequestsRefused,
		"packets_sent", t.PacketsSent,
		"packets_received", t.PacketsReceived,
		"packets_retransmitted", t.PacketsRetransmitted,
		"malformed", t.Malformed,
		"unexpected", t.Unexpected,
		"peers_dead", t.PeersDead)
	return errors.Join(errs...)
}
