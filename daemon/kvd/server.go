package kvd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/internal/daemon"
	"github.com/ndma/ndma/kv"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
)

// Server is a running owner daemon. Make one with New, then Start it.
type Server struct {
	cfg     Config
	log     *slog.Logger
	conn    *netio.UDPConn
	ep      *endpoint.Endpoint
	metrics *daemon.Metrics
	mu      sync.Mutex
	owner   *kv.Owner // under mu; nil until Start
	close   func() error
}

// Stats is a snapshot of the daemon's counters.
type Stats struct {
	// Owner is the owner's: writes, refusals, failures, freed expired
	// values, keys and heap use (zero before Start).
	Owner    kv.OwnerStats
	Endpoint endpoint.Stats
	UDP      netio.UDPStats
	Security secure.LayerStats
}

// New validates cfg and opens the daemon's socket and, with
// cfg.MetricsAddr, its metrics listener. An invalid or unusable cfg is a
// *FieldError.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	conn, err := netio.ListenUDP(cfg.Listen, netio.UDPConfig{Logger: cfg.Logger})
	if err != nil {
		return nil, fields.Unusable("Listen", err)
	}
	ep, err := endpoint.New(conn, endpoint.Config{Transport: transport.Config{MTU: cfg.MTU}},
		endpoint.Options{Logger: cfg.Logger, Security: cfg.Security, SecurityOptions: cfg.SecurityOptions})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("kvd: %w", err)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, conn: conn, ep: ep}
	s.close = sync.OnceValue(s.shutdown)
	if cfg.MetricsAddr != "" {
		if s.metrics, err = daemon.StartMetrics("kvd", cfg.MetricsAddr, s.log, s.metricsHandler); err != nil {
			ep.Close()
			return nil, err
		}
	}
	if cfg.Security == nil {
		s.log.Warn("kvd: running unsealed: anyone on the network can read the key space's region key in its datagrams, and with it read and write the key space")
	}
	return s, nil
}

// fabric is the options of the daemon's requests to the switch.
func (s *Server) fabric() endpoint.FabricOptions {
	return endpoint.FabricOptions{Token: s.cfg.Token, Insecure: s.cfg.Insecure}
}

// Start opens the key space's region, loads the rank's shards and
// registers the owner with the switch. It may be called again after a
// failure (no switch answered yet); it does nothing once it succeeded.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.owner != nil {
		return nil
	}
	pc, err := pool.New(s.ep, s.cfg.Switch, pool.Options{Fabric: s.fabric()})
	if err != nil {
		return fmt.Errorf("kvd: %w", err)
	}
	reg, err := pc.Open(ctx, s.cfg.Region, s.cfg.RegionKey)
	if err != nil {
		return fmt.Errorf("kvd: opening key space %q (region %d): %w", s.cfg.Space, s.cfg.Region, err)
	}
	o, err := kv.StartOwner(ctx, s.ep, reg, kv.OwnerConfig{Switch: s.cfg.Switch, Fabric: s.fabric(), Space: s.cfg.Space,
		Rank: s.cfg.Rank, WriteTimeout: s.cfg.WriteTimeout, Lease: s.cfg.Lease, GrowAt: s.cfg.GrowAt, Clients: s.cfg.Clients, Standby: s.cfg.Standby, Logger: s.log})
	if err != nil {
		return err
	}
	s.owner = o
	st := o.Stats()
	attrs := []any{"space", s.cfg.Space, "rank", s.cfg.Rank, "addr", s.Addr().String(), "switch", s.cfg.Switch,
		"keys", st.Keys, "heap_used_bytes", st.Heap.UsedBytes, "sealed", s.cfg.Security != nil}
	s.log.Info("kvd: serving", s.metrics.AppendAttr(attrs)...)
	return nil
}

// Addr is the UDP address of the daemon's endpoint.
func (s *Server) Addr() netip.AddrPort { return s.ep.LocalAddr() }

// MetricsAddr is the metrics listener's TCP address, or "" without one.
func (s *Server) MetricsAddr() string { return s.metrics.Addr() }

// Stats returns the daemon's counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	o := s.owner
	s.mu.Unlock()
	st := Stats{Endpoint: s.ep.Stats(), UDP: s.conn.Stats(), Security: s.ep.SecurityStats()}
	if o != nil {
		st.Owner = o.Stats()
	}
	return st
}

// Run blocks until ctx is done, or the metrics server fails, and then
// closes the daemon.
func (s *Server) Run(ctx context.Context) error { return daemon.Run(ctx, s.metrics, s.Close) }

// Close stops the owner (the switch gives its shards' writes to nobody
// until an owner of the rank registers again), the metrics listener and
// the endpoint. It is idempotent.
func (s *Server) Close() error { return s.close() }

func (s *Server) shutdown() error {
	s.mu.Lock()
	o := s.owner
	s.mu.Unlock()
	var errs []error
	if o != nil {
		st := o.Stats()
		o.Close()
		s.log.Info("kvd: stopped", "space", s.cfg.Space, "rank", s.cfg.Rank, "writes", st.Writes, "refused", st.Refused,
			"failed", st.Failed, "expired", st.Expired, "keys", st.Keys)
	}
	if err := s.metrics.Shutdown(); err != nil {
		errs = append(errs, err)
	}
	if err := s.ep.Close(); err != nil {
		errs = append(errs, fmt.Errorf("kvd: close: %w", err))
	}
	return errors.Join(errs...)
}
