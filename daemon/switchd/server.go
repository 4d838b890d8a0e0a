package switchd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"

	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/fabric/ctrlstore/etcdstore"
	"github.com/ndma/ndma/internal/daemon"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// ShutdownTimeout bounds how long Close waits for metrics scrapes in
// progress to finish before it drops their connections.
const ShutdownTimeout = daemon.ShutdownTimeout

// Server is a running switch. Create one with Start; all methods are safe
// for concurrent use.
type Server struct {
	log  *slog.Logger
	cfg  Config // validated, defaults applied; fixed after Start
	conn *netio.UDPConn
	srv  *fabric.Server
	etcd *etcdstore.Store // nil without Config.Etcd

	metrics *daemon.Metrics // nil without a metrics listener
	close   func() error    // shutdown, once
}

// Stats is a snapshot of a Server's counters.
type Stats struct {
	// Switch holds the forwarding, control, aggregation-pool, fault
	// injection and transport counters, and the group and live-member
	// gauges.
	Switch fabric.Stats
	// UDP holds the socket's datagram counters.
	UDP netio.UDPStats
	// Security holds the security layer's counters (zero without
	// Config.Security).
	Security secure.LayerStats
	// Etcd holds the pool map's store's counters (zero without
	// Config.Etcd).
	Etcd etcdstore.Stats
}

// Start opens the switch's UDP socket and, if cfg.MetricsAddr is set, its
// metrics listener, and starts forwarding. An invalid or unusable cfg is
// reported as a *FieldError. The caller must Close the Server (or Run it)
// to release the socket and goroutines.
func Start(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	mtu := cfg.MTU
	if cfg.Security != nil {
		mtu -= wire.TagLen // sealed datagrams carry the tag after it
	}
	fcfg := fabric.Config{
		Token:            cfg.Token,
		Insecure:         cfg.Insecure,
		HeartbeatTimeout: cfg.HeartbeatTimeout,
		Transport:        transport.Config{MTU: mtu},
		Pool:             fabric.PoolConfig{Slots: cfg.PoolSlots},
		Fault:            cfg.Fault,
		Parent:           cfg.parent,
		Children:         cfg.children,
	}
	readers := max(cfg.Readers, 1)
	ucfg := netio.UDPConfig{Logger: cfg.Logger, BusyPoll: cfg.BusyPoll, ReusePort: readers > 1}
	conn, err := netio.ListenUDP(cfg.Listen, ucfg)
	if err != nil {
		return nil, fields.Unusable("Listen", err)
	}
	// The other sockets bind the first one's port (Listen may ask for
	// any).
	var more []netio.Conn
	if readers > 1 {
		host, _, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			conn.Close()
			return nil, fields.Unusable("Listen", err)
		}
		addr := net.JoinHostPort(host, strconv.Itoa(int(conn.LocalAddr().Port())))
		for range readers - 1 {
			c, err := netio.ListenUDP(addr, ucfg)
			if err != nil {
				conn.Close()
				for _, c := range more {
					c.Close()
				}
				return nil, fields.Unusable("Readers", err)
			}
			more = append(more, c)
		}
	}
	closeConns := func() {
		conn.Close()
		for _, c := range more {
			c.Close()
		}
	}
	var store *etcdstore.Store
	if len(cfg.Etcd) > 0 {
		if store, err = openEtcd(&cfg, conn.LocalAddr()); err != nil {
			closeConns()
			return nil, err
		}
		fcfg.Store = store
	}
	sw, err := fabric.New(fcfg)
	if err != nil {
		closeConns()
		closeStore(store)
		return nil, fmt.Errorf("switchd: %w", err)
	}
	fsrv, err := fabric.NewServerWith(conn, sw, fabric.ServerOptions{Logger: cfg.Logger, Security: cfg.Security, SecurityOptions: cfg.SecurityOptions, Conns: more})
	if err != nil {
		closeStore(store)
		return nil, fields.Unusable("Security", err) // conn is closed
	}
	s := &Server{
		log:  cfg.Logger,
		cfg:  cfg,
		conn: conn,
		srv:  fsrv,
		etcd: store,
	}
	s.close = sync.OnceValue(s.shutdown)
	if cfg.MetricsAddr != "" {
		if s.metrics, err = daemon.StartMetrics("switchd", cfg.MetricsAddr, s.log, s.metricsHandler); err != nil {
			s.srv.Close()
			return nil, err
		}
	}
	attrs := []any{"addr", s.Addr().String(), "mtu", cfg.MTU,
		"heartbeat_timeout", cfg.HeartbeatTimeout, "pool_slots", cfg.PoolSlots,
		"authenticated", len(cfg.Token) > 0, "sealed", cfg.Security != nil, "readers", readers}
	if cfg.parent.IsValid() {
		attrs = append(attrs, "parent", cfg.parent.String())
	}
	if len(cfg.children) > 0 {
		attrs = append(attrs, "children", len(cfg.children))
	}
	s.log.Info("switchd: serving", s.metrics.AppendAttr(attrs)...)
	if id := cfg.Security; id != nil {
		s.log.Info(fmt.Sprintf("switchd: sealing every datagram (role %v, name %q): only processes with a credential of this fabric are answered", id.Cert.Role, id.Cert.Name),
			"key", secure.Fingerprint(id.Cert.Key), "authority", secure.Fingerprint(id.Authority), "encrypt", !cfg.SecurityOptions.AuthenticateOnly)
	}
	if cfg.Insecure {
		s.log.Warn("switchd: running without authentication: anyone who can send to " + s.Addr().String() +
			" can join jobs, register services, create, open and free pool regions and lend memory to the pool")
	}
	if f := cfg.Fault; faultActive(f) {
		s.log.Warn("switchd: injecting faults into everything sent",
			"drop", f.Drop, "dup", f.Dup, "reorder", f.Reorder, "corrupt", f.Corrupt, "seed", f.Seed)
	}
	return s, nil
}

// Addr is the UDP address the switch serves on.
func (s *Server) Addr() netip.AddrPort { return s.srv.Addr() }

// MetricsAddr is the metrics listener's TCP address ("127.0.0.1:9471"),
// or "" when Config.MetricsAddr was empty.
func (s *Server) MetricsAddr() string { return s.metrics.Addr() }

// MTU is the largest datagram the switch's own streams send, in bytes.
func (s *Server) MTU() int { return s.cfg.MTU }

// Stats returns the switch's counters. It may be called after Close, for
// the final values.
func (s *Server) Stats() Stats {
	st := Stats{Switch: s.srv.Stats(), UDP: s.conn.Stats(), Security: s.srv.SecurityStats()}
	if s.etcd != nil {
		st.Etcd = s.etcd.Stats()
	}
	return st
}

// Groups lists the switch's job and service groups, by id, with their
// members and whether each is alive. It may be called after Close.
func (s *Server) Groups() []fabric.GroupInfo { return s.srv.Groups() }

// Pool returns the pool's memory nodes and regions.
func (s *Server) Pool() ([]ctrl.PoolNodeInfo, []ctrl.PoolSpec) { return s.srv.Pool() }

// Run blocks until ctx is done, or until the metrics server fails, and
// then closes the server. It returns the metrics server's error, if that
// is what ended it, joined with Close's; a cancelled ctx is not an error.
func (s *Server) Run(ctx context.Context) error { return daemon.Run(ctx, s.metrics, s.Close) }

// Close shuts the switch down: it stops the metrics server gracefully
// (scrapes in progress get up to ShutdownTimeout to finish), then stops
// forwarding and closes the socket; members' operations in flight through
// the switch time out at the endpoints. It logs the final counters and is
// idempotent: later calls return the first call's result.
func (s *Server) Close() error { return s.close() }

// shutdown is Close's work, done once.
func (s *Server) shutdown() error {
	var errs []error
	if err := s.metrics.Shutdown(); err != nil {
		errs = append(errs, err)
	}
	if err := s.srv.Close(); err != nil {
		errs = append(errs, fmt.Errorf("switchd: close: %w", err))
	}
	if s.etcd != nil {
		// After the switch: its last changes are written (within the
		// store's DialTimeout), then the lease is revoked.
		if err := s.etcd.Close(); err != nil {
			errs = append(errs, fmt.Errorf("switchd: etcd: %w", err))
		}
	}
	all := s.Stats()
	st := all.Switch
	s.log.Info("switchd: stopped",
		"udp_datagrams_sent", all.UDP.DatagramsSent,
		"udp_datagrams_received", all.UDP.DatagramsReceived,
		"udp_gso_sends", all.UDP.GSOSends,
		"udp_gro_receives", all.UDP.GROReceives,
		"received", st.Received,
		"unicast_out", st.UnicastOut,
		"multicast_out", st.MulticastOut,
		"aggregate_out", st.AggregateOut,
		"anycast_out", st.AnycastOut,
		"control_in", st.ControlIn,
		"auth_failures", st.AuthFailures,
		"malformed", st.Malformed,
		"spoofed", st.Spoofed,
		"forward_dropped", st.ForwardDropped,
		"members_dead", st.MembersDead,
		"members_left", st.MembersLeft,
		"groups", st.Groups)
	return errors.Join(errs...)
}
