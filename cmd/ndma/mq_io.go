package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/ndma/ndma/mq"
)

// mqProduceFlags are ndma mq produce's own flags.
type mqProduceFlags struct {
	file, key, acks string
	partition, max  int
	headers         []string
	push, times     bool
}

// newMqProduceCmd is ndma mq produce.
func newMqProduceCmd(mf *mqFlags) *cobra.Command {
	var f mqProduceFlags
	cmd := &cobra.Command{
		Use:   "produce TOPIC",
		Short: "Append the lines of stdin (or a file) to a topic, a record each",
		Long: `produce appends each line of stdin (or --file) to TOPIC as a record
(the newline dropped), in batches of up to --batch lines (and the topic's
largest batch). A batch goes to --partition; without it, to the partition
of --key's hash, or, without a key, to the partitions in turn. A batch is
acknowledged (--acks all: once it is published and on every copy the
topic keeps; one: on at least one copy) before the next is sent; each
batch has --timeout. It prints how many records and batches it stored
(--json: a line per batch with its partition and offset). With --push it
also multicasts each batch stored, once, to the topic's push subscribers
(consume --push) through the switch, from when its first batch has
formed a group of them (a few round trips); they read from the log what
was not pushed to them.

A record's time is when its batch is written; with --timestamps each
line begins with the record's own time (RFC 3339, e.g.
2026-01-02T15:04:05.123Z) and a space, the rest of the line its value.
Times need not grow from line to line.`,
		Example: `  seq 100 | ndma mq produce orders --catalog mq.catalog
  ndma mq produce orders --file events.txt --key user-42 --header source=import --json
  echo "2026-01-02T15:04:05.123Z paid" | ndma mq produce orders --timestamps`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return mqProduce(cmd, mf, &f, args[0]) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.file, "file", "", "read the records from this `file` instead of stdin")
	fl.IntVar(&f.partition, "partition", -1, "the partition to append to (default: by --key, or in turn)")
	fl.StringVar(&f.key, "key", "", "every record's key")
	fl.StringArrayVar(&f.headers, "header", nil, "a `name=value` header for every record (repeatable)")
	fl.IntVar(&f.max, "batch", 100, "the most records in one batch")
	fl.StringVar(&f.acks, "acks", "all", "what a batch waits for: all (every copy) or one (at least one copy)")
	fl.BoolVar(&f.push, "push", false, "multicast each batch stored to the topic's push subscribers")
	fl.BoolVar(&f.times, "timestamps", false, "each line begins with the record's time (RFC 3339) and a space")
	return cmd
}

func mqProduce(cmd *cobra.Command, mf *mqFlags, f *mqProduceFlags, topic string) error {
	cfg := mq.ProducerConfig{}
	switch f.acks {
	case "all":
	case "one":
		cfg.Acks = mq.AcksOne
	default:
		return fmt.Errorf("--acks %q: want all or one", f.acks)
	}
	if f.partition < -1 {
		return fmt.Errorf("--partition %d: want a partition's number", f.partition)
	}
	if f.max < 1 {
		return fmt.Errorf("--batch %d: want at least 1", f.max)
	}
	var hs []mq.Header
	for _, h := range f.headers {
		k, v, ok := strings.Cut(h, "=")
		if !ok || k == "" {
			return fmt.Errorf("--header %q: want name=value", h)
		}
		hs = append(hs, mq.Header{Key: k, Value: []byte(v)})
	}
	in := cmd.InOrStdin()
	if f.file != "" {
		file, err := os.Open(f.file)
		if err != nil {
			return fmt.Errorf("--file: %w", err)
		}
		defer file.Close()
		in = file
	}
	s, err := mf.open(cmd)
	if err != nil {
		return err
	}
	defer s.close()
	t, err := s.cat.Open(s.ctx, topic)
	if err != nil {
		return err
	}
	l := t.Layout()
	if f.partition >= l.Partitions {
		return fmt.Errorf("--partition %d: topic %q has %d", f.partition, topic, l.Partitions)
	}
	part := f.partition
	if part < 0 && f.key != "" {
		h := fnv.New32a()
		h.Write([]byte(f.key))
		part = int(h.Sum32() % uint32(l.Partitions))
	}
	if f.push {
		push := s.push()
		cfg.Push = &push
	}
	b := &mqBatcher{cmd: cmd, mf: mf, p: mq.NewProducer(t, cfg), part: part, parts: l.Partitions, max: f.max,
		room: int(l.MaxBatch) - mq.BatchHeaderBytes - mq.BatchTimesBytes}
	defer b.p.Close()
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), int(l.MaxBatch))
	for line := 1; sc.Scan(); line++ {
		r := mq.Record{Value: append([]byte(nil), sc.Bytes()...), Headers: hs}
		if f.times {
			if r.Timestamp, r.Value, err = cutTime(r.Value); err != nil {
				return fmt.Errorf("line %d: %w", line, err)
			}
		}
		if f.key != "" {
			r.Key = []byte(f.key)
		}
		if err := b.add(r); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading the records: %w (a line longer than the topic's largest batch, %d bytes?)", err, l.MaxBatch)
	}
	if err := b.flush(); err != nil {
		return err
	}
	if !mf.json {
		fmt.Fprintf(cmd.OutOrStdout(), "%d records in %d batches\n", b.records, b.batches)
	}
	return nil
}

// cutTime splits a --timestamps line into its time (unix ns) and value.
func cutTime(line []byte) (int64, []byte, error) {
	ts, val, ok := strings.Cut(string(line), " ")
	t, err := time.Parse(time.RFC3339Nano, ts)
	switch {
	case !ok || err != nil:
		return 0, nil, fmt.Errorf("--timestamps: %q does not begin with an RFC 3339 time (2026-01-02T15:04:05Z) and a space", line)
	case t.UnixNano() == 0 || t.Year() < 1678 || t.Year() > 2261:
		return 0, nil, fmt.Errorf("--timestamps: %s: want a time after 1678 and before 2262, other than 1970-01-01T00:00:00Z", ts)
	}
	return t.UnixNano(), []byte(val), nil
}

// mqBatcher gathers records into batches and produces them.
type mqBatcher struct {
	cmd              *cobra.Command
	mf               *mqFlags
	p                *mq.Producer
	part, parts      int // part < 0: the partitions in turn
	next             int
	max, room        int // records and body bytes in one batch
	recs             []mq.Record
	size             int
	records, batches int
}

func (b *mqBatcher) add(r mq.Record) error {
	n := mq.RecordBytes(r)
	if n > b.room {
		return fmt.Errorf("a record of %d bytes: %w (at most %d with its key and headers)", n, mq.ErrTooLarge, b.room)
	}
	if len(b.recs) == b.max || b.size+n > b.room {
		if err := b.flush(); err != nil {
			return err
		}
	}
	b.recs = append(b.recs, r)
	b.size += n
	return nil
}

func (b *mqBatcher) flush() error {
	if len(b.recs) == 0 {
		return nil
	}
	part := b.part
	if part < 0 {
		part = b.next % b.parts
		b.next++
	}
	parent := b.cmd.Context()
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithTimeout(parent, b.mf.timeout)
	ack, err := b.p.Produce(ctx, part, b.recs)
	cancel()
	if err != nil {
		return fmt.Errorf("partition %d, after %d records stored: %w", part, b.records, err)
	}
	b.records += len(b.recs)
	b.batches++
	if b.mf.json {
		if err := json.NewEncoder(b.cmd.OutOrStdout()).Encode(map[string]any{"partition": part, "offset": ack.Offset, "records": len(b.recs), "sequence": ack.Sequence}); err != nil {
			return err
		}
	}
	b.recs, b.size = b.recs[:0], 0
	return nil
}

// mqConsumeFlags are ndma mq consume's own flags.
type mqConsumeFlags struct {
	partition int
	offset    int64
	group     string
	count     int
	wait      time.Duration
	push      bool
	fromTime  string
}

// newMqConsumeCmd is ndma mq consume.
func newMqConsumeCmd(mf *mqFlags) *cobra.Command {
	f := mqConsumeFlags{offset: -1}
	cmd := &cobra.Command{
		Use:   "consume TOPIC",
		Short: "Print a topic's records, a line each",
		Long: `consume reads TOPIC's records one-sidedly from the memory nodes and
prints each record's value on a line (--json: a JSON object a line, with
partition, offset, index in its batch, key, value or value_base64,
headers, producer, sequence and timestamp: the record's own time, or
its batch's write time for one produced without). It reads every partition (or
--partition) from its start, from --offset (with --partition), from the
first batch whose newest record's time is at or after --from-time (an
RFC 3339 time, or a duration meaning that long ago; that batch's older
records are printed too), or from --group's committed offsets,
which it commits, past the records it printed, when it ends. It ends
after --count records, or once it has waited --wait with nothing new.

With --push it subscribes to the topic's pushes: producers that push
(produce --push) multicast each batch to it through the switch, and it
reads from the log only what was not pushed to it (a gap in a
partition's offsets, or a partition quiet for a while), so records still
come in order, none skipped or twice. At the end it prints to stderr how
many records came pushed and how many from the log.`,
		Example: `  ndma mq consume orders --catalog mq.catalog
  ndma mq consume orders --group billing --count 10 --json
  ndma mq consume orders --partition 2 --offset 4096 --wait 10s
  ndma mq consume orders --from-time 15m --push --wait 1h`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return mqConsume(cmd, mf, &f, args[0]) },
	}
	fl := cmd.Flags()
	fl.IntVar(&f.partition, "partition", -1, "read this partition only (default: every one)")
	fl.Int64Var(&f.offset, "offset", -1, "start at this offset (with --partition; a batch's offset)")
	fl.StringVar(&f.group, "group", "", "start at this consumer group's offsets and commit them at the end")
	fl.IntVar(&f.count, "count", 0, "stop after this many records (0: no limit)")
	fl.DurationVar(&f.wait, "wait", 0, "wait this long for new records before ending")
	fl.BoolVar(&f.push, "push", false, "take the batches producers push, reading the log only for what was not pushed")
	fl.StringVar(&f.fromTime, "from-time", "", "start at the first batch with a record at or after this `time` (RFC 3339, or a duration: that long ago)")
	return cmd
}

// parseFromTime reads --from-time: an RFC 3339 time, or a duration
// before now.
func parseFromTime(v string) (time.Time, error) {
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return time.Now().Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("--from-time %q: want an RFC 3339 time (2026-01-02T15:04:05Z) or a duration (15m)", v)
	}
	return t, nil
}

func mqConsume(cmd *cobra.Command, mf *mqFlags, f *mqConsumeFlags, topic string) error {
	switch {
	case f.offset >= 0 && f.partition < 0:
		return errors.New("--offset: give --partition too")
	case f.offset >= 0 && f.group != "", f.offset >= 0 && f.fromTime != "", f.fromTime != "" && f.group != "":
		return errors.New("--offset, --from-time and --group: give one of them")
	case f.partition < -1:
		return fmt.Errorf("--partition %d: want a partition's number", f.partition)
	case f.count < 0 || f.wait < 0:
		return fmt.Errorf("--count %d, --wait %v: want no negative", f.count, f.wait)
	}
	s, err := mf.open(cmd)
	if err != nil {
		return err
	}
	defer s.close()
	t, err := s.cat.Open(s.ctx, topic)
	if err != nil {
		return err
	}
	c, err := mq.NewConsumer(s.ctx, t, mq.ConsumerConfig{Group: f.group})
	if err != nil {
		return err
	}
	parts := []int{}
	for p := range t.Layout().Partitions {
		if f.partition < 0 || p == f.partition {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		return fmt.Errorf("--partition %d: topic %q has %d", f.partition, topic, t.Layout().Partitions)
	}
	if f.offset >= 0 {
		if err := c.Seek(f.partition, uint64(f.offset)); err != nil {
			return fmt.Errorf("--offset: %w", err)
		}
	}
	if f.fromTime != "" {
		at, err := parseFromTime(f.fromTime)
		if err != nil {
			return err
		}
		for _, p := range parts {
			if _, err := c.SeekTime(s.ctx, p, at); err != nil {
				return fmt.Errorf("--from-time: %w", err)
			}
		}
	}
	w := bufio.NewWriter(cmd.OutOrStdout())
	defer w.Flush()
	if f.push {
		err = mqSubscribeLoop(cmd, mf, f, s, c, parts, w)
	} else {
		err = mqConsumeLoop(cmd, mf, f, c, parts, w)
	}
	if f.group != "" {
		ctx, cancel := context.WithTimeout(context.Background(), mf.timeout)
		defer cancel()
		for _, p := range parts {
			err = errors.Join(err, c.Commit(ctx, p))
		}
	}
	return err
}

// mqConsumeLoop reads parts in turn and prints their records until the
// count is reached or nothing new came for the wait; a batch printed in
// part leaves its partition's position at the batch, to be read again.
func mqConsumeLoop(cmd *cobra.Command, mf *mqFlags, f *mqConsumeFlags, c *mq.Consumer, parts []int, w io.Writer) error {
	parent := cmd.Context()
	if parent == nil {
		parent = context.Background()
	}
	printed := 0
	idle := time.Now()
	for {
		got := false
		for _, p := range parts {
			ctx, cancel := context.WithTimeout(parent, mf.timeout)
			rs, err := c.Fetch(ctx, p, min(f.wait, 100*time.Millisecond))
			cancel()
			if err != nil {
				return fmt.Errorf("partition %d at %d: %w", p, c.Position(p), err)
			}
			for _, r := range rs {
				if f.count > 0 && printed == f.count {
					return c.Seek(p, r.Offset)
				}
				if err := printRecord(w, r, mf.json); err != nil {
					return err
				}
				printed++
			}
			got = got || len(rs) > 0
		}
		if f.count > 0 && printed == f.count {
			return nil
		}
		if got {
			idle = time.Now()
		} else if time.Since(idle) >= f.wait {
			return nil
		}
	}
}

func printRecord(w io.Writer, r mq.Record, asJSON bool) error {
	if !asJSON {
		_, err := fmt.Fprintf(w, "%s\n", r.Value)
		return err
	}
	m := map[string]any{"partition": r.Partition, "offset": r.Offset, "index": r.Index,
		"producer": fmt.Sprintf("%016x", r.Producer), "sequence": r.Sequence, "timestamp": time.Unix(0, r.Timestamp).UTC().Format(time.RFC3339Nano)}
	for name, b := range map[string][]byte{"key": r.Key, "value": r.Value} {
		if utf8.Valid(b) {
			m[name] = string(b)
		} else {
			m[name+"_base64"] = base64.StdEncoding.EncodeToString(b)
		}
	}
	if len(r.Headers) > 0 {
		hs := make(map[string]string, len(r.Headers))
		for _, h := range r.Headers {
			hs[h.Key] = string(h.Value)
		}
		m["headers"] = hs
	}
	return json.NewEncoder(w).Encode(m)
}
