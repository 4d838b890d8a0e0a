package metricsrv

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"testing"
)

func TestServeAndShutdown(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ndma_up 1\n") })
	log := slog.New(slog.DiscardHandler)
	s, err := Start("127.0.0.1:0", h, log, "test")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + s.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "ndma_up 1\n" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	// Only GET /metrics is served.
	resp, err = http.Get("http://" + s.Addr().String() + "/other")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("/other: %d", resp.StatusCode)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-s.Failed():
		t.Fatalf("a graceful shutdown reported %v", err)
	default:
	}
	// The address is taken while the first one runs: a ListenError.
	s2, err := Start("127.0.0.1:0", h, log, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Shutdown(context.Background())
	_, err = Start(s2.Addr().String(), h, log, "test")
	var le *ListenError
	if !errors.As(err, &le) {
		t.Fatalf("got %v, want a *ListenError", err)
	}
}
