package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ndma/ndma/testbed"
	"github.com/ndma/ndma/testbed/fidelity"
)

// The targets of the message queue benchmark.
const (
	// MQNative is NDMA's message queue through its Go client (package
	// mq): producers reserve, write and publish batches in the pool,
	// subscribers read the partitions' logs one-sidedly.
	MQNative = "ndma"
	// MQKafka is NDMA's queue through its Kafka front end (ndma mq
	// serve --kafka), driven by franz-go (kgo).
	MQKafka = "ndma-kafka"
	// MQRedis is Redis Streams (redis-server, persistence off): XADD,
	// and XREAD by each subscriber, through go-redis.
	MQRedis = "redis"
	// MQNATS is NATS JetStream (nats-server, memory storage): async
	// publishes acknowledged by the stream, and an ordered consumer per
	// subscriber, through nats.go.
	MQNATS = "nats"
	// MQPush is NDMA's queue with push: producers store each batch as
	// MQNative's do, then multicast it once to the topic's subscribers
	// (the switch copies it); subscribers deliver what is pushed and read
	// the log only for what they missed.
	MQPush = "ndma-push"
)

// mqTargets are every target; mqDefault the targets on loopback by
// default, mqTestbedDefault on a testbed (where the Kafka front end
// does not run), in their order.
var (
	mqTargets        = []string{MQNative, MQPush, MQKafka, MQRedis, MQNATS}
	mqDefault        = []string{MQNative, MQKafka, MQRedis, MQNATS}
	mqTestbedDefault = []string{MQPush, MQNative, MQRedis, MQNATS}
)

// MQConfig configures RunMQ. Zero values select the defaults.
type MQConfig struct {
	// Binary is the ndma binary: the switch and the memory nodes run as
	// its processes on loopback, as deployed (required for MQNative and
	// MQKafka).
	Binary string
	// RedisServer and NATSServer are the peers' server binaries (empty:
	// "redis-server" and "nats-server" from PATH).
	RedisServer, NATSServer string
	// Targets are the queues measured, in order (empty: MQNative,
	// MQKafka, MQRedis and MQNATS; on a testbed MQPush, MQNative,
	// MQRedis and MQNATS).
	Targets []string
	// Producers write the topic (zero: 1); Subscribers each receive
	// every record (zero: 3); Partitions split the topic (zero: 1). A
	// producer sends its batches to the partitions in turn.
	Producers, Subscribers, Partitions int
	// RecordSize is each record's bytes, 100 B to 64 KiB (zero: 100).
	RecordSize int
	// Batch is the most records a producer sends in one request (zero:
	// 16); InFlight the requests a producer has unacknowledged at once
	// (zero: 4). With InFlight 1 every queue keeps a producer's records
	// in order in each partition.
	Batch, InFlight int
	// Rate paces each producer, in records per second (zero: as fast as
	// InFlight lets it); Linger is how long a paced producer waits for a
	// batch to fill before sending it (zero: it sends what it has as
	// soon as no record is due).
	Rate   float64
	Linger time.Duration
	// Duration is how long the producers produce (zero: 5 s), unless
	// Records is set: then each producer produces Records records.
	Duration time.Duration
	Records  int
	// Retain is the log bytes each partition keeps: NDMA's ring, the
	// JetStream stream's byte limit, the Redis stream's length limit in
	// records (zero: 64 MiB).
	Retain int
	// MTU of NDMA's processes (zero: 9000).
	MTU int
	// Copies is the copies of NDMA's topic data, 1 (zero means 1) or 2:
	// a produce is acknowledged once every copy holds it. The peers
	// keep one (a single server).
	Copies int
	// BrokerApart, on a testbed, runs the peers' servers in a host of
	// their own (the one after the subscribers') instead of beside the
	// producers, so that produces cross a link to them too.
	BrokerApart bool `json:"-"`
	// Testbed, when set, runs the benchmark across a running testbed's
	// hosts instead of on loopback (see RunMQ): its Binary must be set.
	Testbed *testbed.State `json:"-"`
	// Fidelity is the rule a testbed run is judged by (zero: the
	// defaults).
	Fidelity fidelity.Rule `json:"-"`
	// Progress, if not nil, is called about every 200 ms while a target
	// runs, with its produced records and the run's whole (Records runs)
	// or elapsed and whole time in milliseconds (Duration runs).
	Progress func(done, total int) `json:"-"`
}

func (c *MQConfig) setDefaults() {
	if len(c.Targets) == 0 {
		c.Targets = mqDefault
		if c.Testbed != nil {
			c.Targets = mqTestbedDefault
		}
	}
	if c.RedisServer == "" {
		c.RedisServer = "redis-server"
	}
	if c.NATSServer == "" {
		c.NATSServer = "nats-server"
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Producers, 1)
	def(&c.Subscribers, 3)
	def(&c.Partitions, 1)
	def(&c.RecordSize, 100)
	def(&c.Batch, 16)
	def(&c.InFlight, 4)
	def(&c.Retain, 64<<20)
	def(&c.MTU, 9000)
	def(&c.Copies, 1)
	if c.Duration == 0 && c.Records == 0 {
		c.Duration = 5 * time.Second
	}
}

// Bounds of MQConfig.
const (
	mqMinRecord = 100 // room for the record's header (mqRecHeader) and more
	mqMaxRecord = 64 << 10
	mqMaxBatch  = 4 << 20 // bytes of one request's records
)

func (c *MQConfig) validate() error {
	for _, t := range c.Targets {
		if !slices.Contains(mqTargets, t) {
			return fmt.Errorf("%w: target %q (want %s, %s, %s, %s or %s)", ErrBadValue, t, MQNative, MQPush, MQKafka, MQRedis, MQNATS)
		}
		if t == MQKafka && c.Testbed != nil {
			return fmt.Errorf("%w: target %s runs on loopback only (leave it out of a testbed run's targets)", ErrBadValue, t)
		}
	}
	switch {
	case c.Binary == "" && (c.Testbed != nil || slices.ContainsFunc(c.Targets, func(t string) bool { return t != MQRedis && t != MQNATS })):
		return fmt.Errorf("%w: no ndma binary to run the queue's processes", ErrBadValue)
	case c.Producers < 1 || c.Producers > 256:
		return fmt.Errorf("%w: %d producers (want 1 to 256)", ErrBadValue, c.Producers)
	case c.Subscribers < 1 || c.Subscribers > 256:
		return fmt.Errorf("%w: %d subscribers (want 1 to 256)", ErrBadValue, c.Subscribers)
	case c.Partitions < 1 || c.Partitions > 64:
		return fmt.Errorf("%w: %d partitions (want 1 to 64)", ErrBadValue, c.Partitions)
	case c.RecordSize < mqMinRecord || c.RecordSize > mqMaxRecord:
		return fmt.Errorf("%w: records of %d bytes (want %d B to 64 KiB)", ErrBadValue, c.RecordSize, mqMinRecord)
	case c.Batch < 1 || c.Batch*c.RecordSize > mqMaxBatch:
		return fmt.Errorf("%w: batches of %d records of %d bytes (want 1 record to 4 MiB)", ErrBadValue, c.Batch, c.RecordSize)
	case c.InFlight < 1 || c.InFlight > 256:
		return fmt.Errorf("%w: %d requests in flight (want 1 to 256)", ErrBadValue, c.InFlight)
	case c.Rate < 0:
		return fmt.Errorf("%w: rate %g records/s (want 0 for unpaced, or above)", ErrBadValue, c.Rate)
	case c.Linger < 0 || c.Linger > time.Second:
		return fmt.Errorf("%w: linger %v (want 0 to 1s)", ErrBadValue, c.Linger)
	case c.Linger > 0 && c.Rate == 0:
		return fmt.Errorf("%w: a linger without a rate (unpaced producers always fill their batches at once)", ErrBadValue)
	case c.Records < 0 || c.Records > 100_000_000:
		return fmt.Errorf("%w: %d records per producer (want 0 to 100,000,000)", ErrBadValue, c.Records)
	case c.Records == 0 && (c.Duration < 100*time.Millisecond || c.Duration > 24*time.Hour):
		return fmt.Errorf("%w: duration %v (want 100ms to 24h)", ErrBadValue, c.Duration)
	case c.Records > 0 && c.Duration > 0:
		return fmt.Errorf("%w: both a duration and a count of records", ErrBadValue)
	case c.Retain < 4*(c.Batch*(c.RecordSize+mqRecOverhead)+mqBatchOverhead) || c.Retain > 1<<30:
		return fmt.Errorf("%w: %d bytes retained per partition (want 4 batches to 1 GiB)", ErrBadValue, c.Retain)
	case c.MTU < 1280 || c.MTU > 65000:
		return fmt.Errorf("%w: MTU %d (want 1280 to 65000)", ErrBadValue, c.MTU)
	case c.Copies < 1 || c.Copies > 2:
		return fmt.Errorf("%w: %d copies of the topic (want 1 or 2)", ErrBadValue, c.Copies)
	case c.BrokerApart && c.Testbed == nil:
		return fmt.Errorf("%w: a broker apart is for a testbed run", ErrBadValue)
	}
	return nil
}

// MQResult is one target's row.
type MQResult struct {
	Target      string `json:"target"`
	Producers   int    `json:"producers"`
	Subscribers int    `json:"subscribers"`
	Partitions  int    `json:"partitions"`
	RecordSize  int    `json:"record_size"`
	Batch       int    `json:"batch"`
	InFlight    int    `json:"in_flight"`
	// Produced counts the records acknowledged to the producers,
	// Delivered the records the subscribers received (summed over
	// them); a whole run delivers Produced × Subscribers. Their rates
	// are over the time from the first produce to the last
	// acknowledgement and to the last receipt; the MB rates are of
	// record bytes, in 10^6 bytes per second.
	Produced          int64   `json:"produced"`
	Delivered         int64   `json:"delivered"`
	ProducedPerSec    float64 `json:"produced_per_s"`
	DeliveredPerSec   float64 `json:"delivered_per_s"`
	ProducedMBPerSec  float64 `json:"produced_mb_per_s"`
	DeliveredMBPerSec float64 `json:"delivered_mb_per_s"`
	// AckP50 and AckP99 are the produce requests' latencies, from
	// sending to acknowledgement; EndToEndP50 and EndToEndP99 the
	// records', from the producer making them to a subscriber's
	// receipt; in microseconds, to within 1/32.
	AckP50      float64 `json:"ack_p50_us"`
	AckP99      float64 `json:"ack_p99_us"`
	EndToEndP50 float64 `json:"e2e_p50_us"`
	EndToEndP99 float64 `json:"e2e_p99_us"`
	// ClientCPU is this process's CPU time (producers and subscribers)
	// per delivered record, ServerCPU the target's processes' summed,
	// in microseconds; Processes each of them.
	ClientCPU float64            `json:"client_cpu_us_per_record"`
	ServerCPU float64            `json:"server_cpu_us_per_record"`
	Processes map[string]float64 `json:"server_cpu_us_per_record_each"`
	// Errors counts failed produce requests; OutOfOrder records a
	// subscriber received after a later record of the same producer and
	// partition (or twice); Wrong records that were not a producer's,
	// or came from another partition than theirs.
	Errors     int64 `json:"errors"`
	OutOfOrder int64 `json:"out_of_order"`
	Wrong      int64 `json:"wrong"`
	// Copies is NDMA's topic's copies (the peers keep one).
	Copies int `json:"copies"`
	// Testbed runs only: Hosts is the testbed's host count and RateBits
	// its links' rate in bits per second; BrokerApart whether the peers'
	// server ran in a host of its own; Fidelity the monitor's verdict on
	// the run, judged from the first produce to the last receipt.
	// ClientCPU is then the producers' and subscribers' processes',
	// summed.
	Hosts       int               `json:"hosts,omitempty"`
	RateBits    uint64            `json:"rate_bits,omitempty"`
	BrokerApart bool              `json:"broker_apart,omitempty"`
	Fidelity    *fidelity.Verdict `json:"fidelity,omitempty"`
}

// RunMQ runs, for each target, Producers producers writing records of
// RecordSize bytes to a topic of Partitions partitions and Subscribers
// subscribers each receiving every record, and emits a row per target:
// produced and delivered records per second, produce acknowledgement
// and end-to-end latencies (from the time a producer made the record,
// written in it, to its receipt), and the CPU time per delivered record
// of this process (producers and subscribers) and of each of the
// target's server processes. Everything runs on this host's loopback:
// CPU per record is the figure to compare.
//
// With cfg.Testbed, the run crosses the testbed's links instead: the
// producers run in one process in the first host's namespace, each
// subscriber in a process in a host of its own (hosts 1 to
// Subscribers), and the peers' servers in the first host beside the
// producers, so that their link carries every copy a broker sends.
// NDMA's queue uses the testbed's switch and memory nodes (it needs at
// least one), under credentials the run issues from the testbed's
// secret (members of scope mq, which a push needs). Each row then holds
// the fidelity monitor's verdict, judged from the first produce to the
// last receipt.
func RunMQ(ctx context.Context, cfg MQConfig, emit func(MQResult) error) error {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	for _, name := range cfg.Targets {
		if cfg.Testbed != nil {
			res, err := runMQTestbed(ctx, &cfg, name)
			if err != nil {
				return fmt.Errorf("target %s: %w", name, err)
			}
			if err := emit(res); err != nil {
				return err
			}
			continue
		}
		t, err := startMQTarget(ctx, &cfg, name)
		if err != nil {
			return fmt.Errorf("target %s: %w", name, err)
		}
		res, err := runMQLoad(ctx, &cfg, name, t)
		t.close()
		if err != nil {
			return fmt.Errorf("target %s: %w", name, err)
		}
		if err := emit(res); err != nil {
			return err
		}
	}
	return nil
}

// mqTarget is a queue as the load generator sees it: a topic of
// cfg.Partitions partitions, created empty.
type mqTarget interface {
	// sender returns the handle producer i's in-flight slot k sends
	// with: used by one goroutine at a time.
	sender(ctx context.Context, i, k int) (mqSender, error)
	// subscriber returns subscriber j, which reads every partition
	// from its start.
	subscriber(ctx context.Context, j int) (mqSubscriber, error)
	// procs are the target's server processes.
	procs() *procGroup
	// close stops everything the target started.
	close()
}

// mqSender stores batches.
type mqSender interface {
	// send stores vals as records of partition part and returns once
	// they are acknowledged.
	send(ctx context.Context, part int, vals [][]byte) error
}

// mqSubscriber receives records.
type mqSubscriber interface {
	// run calls got with each record received, its partition and its
	// value (valid during the call), until ctx ends; it returns nil
	// then.
	run(ctx context.Context, got func(part int, val []byte)) error
}

func startMQTarget(ctx context.Context, cfg *MQConfig, name string) (mqTarget, error) {
	switch name {
	case MQNative, MQPush:
		return startMQNative(ctx, cfg, name == MQPush)
	case MQKafka:
		return startMQKafka(ctx, cfg)
	case MQRedis:
		return startMQRedis(ctx, cfg)
	default:
		return startMQNATS(ctx, cfg)
	}
}
