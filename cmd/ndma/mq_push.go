package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/ndma/ndma/mq"
)

// mqSubscribeLoop is mqConsumeLoop for consume --push: it subscribes
// from c's positions and prints what the subscription delivers for
// parts until the count is reached or nothing came for the wait; a batch
// printed in part leaves its partition's position at the batch.
func mqSubscribeLoop(cmd *cobra.Command, mf *mqFlags, f *mqConsumeFlags, s *mqSession, c *mq.Consumer, parts []int, w io.Writer) error {
	parent := cmd.Context()
	if parent == nil {
		parent = context.Background()
	}
	sub, err := c.Subscribe(s.ctx, s.push())
	if err != nil {
		return err
	}
	defer func() {
		sub.Close()
		st := sub.Stats()
		fmt.Fprintf(cmd.ErrOrStderr(), "%d records pushed, %d read from the log\n", st.Pushed, st.Repaired)
	}()
	printed := 0
	idle := time.Now()
	for {
		ctx, cancel := context.WithTimeout(parent, mf.timeout)
		rs, err := sub.Next(ctx, min(f.wait, 100*time.Millisecond))
		cancel()
		if err != nil {
			return err
		}
		for _, r := range rs {
			if !slices.Contains(parts, r.Partition) {
				continue
			}
			if f.count > 0 && printed == f.count {
				return c.Seek(r.Partition, r.Offset)
			}
			if err := printRecord(w, r, mf.json); err != nil {
				return err
			}
			printed++
		}
		switch {
		case f.count > 0 && printed == f.count:
			return nil
		case len(rs) > 0:
			idle = time.Now()
		case time.Since(idle) >= f.wait:
			return nil
		}
	}
}

// newMqTopicExpireCmd is ndma mq topic expire.
func newMqTopicExpireCmd(mf *mqFlags) *cobra.Command {
	var age time.Duration
	cmd := &cobra.Command{
		Use:   "expire NAME",
		Short: "Drop the oldest segments of a topic's partitions, older than an age",
		Long: `expire drops, in each partition of topic NAME, the oldest segments whose
batches were all written more than --older-than ago (by the topic's time
index, to the millisecond), up to the committed offset: the partition's
start moves past them and consumers read on from there. It stops at the
first segment holding a newer batch. It prints each partition's start.`,
		Example: `  ndma mq topic expire orders --older-than 24h`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if age <= 0 {
				return fmt.Errorf("--older-than %v: give an age above zero", age)
			}
			s, err := mf.open(cmd)
			if err != nil {
				return err
			}
			defer s.close()
			t, err := s.cat.Open(s.ctx, args[0])
			if err != nil {
				return err
			}
			before := time.Now().Add(-age)
			var starts []uint64
			for p := range t.Layout().Partitions {
				start, err := t.Expire(s.ctx, p, before)
				if err != nil {
					return fmt.Errorf("partition %d: %w", p, err)
				}
				starts = append(starts, start)
			}
			if mf.json {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"topic": args[0], "starts": starts})
			}
			for p, st := range starts {
				fmt.Fprintf(cmd.OutOrStdout(), "partition %d: starts at %d\n", p, st)
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&age, "older-than", 0, "drop the segments whose batches are all older than this")
	return cmd
}
