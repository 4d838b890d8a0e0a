package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// mqRedis is Redis Streams: a stream per partition on a redis-server
// without persistence, each stream capped (approximately) at the
// records of cfg.Retain bytes.
type mqRedis struct {
	g       *procGroup // nil in a testbed agent
	addr    string
	streams []string
	maxLen  int64
	fetch   int64
	conns   int             // a producer's connections: its in-flight slots
	prods   []*redis.Client // per producer: its in-flight slots share it
	clients []*redis.Client // every client, to close
}

func startMQRedis(ctx context.Context, cfg *MQConfig) (mqTarget, error) {
	g, addr, err := startRedisServer(cfg.RedisServer, MQRedis)
	if err != nil {
		return nil, err
	}
	t := attachMQRedis(cfg, addr)
	t.g = g
	s, err := newRedisStore(ctx, addr, 1, g.dir) // waits for the server
	if err != nil {
		g.stop()
		return nil, err
	}
	s.rc.Close()
	return t, nil
}

// attachMQRedis is the target on the server at addr.
func attachMQRedis(cfg *MQConfig, addr string) *mqRedis {
	t := &mqRedis{addr: addr, maxLen: int64(cfg.Retain / (cfg.RecordSize + mqRecOverhead)),
		fetch: int64(mqFetchRecords(cfg)), conns: cfg.InFlight, prods: make([]*redis.Client, cfg.Producers)}
	for p := range cfg.Partitions {
		t.streams = append(t.streams, "bench."+strconv.Itoa(p))
	}
	return t
}

// mqFetchRecords is the records a subscriber of any target asks for at
// once: about 256 KiB of them (mq.DefaultFetchBytes), at least 16.
func mqFetchRecords(cfg *MQConfig) int { return max(16, (256<<10)/cfg.RecordSize) }

func (t *mqRedis) client(conns int) *redis.Client {
	rc := redis.NewClient(&redis.Options{Addr: t.addr, PoolSize: conns, MaxRetries: -1, Protocol: 2})
	t.clients = append(t.clients, rc)
	return rc
}

func (t *mqRedis) sender(_ context.Context, i, _ int) (mqSender, error) {
	if t.prods[i] == nil {
		t.prods[i] = t.client(t.conns)
	}
	return &mqRedisSender{rc: t.prods[i], t: t}, nil
}

// mqRedisSender sends a batch as one pipeline of XADDs.
type mqRedisSender struct {
	rc *redis.Client
	t  *mqRedis
}

func (s *mqRedisSender) send(ctx context.Context, part int, vals [][]byte) error {
	cmds, err := s.rc.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, v := range vals {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: s.t.streams[part], MaxLen: s.t.maxLen, Approx: true, Values: []any{"v", v}})
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return err
		}
	}
	return nil
}

func (t *mqRedis) subscriber(context.Context, int) (mqSubscriber, error) {
	return &mqRedisSub{t: t, rc: t.client(1)}, nil
}

// mqRedisSub reads every stream from its start with XREAD, blocking up
// to 100 ms when none has more.
type mqRedisSub struct {
	t  *mqRedis
	rc *redis.Client
}

func (s *mqRedisSub) run(ctx context.Context, got func(int, []byte)) error {
	parts := len(s.t.streams)
	args := append(append([]string{}, s.t.streams...), make([]string, parts)...)
	for p := range parts {
		args[parts+p] = "0"
	}
	index := map[string]int{}
	for p, name := range s.t.streams {
		index[name] = p
	}
	for {
		res, err := s.rc.XRead(ctx, &redis.XReadArgs{Streams: args, Count: s.t.fetch, Block: 100 * time.Millisecond}).Result()
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return fmt.Errorf("XREAD: %w", err)
		}
		for _, st := range res {
			p, ok := index[st.Stream]
			if !ok {
				return fmt.Errorf("XREAD: a reply from stream %q, which was not asked for", st.Stream)
			}
			for _, m := range st.Messages {
				v, _ := m.Values["v"].(string)
				got(p, []byte(v))
				args[parts+p] = m.ID
			}
		}
	}
}

func (t *mqRedis) procs() *procGroup { return t.g }

func (t *mqRedis) close() {
	for _, c := range t.clients {
		c.Close()
	}
	if t.g != nil {
		t.g.stop()
	}
}
