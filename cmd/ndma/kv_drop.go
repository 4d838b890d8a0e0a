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

// newKvDropCmd is ndma kv drop.
func newKvDropCmd(kf *kvFlags) *cobra.Command {
	var (
		file  string
		force bool
	)
	cmd := &cobra.Command{
		Use:   "drop",
		Short: "Free a key space's region: every key in it is gone",
		Long: `drop frees the pool region of the key space in --space-file: its memory
returns to the memory nodes and every key in it is gone. It refuses
while the switch lists owners (ndma kvd) of the space: stop them first,
or give --force (they then fail their next read of the region). The
space file is left as it is (remove it yourself: it names a region that
no longer exists).`,
		Example: `  ndma kv drop --space-file cache.space --switch 127.0.0.1:7471 --token-file fab/token --credential fab/client-0.cred`,
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
			if !force {
				ms, err := ep.ServiceMembers(ctx, kf.sw, kv.ServiceName(sp.Name), fab)
				if err != nil {
					return fmt.Errorf("asking the switch for the space's owners: %w", err)
				}
				if len(ms) > 0 {
					return fmt.Errorf("key space %q: %d owner ranks serve it: stop its kvd processes first, or give --force", sp.Name, len(ms))
				}
			}
			pc, err := pool.New(ep, kf.sw, pool.Options{Fabric: fab})
			if err != nil {
				return err
			}
			reg, err := pc.Open(ctx, sp.Region, sp.Key)
			if err != nil {
				return fmt.Errorf("key space %q: %w", sp.Name, err)
			}
			size := reg.Size()
			if err := pc.Free(ctx, reg); err != nil {
				return fmt.Errorf("key space %q: freeing region %d: %w", sp.Name, sp.Region, err)
			}
			w := cmd.OutOrStdout()
			if kf.json {
				return json.NewEncoder(w).Encode(map[string]any{"space": sp.Name, "region": sp.Region, "freed": size})
			}
			fmt.Fprintf(w, "key space %q: region %d freed (%s)\n", sp.Name, sp.Region, sizeString(uint64(size)))
			return nil
		},
	}
	cmd.Flags().StringVar(&file, "space-file", "", "the key space's space `file` (required)")
	cmd.Flags().BoolVar(&force, "force", false, "free the region even while owners serve it")
	return cmd
}
