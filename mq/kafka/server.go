package kafka

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ndma/ndma/internal/tcpfront"
	"github.com/ndma/ndma/mq"
)

// Defaults and bounds of Config.
const (
	DefaultMaxConns   = 1024
	MaxMaxConns       = 1 << 16
	DefaultMaxFrame   = 8 << 20
	MinMaxFrame       = 64 << 10
	MaxMaxFrame       = 1 << 30
	DefaultFetchBytes = 1 << 20
	DefaultTimeout    = 10 * time.Second
	DefaultMaxGroups  = 1024
	DefaultMaxMembers = 256
	// MaxFetchWait bounds how long a Fetch waits for records, whatever
	// the client asks.
	MaxFetchWait = 30 * time.Second
)

// Config configures a front end. Zero fields take the defaults.
type Config struct {
	// Catalog is the catalog whose topics are served (required).
	Catalog *mq.Catalog
	// Advertise is the host:port clients are told to connect to (in
	// Metadata and FindCoordinator); empty: the address of the listener
	// a client came in on.
	Advertise string
	// MaxConns bounds the connections served at once (default 1024).
	MaxConns int
	// MaxFrame bounds a request's size in bytes (default 8 MiB); a
	// larger request ends its connection.
	MaxFrame int
	// FetchBytes bounds the log bytes one Fetch reads from a partition
	// (default 1 MiB, at least the largest batch).
	FetchBytes int
	// Timeout bounds each request's pool work (default 10 s).
	Timeout time.Duration
	// MaxGroups bounds the consumer groups the coordinator keeps
	// members of (default 1024); MaxMembers the members of a group
	// (default 256).
	MaxGroups, MaxMembers int
	// Topic is the layout of topics that CreateTopics makes (their
	// partitions and copies come from the request); zero fields take
	// DefaultTopic's.
	Topic mq.Layout
	// IdleTimeout closes a connection that sends nothing for this long
	// (zero: never).
	IdleTimeout time.Duration
	// Logger receives the front end's log (nil: discarded).
	Logger *slog.Logger
}

// DefaultTopic is the layout CreateTopics uses where Config.Topic has
// zero fields: 1 MiB segments, 8 of them, batches up to 64 KiB, 16
// consumer groups.
var DefaultTopic = mq.Layout{SegmentBytes: 1 << 20, Segments: 8, MaxBatch: 64 << 10, Groups: 16}

// ErrConfig is wrapped by New's error for an invalid Config.
var ErrConfig = errors.New("kafka: invalid config")

func (c *Config) validate() error {
	if c.Catalog == nil {
		return fmt.Errorf("%w: no Catalog", ErrConfig)
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.MaxConns, DefaultMaxConns)
	def(&c.MaxFrame, DefaultMaxFrame)
	def(&c.FetchBytes, DefaultFetchBytes)
	def(&c.MaxGroups, DefaultMaxGroups)
	def(&c.MaxMembers, DefaultMaxMembers)
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	l := &c.Topic
	if l.SegmentBytes == 0 {
		l.SegmentBytes = DefaultTopic.SegmentBytes
	}
	if l.Segments == 0 {
		l.Segments = DefaultTopic.Segments
	}
	if l.MaxBatch == 0 {
		l.MaxBatch = min(DefaultTopic.MaxBatch, l.SegmentBytes)
	}
	if l.Groups == 0 {
		l.Groups = DefaultTopic.Groups
	}
	check := *l
	check.Partitions = 1
	switch {
	case c.MaxConns < 1 || c.MaxConns > MaxMaxConns:
		return fmt.Errorf("%w: MaxConns %d (want 1 to %d)", ErrConfig, c.MaxConns, MaxMaxConns)
	case c.MaxFrame < MinMaxFrame || c.MaxFrame > MaxMaxFrame:
		return fmt.Errorf("%w: MaxFrame %d (want %d to %d)", ErrConfig, c.MaxFrame, MinMaxFrame, MaxMaxFrame)
	case c.FetchBytes < mq.BatchHeaderBytes || c.FetchBytes > MaxMaxFrame:
		return fmt.Errorf("%w: FetchBytes %d (want %d to %d)", ErrConfig, c.FetchBytes, mq.BatchHeaderBytes, MaxMaxFrame)
	case c.MaxGroups < 1 || c.MaxGroups > 1<<20 || c.MaxMembers < 1 || c.MaxMembers > 1<<16:
		return fmt.Errorf("%w: MaxGroups %d, MaxMembers %d (want 1 to 2^20 and 1 to 2^16)", ErrConfig, c.MaxGroups, c.MaxMembers)
	case c.Timeout < 0 || c.IdleTimeout < 0:
		return fmt.Errorf("%w: a negative timeout", ErrConfig)
	}
	if err := check.Check(); err != nil {
		return fmt.Errorf("%w: Topic: %w", ErrConfig, err)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Stats counts a front end's work.
type Stats struct {
	Conns     int    // connections served now
	Accepted  uint64 // connections accepted in all
	Refused   uint64 // connections refused: MaxConns reached
	Requests  uint64 // requests answered
	Rejected  uint64 // requests answered UNSUPPORTED_VERSION
	Malformed uint64 // connections ended by a frame that did not decode
	Produced  uint64 // records produced
	Fetched   uint64 // records fetched
}

// Server is a running front end. Its methods are safe for concurrent
// use.
type Server struct {
	cfg    Config
	base   context.Context
	cancel context.CancelFunc
	topics *topics
	coord  *coordinator
	front  *tcpfront.Conns // listeners and connections, at most MaxConns
	wg     sync.WaitGroup  // the coordinator's reaper
	n      struct{ requests, rejected, malformed, produced, fetched atomic.Uint64 }
}

// New makes a front end of cfg; serve it with Serve or ServeConn.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, base: ctx, cancel: cancel, topics: newTopics(cfg.Catalog),
		coord: newCoordinator(cfg.MaxGroups, cfg.MaxMembers),
		front: tcpfront.New(cfg.MaxConns)}
	s.wg.Go(func() { s.coord.reap(ctx) })
	return s, nil
}

// ErrClosed is returned by Serve once the server is closed.
var ErrClosed = errors.New("kafka: closed")

// Serve accepts connections on l and serves them until Close
// (ErrClosed) or until l fails.
func (s *Server) Serve(l net.Listener) error {
	s.cfg.Logger.Info("kafka: serving", "addr", l.Addr().String())
	err := s.front.Serve(l, s.ServeConn)
	if errors.Is(err, tcpfront.ErrClosed) {
		return ErrClosed
	}
	return fmt.Errorf("kafka: %w", err)
}

// ServeConn serves one connection until the client leaves, sends a
// frame that does not decode, or the server closes; it closes nc. A
// connection's requests are answered one at a time, in order, as a
// Kafka broker does.
func (s *Server) ServeConn(nc net.Conn) {
	defer nc.Close()
	if id, _ := s.front.Enter(nc); id == 0 {
		return // closed, or full: a Kafka client retries another time
	}
	defer s.front.Leave(nc)
	c := &conn{s: s, nc: nc, r: bufio.NewReaderSize(nc, 64<<10), w: bufio.NewWriterSize(nc, 64<<10),
		consumers: make(map[string]*mq.Consumer), next: make(map[partKey]uint64)}
	if err := c.serve(); !errors.Is(err, net.ErrClosed) {
		s.cfg.Logger.Debug("kafka: connection ended", "remote", nc.RemoteAddr().String(), "err", err)
	}
}

// Close stops the listeners and ends every connection; requests in
// flight are cancelled.
func (s *Server) Close() error {
	s.front.Close()
	s.cancel()
	s.front.Wait()
	s.wg.Wait()
	return nil
}

// Stats returns the front end's counters.
func (s *Server) Stats() Stats {
	n, accepted, refused := s.front.Counts()
	return Stats{Conns: n, Accepted: accepted, Refused: refused, Requests: s.n.requests.Load(),
		Rejected: s.n.rejected.Load(), Malformed: s.n.malformed.Load(), Produced: s.n.produced.Load(), Fetched: s.n.fetched.Load()}
}

// conn is one client connection.
type conn struct {
	s  *Server
	nc net.Conn
	r  *bufio.Reader
	w  *bufio.Writer
	// consumers reads the topics this connection fetches from, by
	// name: at most the catalog's topics.
	consumers map[string]*mq.Consumer
	// next is where each partition's last fetch on this connection
	// ended: a fetch there needs no search for its batch. At most the
	// partitions of the topics in consumers.
	next   map[partKey]uint64
	client string // the client id of the latest request
}

// clientID names the client, for member ids.
func (c *conn) clientID() string {
	if c.client == "" || len(c.client) > 64 {
		return "member"
	}
	return c.client
}

// serve reads requests and answers them until the connection ends.
func (c *conn) serve() error {
	for {
		if c.s.cfg.IdleTimeout > 0 {
			_ = c.nc.SetReadDeadline(time.Now().Add(c.s.cfg.IdleTimeout))
		}
		frame, err := readFrame(c.r, c.s.cfg.MaxFrame)
		if err != nil {
			if errors.Is(err, errMalformed) {
				c.s.n.malformed.Add(1)
			}
			return err
		}
		req, err := parseRequest(frame)
		if err != nil {
			c.s.n.malformed.Add(1)
			return err
		}
		c.client = req.clientID
		resp, err := c.handle(req)
		if err != nil {
			c.s.n.malformed.Add(1)
			return err
		}
		c.s.n.requests.Add(1)
		if resp == nil {
			continue // a Produce with acks 0 has no response
		}
		if _, err := c.w.Write(appendResponse(nil, req, resp)); err != nil {
			return err
		}
		if c.r.Buffered() == 0 {
			if err := c.w.Flush(); err != nil {
				return err
			}
		}
	}
}

// ctx bounds one request's pool work.
func (c *conn) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.s.base, c.s.cfg.Timeout)
}

// advertised is the host and port clients are told to connect to.
func (c *conn) advertised() (string, int32) {
	a := c.s.cfg.Advertise
	if a == "" {
		a = c.nc.LocalAddr().String()
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return a, 0
	}
	var p int32
	_, _ = fmt.Sscan(port, &p)
	return host, p
}
