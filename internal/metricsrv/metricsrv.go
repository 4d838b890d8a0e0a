// Package metricsrv serves a daemon's Prometheus /metrics over HTTP: the
// listener, the server's lifetime and its graceful shutdown, shared by
// ndma memd and ndma switch.
package metricsrv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Server is a running metrics HTTP server.
type Server struct {
	http      *http.Server
	addr      net.Addr
	serveDone chan struct{} // closed when Serve returns
	failed    chan error    // buffered 1: why the server stopped on its own
	log       *slog.Logger
	name      string
}

// ListenError wraps a failure to listen on the metrics address.
type ListenError struct{ Err error }

func (e *ListenError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *ListenError) Unwrap() error { return e.Err }

// Start listens on addr (TCP, "host:port") and serves h at GET /metrics.
// name prefixes log lines and errors ("memd", "switchd"). A listen error is
// a *ListenError.
func Start(addr string, h http.Handler, log *slog.Logger, name string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &ListenError{Err: err}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	s := &Server{
		http: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
		addr:      ln.Addr(),
		serveDone: make(chan struct{}),
		failed:    make(chan error, 1),
		log:       log,
		name:      name,
	}
	go s.serve(ln)
	return s, nil
}

func (s *Server) serve(ln net.Listener) {
	defer close(s.serveDone)
	err := s.http.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return
	}
	err = fmt.Errorf("%s: metrics server: %w", s.name, err)
	s.log.Error(s.name+": metrics server stopped", "err", err)
	s.failed <- err
}

// Addr is the listener's address.
func (s *Server) Addr() net.Addr { return s.addr }

// Failed delivers the error if the server stops on its own.
func (s *Server) Failed() <-chan error { return s.failed }

// Shutdown stops the server gracefully within ctx (forcefully after) and
// waits for it.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.http.Shutdown(ctx)
	if err != nil {
		s.http.Close()
	}
	<-s.serveDone
	return err
}
