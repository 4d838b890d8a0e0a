package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"

	"github.com/ndma/ndma/internal/daemon/daemontest"
)

func TestMetricsNil(t *testing.T) {
	var m *Metrics
	if m.Addr() != "" || m.Failed() != nil || m.Shutdown() != nil {
		t.Errorf("nil Metrics: Addr %q, Failed %v, Shutdown %v", m.Addr(), m.Failed(), m.Shutdown())
	}
	if got := m.AppendAttr([]any{"addr", "x"}); len(got) != 2 {
		t.Errorf("nil Metrics: AppendAttr added %v", got[2:])
	}
}

func TestStartMetrics(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	h := func() (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok_metric 1\n") }), nil
	}
	m, err := StartMetrics("memd", "127.0.0.1:0", log, h)
	if err != nil {
		t.Fatal(err)
	}
	attrs := m.AppendAttr(nil)
	if len(attrs) != 2 || attrs[0] != "metrics" || attrs[1] != "http://"+m.Addr()+"/metrics" {
		t.Errorf("AppendAttr = %v", attrs)
	}
	if got := daemontest.Scrape(t, m.Addr()); got["ok_metric"] != 1 {
		t.Errorf("scrape: %v", got)
	}
	if err := m.Shutdown(); err != nil {
		t.Errorf("Shutdown: %v", err)
	}

	// An address in use is a *FieldError for MetricsAddr.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = StartMetrics("switchd", ln.Addr().String(), log, h)
	if fe, ok := errors.AsType[*FieldError](err); !ok || fe.Pkg != "switchd" || fe.Field != "MetricsAddr" {
		t.Errorf("address in use: %v, want a *FieldError for switchd's MetricsAddr", err)
	}

	// A handler that cannot be built is named.
	_, err = StartMetrics("memd", "127.0.0.1:0", log, func() (http.Handler, error) { return nil, errors.New("boom") })
	if err == nil || err.Error() != "memd: metrics: boom" {
		t.Errorf("handler error: %v", err)
	}
}

func TestRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	closeErr := errors.New("close failed")
	closed := 0
	err := Run(ctx, nil, func() error { closed++; return closeErr })
	if closed != 1 || !errors.Is(err, closeErr) {
		t.Errorf("Run after cancel: closed %d times, err %v", closed, err)
	}
	if err := Run(ctx, nil, func() error { return nil }); err != nil {
		t.Errorf("Run after cancel, clean close: %v", err)
	}
}
