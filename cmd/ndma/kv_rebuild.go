package main

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ndma/ndma/daemon/kvd"
	"github.com/ndma/ndma/kv"
	"github.com/ndma/ndma/pool"
)

// newKvRebuildCmd is ndma kv rebuild.
func newKvRebuildCmd(kf *kvFlags) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "rebuild",
		Short: "Rebuild the shards of an erasure-coded key space that memory nodes lost",
		Long: `rebuild restores the shards of an erasure-coded key space (kv create
--ec) that the switch reports lost: a memory node restarted (its memory
is new), or the owners wrote around a node while it was unreachable. Each
lost shard is recomputed from K others and written to its node, and
serves reads again; the key space survives M more losses from then on.
A shard whose node is still down is listed as unreachable: run rebuild
again once it is back.

Readers and writers go on meanwhile. With an ndma kvd serving every rank
of the space, each owner rebuilds the rows of its own shards (a row has
one writer, so none of its writes can fall between the rebuild's reads
and its write); with none running, rebuild rewrites every row itself
(start no kvd until it returns). With some ranks served and others not
it refuses: start them all, or stop them all. --timeout bounds the whole
rebuild.`,
		Example: `  ndma kv rebuild --space-file objects.space --timeout 10m --switch 127.0.0.1:7471 --token-file fab/token --credential fab/client-0.cred`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return errors.New("--space-file: give the key space's space file (ndma kv create --out)")
			}
			sp, err := kvd.ReadSpaceFile(file)
			if err != nil {
				return fmt.Errorf("--space-file: %w", err)
			}
			if kf.space != "" && kf.space != sp.Name {
				return fmt.Errorf("--space %q: the space file is key space %q's", kf.space, sp.Name)
			}
			ep, fab, ctx, cancel, err := kf.client(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			defer ep.Close()
			pc, err := pool.New(ep, kf.sw, pool.Options{Fabric: fab})
			if err != nil {
				return err
			}
			reg, err := pc.Open(ctx, sp.Region, sp.Key)
			if err != nil {
				return fmt.Errorf("key space %q: %w", sp.Name, err)
			}
			rebuilt, unreachable, err := kv.RebuildShards(ctx, ep, reg, kv.ClientConfig{Switch: kf.sw, Fabric: fab, Space: sp.Name})
			if err != nil {
				return fmt.Errorf("key space %q: %w", sp.Name, err)
			}
			w := cmd.OutOrStdout()
			if kf.json {
				return json.NewEncoder(w).Encode(map[string]any{"space": sp.Name, "rebuilt": nonNil(rebuilt), "unreachable": nonNil(unreachable)})
			}
			fmt.Fprintf(w, "key space %q: shards rebuilt %v, unreachable %v\n", sp.Name, rebuilt, unreachable)
			return nil
		},
	}
	cmd.Flags().StringVar(&file, "space-file", "", "the key space's space `file` (required)")
	return cmd
}

// nonNil is s, or an empty slice for nil (JSON [] rather than null).
func nonNil(s []int) []int {
	if s == nil {
		return []int{}
	}
	return s
}
