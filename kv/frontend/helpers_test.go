package frontend

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// serve starts a front end of cfg (a memStore of values up to 1 KiB
// when cfg.Store is nil) on a loopback TCP port speaking p.
func serve(t *testing.T, p Protocol, cfg Config) (string, *Server) {
	t.Helper()
	if cfg.Store == nil {
		cfg.Store = newMemStore(1024)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l, p) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; !errors.Is(err, ErrClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	return l.Addr().String(), s
}

// rawClient is a client speaking raw bytes.
type rawClient struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *rawClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawClient{t: t, c: c, r: bufio.NewReader(c)}
}

func (c *rawClient) send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.c, s); err != nil {
		c.t.Fatalf("send %q: %v", s, err)
	}
}

// expect reads as many bytes as want has and compares them.
func (c *rawClient) expect(want string) {
	c.t.Helper()
	_ = c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, len(want))
	n, err := io.ReadFull(c.r, got)
	if err != nil || string(got) != want {
		c.t.Fatalf("read %q (%v), want %q", got[:n], err, want)
	}
}

// do sends req and expects want.
func (c *rawClient) do(req, want string) {
	c.t.Helper()
	c.send(req)
	c.expect(want)
}

// line reads one reply line, without "\r\n".
func (c *rawClient) line() string {
	c.t.Helper()
	_ = c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	l, err := c.r.ReadString('\n')
	if err != nil {
		c.t.Fatalf("read a line: %q %v", l, err)
	}
	return strings.TrimSuffix(l, "\r\n")
}

// closed expects the server to close the connection (a reset when it
// closed with input unread).
func (c *rawClient) closed() {
	c.t.Helper()
	_ = c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c.r)
	if errors.Is(err, syscall.ECONNRESET) {
		err = nil
	}
	if err != nil || len(b) > 0 {
		c.t.Fatalf("after the end: %q %v, want the connection closed", b, err)
	}
}
