package frontend

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/ndma/ndma/internal/tcpfront"
	"github.com/ndma/ndma/kv"
)

// Store is the key space a front end serves: a *kv.Client.
type Store interface {
	GetItem(ctx context.Context, key []byte) (kv.Item, error)
	// GetMulti and SetMulti are GetItem and SetWith over several keys
	// with their reads or writes in flight at once.
	GetMulti(ctx context.Context, keys [][]byte) ([]kv.Item, []error)
	SetMulti(ctx context.Context, keys, vals [][]byte, o kv.SetOptions) ([]uint64, []error, error)
	SetWith(ctx context.Context, key, val []byte, o kv.SetOptions) (uint64, error)
	AddWith(ctx context.Context, key, val []byte, o kv.SetOptions) (uint64, error)
	Replace(ctx context.Context, key, val []byte, o kv.SetOptions) (uint64, error)
	CompareAndSwapWith(ctx context.Context, key, val []byte, ver uint64, o kv.SetOptions) (uint64, error)
	Append(ctx context.Context, key, val []byte) (uint64, error)
	Prepend(ctx context.Context, key, val []byte) (uint64, error)
	Delete(ctx context.Context, key []byte) error
	Incr(ctx context.Context, key []byte, delta int64) (int64, error)
	Touch(ctx context.Context, key []byte, ttl time.Duration) (uint64, error)
	// MaxValue is the largest value a key of klen bytes may have.
	MaxValue(klen int) int
}

// Protocol is what a listener speaks.
type Protocol int

// The protocols.
const (
	Memcached Protocol = iota // the memcached text protocol
	Redis                     // RESP2, and RESP3 after HELLO 3
)

func (p Protocol) String() string {
	if p == Redis {
		return "redis"
	}
	return "memcached"
}

// Defaults and bounds of Config.
const (
	DefaultMaxConns   = 1024
	MaxMaxConns       = 1 << 16
	DefaultMaxLine    = 64 << 10
	MinMaxLine        = 512
	MaxMaxLine        = 1 << 20
	DefaultMaxRequest = 4 << 20
	MaxMaxRequest     = 1 << 30
	DefaultMaxArgs    = 1024
	MaxMaxArgs        = 1 << 20
	DefaultTimeout    = 5 * time.Second
	// replyBuffer is the bytes of replies a connection gathers before
	// it writes them.
	replyBuffer = 64 << 10
)

// Config configures a front end. Zero fields take the defaults.
type Config struct {
	// Store is the key space served (required).
	Store Store
	// MaxConns bounds the connections served at once (default 1024).
	MaxConns int
	// MaxLine bounds a command line, in bytes (default 64 KiB: a
	// memcached get of many keys is one line).
	MaxLine int
	// MaxRequest bounds the bytes of one request's arguments, values
	// included (default 4 MiB, and at least the key space's largest
	// value and a line).
	MaxRequest int
	// MaxArgs bounds the arguments of one RESP request (default 1024).
	MaxArgs int
	// Timeout bounds each store operation (default 5 s).
	Timeout time.Duration
	// IdleTimeout closes a connection that sends nothing for this long
	// (zero: never).
	IdleTimeout time.Duration
	// Logger receives the front end's log (nil: discarded).
	Logger *slog.Logger
}

// ErrConfig is wrapped by New's error for an invalid Config.
var ErrConfig = errors.New("frontend: invalid config")

func (c *Config) validate() error {
	if c.Store == nil {
		return fmt.Errorf("%w: no Store", ErrConfig)
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.MaxConns, DefaultMaxConns)
	def(&c.MaxLine, DefaultMaxLine)
	def(&c.MaxArgs, DefaultMaxArgs)
	def(&c.MaxRequest, max(DefaultMaxRequest, c.Store.MaxValue(1)+c.MaxLine))
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	switch {
	case c.MaxConns < 1 || c.MaxConns > MaxMaxConns:
		return fmt.Errorf("%w: MaxConns %d (want 1 to %d)", ErrConfig, c.MaxConns, MaxMaxConns)
	case c.MaxLine < MinMaxLine || c.MaxLine > MaxMaxLine:
		return fmt.Errorf("%w: MaxLine %d (want %d to %d)", ErrConfig, c.MaxLine, MinMaxLine, MaxMaxLine)
	case c.MaxRequest < c.MaxLine || c.MaxRequest > MaxMaxRequest:
		return fmt.Errorf("%w: MaxRequest %d (want MaxLine, %d, to %d)", ErrConfig, c.MaxRequest, c.MaxLine, MaxMaxRequest)
	case c.MaxArgs < 3 || c.MaxArgs > MaxMaxArgs:
		return fmt.Errorf("%w: MaxArgs %d (want 3 to %d)", ErrConfig, c.MaxArgs, MaxMaxArgs)
	case c.Timeout < 0 || c.IdleTimeout < 0:
		return fmt.Errorf("%w: a negative timeout", ErrConfig)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Stats counts a front end's work.
type Stats struct {
	Conns    int    // connections served now
	Accepted uint64 // connections accepted in all
	Refused  uint64 // connections refused: MaxConns reached
	Commands uint64 // requests answered
	Errors   uint64 // requests answered with an error: unknown, malformed, refused
	Hits     uint64 // keys read that were found
	Misses   uint64 // keys read that were not
}

// Server is a running front end. Its methods are safe for concurrent
// use.
type Server struct {
	cfg    Config
	start  time.Time
	base   context.Context
	cancel context.CancelFunc
	front  *tcpfront.Conns // listeners and connections, at most MaxConns
	n      struct{ commands, errors, hits, misses atomic.Uint64 }
}

// New makes a front end of cfg; serve it with Serve or ServeConn.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{cfg: cfg, start: time.Now(), base: ctx, cancel: cancel,
		front: tcpfront.New(cfg.MaxConns)}, nil
}

// ErrClosed is returned by Serve once the server is closed.
var ErrClosed = errors.New("frontend: closed")

// Serve accepts connections on l and serves them in protocol p until
// Close (ErrClosed) or until l fails.
func (s *Server) Serve(l net.Listener, p Protocol) error {
	s.cfg.Logger.Info("frontend: serving", "protocol", p.String(), "addr", l.Addr().String())
	err := s.front.Serve(l, func(nc net.Conn) { s.ServeConn(nc, p) })
	if errors.Is(err, tcpfront.ErrClosed) {
		return ErrClosed
	}
	return fmt.Errorf("frontend: %w", err)
}

// ServeConn serves one connection in protocol p until the client
// leaves, breaks the protocol beyond repair, or the server closes; it
// closes nc.
func (s *Server) ServeConn(nc net.Conn, p Protocol) {
	defer nc.Close()
	c := &conn{s: s, nc: nc, p: p, r: bufio.NewReaderSize(nc, s.cfg.MaxLine), w: bufio.NewWriterSize(nc, replyBuffer)}
	id, full := s.front.Enter(nc)
	if full {
		c.refuseConn()
	}
	if id == 0 {
		return
	}
	c.id = id
	defer s.front.Leave(nc)
	if p == Redis {
		c.serveRedis()
	} else {
		c.serveMemcached()
	}
}

// Close stops the listeners and ends every connection; requests in
// flight are cancelled.
func (s *Server) Close() error {
	s.front.Close()
	s.cancel()
	s.front.Wait()
	return nil
}

// Stats returns the front end's counters.
func (s *Server) Stats() Stats {
	n, accepted, refused := s.front.Counts()
	return Stats{Conns: n, Accepted: accepted, Refused: refused, Commands: s.n.commands.Load(),
		Errors: s.n.errors.Load(), Hits: s.n.hits.Load(), Misses: s.n.misses.Load()}
}

// conn is one client connection.
type conn struct {
	s     *Server
	nc    net.Conn
	p     Protocol
	r     *bufio.Reader
	w     *bufio.Writer
	resp3 bool
	id    uint64 // the connection's number, from 1
}

// errLineTooLong is a line over Config.MaxLine.
var errLineTooLong = errors.New("line too long")

// readLine reads one line, without its "\r\n" or "\n". The slice is
// valid until the next read.
func (c *conn) readLine() ([]byte, error) {
	if c.s.cfg.IdleTimeout > 0 && c.r.Buffered() == 0 {
		_ = c.nc.SetReadDeadline(time.Now().Add(c.s.cfg.IdleTimeout))
	}
	line, err := c.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return nil, errLineTooLong
	}
	if err != nil {
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// readData reads n bytes and the "\r\n" after them; ok is false when the
// "\r\n" is not there.
func (c *conn) readData(n int) (data []byte, ok bool, err error) {
	buf := make([]byte, n+2)
	if _, err := io.ReadFull(c.r, buf); err != nil {
		return nil, false, err
	}
	return buf[:n], buf[n] == '\r' && buf[n+1] == '\n', nil
}

// discard drops n bytes of input.
func (c *conn) discard(n int64) error {
	_, err := io.CopyN(io.Discard, c.r, n)
	return err
}

// flush writes the replies gathered once no more requests are waiting
// in the input.
func (c *conn) flush() error {
	if c.r.Buffered() > 0 {
		return nil
	}
	return c.w.Flush()
}

// ctx bounds one store operation.
func (c *conn) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.s.base, c.s.cfg.Timeout)
}

// refuseConn answers a connection over MaxConns.
func (c *conn) refuseConn() {
	if c.p == Redis {
		c.w.WriteString("-ERR max number of clients reached\r\n")
	} else {
		c.w.WriteString("SERVER_ERROR too many open connections\r\n")
	}
	_ = c.w.Flush()
}

// errText is err's text on one line, for a reply.
func errText(err error) string {
	b := []byte(err.Error())
	for i, ch := range b {
		if ch == '\r' || ch == '\n' {
			b[i] = ' '
		}
	}
	if len(b) > 200 {
		b = b[:200]
	}
	return string(b)
}
