package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// mqStream is the JetStream stream of the benchmark's topic, and
// mqSubject the prefix of its subjects: a partition p is subject
// mqSubject+p.
const (
	mqStream  = "BENCH"
	mqSubject = "bench."
)

// mqNATS is NATS JetStream: nats-server with JetStream on a free
// loopback port, its store in the process group's directory, and a
// stream in memory holding about cfg.Retain bytes per partition
// (oldest records dropped first).
type mqNATS struct {
	g       *procGroup // nil in a testbed agent
	url     string
	fetch   int
	pending int
	prods   []jetstream.JetStream // per producer: its in-flight slots share its connection
	conns   []*nats.Conn
}

func startMQNATS(ctx context.Context, cfg *MQConfig) (_ mqTarget, err error) {
	g, err := newProcGroup("ndma-bench-nats")
	if err != nil {
		return nil, err
	}
	t := attachMQNATS(cfg, "")
	t.g = g
	defer func() {
		if err != nil {
			t.close()
		}
	}()
	addr, err := freeTCPAddr()
	if err != nil {
		return nil, err
	}
	host, port, _ := net.SplitHostPort(addr)
	if err := g.start("nats-server", cfg.NATSServer, "--addr", host, "--port", port, "--jetstream",
		"--store_dir", filepath.Join(g.dir, "store")); err != nil {
		return nil, fmt.Errorf("%w (install Debian's nats-server package, or leave %s out of the targets)", err, MQNATS)
	}
	t.url = "nats://" + addr
	if err := t.createStream(ctx, cfg); err != nil {
		return nil, fmt.Errorf("%w (logs in %s)", err, g.dir)
	}
	return t, nil
}

// attachMQNATS is the target on the server at url, whose stream
// createStream makes.
func attachMQNATS(cfg *MQConfig, url string) *mqNATS {
	return &mqNATS{url: url, fetch: mqFetchRecords(cfg), pending: cfg.InFlight * cfg.Batch, prods: make([]jetstream.JetStream, cfg.Producers)}
}

// createStream makes the stream, in memory, holding about cfg.Retain
// bytes per partition (oldest records dropped first).
func (t *mqNATS) createStream(ctx context.Context, cfg *MQConfig) error {
	nc, err := t.connect(ctx)
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = js.CreateStream(sctx, jetstream.StreamConfig{Name: mqStream, Subjects: []string{mqSubject + "*"},
		Storage: jetstream.MemoryStorage, Retention: jetstream.LimitsPolicy, Discard: jetstream.DiscardOld,
		MaxBytes: int64(cfg.Retain) * int64(cfg.Partitions), Replicas: 1})
	if err != nil {
		return fmt.Errorf("creating the stream: %w", err)
	}
	return nil
}

// connect opens a connection to the server, waiting up to 10 s for it
// to listen.
func (t *mqNATS) connect(ctx context.Context) (*nats.Conn, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		nc, err := nats.Connect(t.url, nats.NoReconnect())
		if err == nil {
			t.conns = append(t.conns, nc)
			return nc, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, errors.Join(fmt.Errorf("no NATS server answers at %s", t.url), err, ctx.Err())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (t *mqNATS) sender(ctx context.Context, i, _ int) (mqSender, error) {
	if t.prods[i] == nil {
		nc, err := t.connect(ctx)
		if err != nil {
			return nil, err
		}
		if t.prods[i], err = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(t.pending)); err != nil {
			return nil, err
		}
	}
	return mqNATSSender{t.prods[i]}, nil
}

// mqNATSSender publishes a batch asynchronously and waits for the
// stream's acknowledgement of each record.
type mqNATSSender struct{ js jetstream.JetStream }

func (s mqNATSSender) send(ctx context.Context, part int, vals [][]byte) error {
	subj := mqSubject + strconv.Itoa(part)
	futs := make([]jetstream.PubAckFuture, 0, len(vals))
	for _, v := range vals {
		f, err := s.js.PublishAsync(subj, v)
		if err != nil {
			return err
		}
		futs = append(futs, f)
	}
	for _, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (t *mqNATS) subscriber(ctx context.Context, _ int) (mqSubscriber, error) {
	nc, err := t.connect(ctx)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	c, err := js.OrderedConsumer(ctx, mqStream, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return nil, err
	}
	return &mqNATSSub{c: c, fetch: t.fetch}, nil
}

// mqNATSSub receives the whole stream through an ordered consumer (no
// acknowledgements; the client pulls up to fetch records ahead).
type mqNATSSub struct {
	c     jetstream.Consumer
	fetch int
}

func (s *mqNATSSub) run(ctx context.Context, got func(int, []byte)) error {
	it, err := s.c.Messages(jetstream.PullMaxMessages(s.fetch))
	if err != nil {
		return err
	}
	defer it.Stop()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("receiving: %w", err)
		}
		p, err := strconv.Atoi(strings.TrimPrefix(m.Subject(), mqSubject))
		if err != nil {
			p = -1 // counted as wrong
		}
		got(p, m.Data())
	}
}

func (t *mqNATS) procs() *procGroup { return t.g }

func (t *mqNATS) close() {
	for _, nc := range t.conns {
		nc.Close()
	}
	if t.g != nil {
		t.g.stop()
	}
}
