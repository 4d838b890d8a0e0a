package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/ndma/ndma/internal/metricsrv"
)

// ShutdownTimeout bounds how long a daemon's Close waits for metrics
// scrapes in progress to finish before it drops their connections.
const ShutdownTimeout = 5 * time.Second

// Metrics is a daemon's running metrics listener. A nil *Metrics is a
// daemon without one: its methods then report no address, never fail and
// shut nothing down.
type Metrics struct {
	pkg string
	srv *metricsrv.Server
}

// StartMetrics serves the handler that handler builds at GET /metrics on
// addr (TCP, "host:port"). pkg names the daemon in log lines and errors. An
// address that cannot be listened on is a *FieldError for MetricsAddr
// (Fields.Unusable); a handler that cannot be built is "pkg: metrics:
// err".
func StartMetrics(pkg, addr string, log *slog.Logger, handler func() (http.Handler, error)) (*Metrics, error) {
	h, err := handler()
	if err != nil {
		return nil, fmt.Errorf("%s: metrics: %w", pkg, err)
	}
	srv, err := metricsrv.Start(addr, h, log, pkg)
	if le, ok := errors.AsType[*metricsrv.ListenError](err); ok {
		return nil, Fields{Pkg: pkg}.Unusable("MetricsAddr", le.Err)
	}
	if err != nil {
		return nil, err
	}
	return &Metrics{pkg: pkg, srv: srv}, nil
}

// Addr is the listener's TCP address ("127.0.0.1:9471"), or "" for a nil
// m.
func (m *Metrics) Addr() string {
	if m == nil {
		return ""
	}
	return m.srv.Addr().String()
}

// AppendAttr appends the "metrics" log attribute, the URL scrapes go to,
// to attrs (nothing for a nil m).
func (m *Metrics) AppendAttr(attrs []any) []any {
	if m == nil {
		return attrs
	}
	return append(attrs, "metrics", "http://"+m.Addr()+"/metrics")
}

// Failed delivers the error if the server stops on its own; for a nil m
// it is nil, never ready.
func (m *Metrics) Failed() <-chan error {
	if m == nil {
		return nil
	}
	return m.srv.Failed()
}

// Shutdown stops the server gracefully: scrapes in progress get up to
// ShutdownTimeout to finish. Its error is "pkg: metrics shutdown: err".
func (m *Metrics) Shutdown() error {
	if m == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	if err := m.srv.Shutdown(ctx); err != nil {
		return fmt.Errorf("%s: metrics shutdown: %w", m.pkg, err)
	}
	return nil
}
