package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ndma/ndma/kv"
)

// newKvStatsCmd is ndma kv stats.
func newKvStatsCmd(kf *kvFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "stats",
		Short: "Print each shard's hash table: buckets, keys, load (one-sided: no owner needed)",
		Long: `stats reads every shard's hash table from the memory nodes (all its
buckets, 32 bytes each) and prints, per shard, its buckets, the most it
grows to, the times it grew, the keys in it (expired ones not yet freed
included), the buckets of deleted keys, and its load (keys over
buckets), then the totals. The counts are a scan, not a snapshot:
writes during it may be counted or not. With --json, an object per
shard.`,
		Example: `  ndma kv stats --space cache
  ndma kv stats --space cache --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ep, ctx, cancel, err := kf.open(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			defer ep.Close()
			tabs, err := c.Tables(ctx)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if kf.json {
				enc := json.NewEncoder(w)
				for _, t := range tabs {
					if err := enc.Encode(map[string]any{"shard": t.Shard, "buckets": t.Buckets, "max_buckets": t.MaxBuckets,
						"growths": t.Generation, "keys": t.Keys, "deleted": t.Deleted, "load": t.Load()}); err != nil {
						return err
					}
				}
				return nil
			}
			return printTables(w, tabs)
		},
	}
}

// printTables writes tabs as a table with a line of totals.
func printTables(w interface{ Write([]byte) (int, error) }, tabs []kv.TableStats) error {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "shard\tbuckets\tmax\tgrowths\tkeys\tdeleted\tload\t")
	var sum kv.TableStats
	for _, t := range tabs {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%.2f\t\n", t.Shard, t.Buckets, t.MaxBuckets, t.Generation, t.Keys, t.Deleted, t.Load())
		sum.Buckets, sum.MaxBuckets, sum.Generation = sum.Buckets+t.Buckets, sum.MaxBuckets+t.MaxBuckets, sum.Generation+t.Generation
		sum.Keys, sum.Deleted = sum.Keys+t.Keys, sum.Deleted+t.Deleted
	}
	fmt.Fprintf(tw, "all\t%d\t%d\t%d\t%d\t%d\t%.2f\t\n", sum.Buckets, sum.MaxBuckets, sum.Generation, sum.Keys, sum.Deleted, sum.Load())
	return tw.Flush()
}
