package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/ndma/ndma/daemon/kvd"
	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/kv"
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/pool"
)

// kvFlags are the flags every kv subcommand shares: the pool commands'
// and the key space's name.
type kvFlags struct {
	poolFlags
	space string
	// oneSidedFrom is kv.ClientConfig.OneSidedFrom (--one-sided-from,
	// on the commands that set values).
	oneSidedFrom int
}

// registerOneSided adds --one-sided-from to cmd, a command that sets
// values.
func (kf *kvFlags) registerOneSided(cmd *cobra.Command) {
	cmd.Flags().IntVar(&kf.oneSidedFrom, "one-sided-from", 0, fmt.Sprintf("value size from which a value is written one-sidedly into space its owner reserves, not sent through the owner (0: %d; negative: never)", kv.DefaultOneSidedFrom))
}

func newKvCmd() *cobra.Command {
	var kf kvFlags
	cmd := &cobra.Command{
		Use:   "kv",
		Short: "The key-value store: create a key space, get, set and delete keys, serve memcached and Redis clients, rebuild erasure-coded shards",
		Long: `kv talks to a key space of the key-value store: a hash table and its values
in one pool region, read one-sidedly from the memory nodes and written
through its owners (ndma kvd), reached through the forwarding node
(--switch). create makes a key space and writes its space file, which
its owners start from; the other commands need only the space's name
(--space): they ask a running owner for the region.

Give every kv command a credential of role client (--credential or
$NDMA_CREDENTIAL), or a job's rank its member credential: its datagrams
are sealed, region keys included. A command without one refuses to run,
unless --insecure (on a fabric that does not seal).`,
	}
	kf.register(cmd)
	cmd.PersistentFlags().StringVar(&kf.space, "space", "", "the key space's name (required; kv rebuild takes it from --space-file)")
	cmd.AddCommand(newKvCreateCmd(&kf), newKvGetCmd(&kf), newKvSetCmd(&kf), newKvDelCmd(&kf), newKvStatsCmd(&kf), newKvServeCmd(&kf), newKvRebuildCmd(&kf), newKvDropCmd(&kf))
	kf.hintCredential(cmd.Commands()...)
	return cmd
}

func init() { rootCmd.AddCommand(newKvCmd()) }

// open opens a client of the key space; ctx is bounded by --timeout.
func (kf *kvFlags) open(cmd *cobra.Command) (*kv.Client, *endpoint.Endpoint, context.Context, context.CancelFunc, error) {
	if err := kvd.CheckSpace(kf.space); err != nil {
		return nil, nil, nil, nil, fmt.Errorf("--space: %q: want 1 to 64 letters, digits, '_' or '-', the first a letter or digit", kf.space)
	}
	ep, fab, ctx, cancel, err := kf.client(cmd)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	pc, err := pool.New(ep, kf.sw, pool.Options{Fabric: fab})
	var c *kv.Client
	if err == nil {
		c, err = kv.Open(ctx, ep, pc, kv.ClientConfig{Switch: kf.sw, Fabric: fab, Space: kf.space, OneSidedFrom: kf.oneSidedFrom})
	}
	if err != nil {
		cancel()
		ep.Close()
		return nil, nil, nil, nil, err
	}
	return c, ep, ctx, cancel, nil
}

// newKvCreateCmd is ndma kv create.
func newKvCreateCmd(kf *kvFlags) *cobra.Command {
	var (
		out, page, heap, stripe, code, shard        string
		shards, buckets, maxBuckets, owners, copies int
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a key space and write its space file",
		Long: `create makes a key space: a pool region holding --shards shards of
--buckets keys each, with --heap bytes of values per shard in pages of
--page bytes (the largest value is a page less the key and 32 bytes),
spread over --owners owner ranks. With --max-buckets, each shard's
table grows to twice its buckets when more than three quarters of them
hold keys (kvd --grow-at), up to --max-buckets (--buckets times a power
of two; the space for it, one and a half times --max-buckets buckets of
32 bytes per shard, is taken at once); reads go on while it grows. It writes the space's name, region id
and key to the space file --out (a new file only its owner may read:
the key is the capability to the key space), from which each owner
starts (ndma kvd --space-file).

The region keeps one copy of every byte, or two (--replicas 2: survives
one memory node lost, storing twice the key space). --ec K+M codes the
key space instead: rows of K data and M parity shards of --ec-shard
bytes, each shard of a row on its own memory node (K+M of them needed),
the parity built by the memory nodes as the owners write. It survives
any M memory nodes lost while storing (K+M)/K times the key space (1.5
for 4+2); reads rebuild what a lost node held from K others. A shard's
heap (--heap) must be whole rows of K × --ec-shard bytes. A node that
restarts loses its shards until ndma kv rebuild rewrites them (while the
owners write); writes go on around a node that is down.`,
		Example: `  ndma kv create --space cache --owners 2 --out cache.space --switch 127.0.0.1:7471 --token-file fab/token --credential fab/client-0.cred
  ndma kv create --space sessions --shards 64 --buckets 65536 --page 4KiB --heap 64MiB --replicas 2 --out sessions.space --json
  ndma kv create --space objects --ec 4+2 --page 1MiB --heap 64MiB --out objects.space
  ndma kv create --space users --buckets 4096 --max-buckets 262144 --replicas 2 --out users.space`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := kvd.CheckSpace(kf.space); err != nil {
				return fmt.Errorf("--space: %q: want 1 to 64 letters, digits, '_' or '-', the first a letter or digit", kf.space)
			}
			if out == "" {
				return errors.New("--out: give the space file to write")
			}
			var l kv.Layout
			sizes := []struct {
				flag, v string
				dst     *uint64
			}{{"--page", page, &l.PageBytes}, {"--heap", heap, &l.HeapBytes}, {"--stripe", stripe, new(uint64)}, {"--ec-shard", shard, &l.Code.Shard}}
			for _, s := range sizes {
				n, err := memnode.ParseSize(s.v)
				if err != nil || n <= 0 {
					return fmt.Errorf("%s %q: want a positive size (%v)", s.flag, s.v, err)
				}
				*s.dst = uint64(n)
			}
			l.Shards, l.Buckets, l.MaxBuckets, l.Owners = shards, buckets, maxBuckets, owners
			alloc := pool.AllocOptions{Stripe: *sizes[2].dst, Replicas: copies}
			if code == "" {
				if cmd.Flags().Changed("ec-shard") {
					return errors.New("--ec-shard: give --ec too (the shard size of an erasure-coded key space)")
				}
				l.Code = kv.Coding{}
			} else {
				if err := parseCoding(code, &l.Code); err != nil {
					return err
				}
				if cmd.Flags().Changed("stripe") || copies != 1 {
					return errors.New("--ec: an erasure-coded key space keeps one copy (--replicas 1) in stripes of its shards (--ec-shard, not --stripe)")
				}
				alloc = pool.AllocOptions{}
			}
			if err := l.Check(); err != nil {
				return fmt.Errorf("--shards/--buckets/--max-buckets/--page/--heap/--owners/--ec: %w", err)
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
			reg, err := kv.Create(ctx, pc, l, alloc)
			if err != nil {
				return err
			}
			if err := kvd.WriteSpaceFile(out, kvd.Space{Name: kf.space, Region: reg.ID(), Key: reg.Key()}); err != nil {
				_ = pc.Free(context.WithoutCancel(ctx), reg)
				return fmt.Errorf("--out: %w (the region was freed)", err)
			}
			w := cmd.OutOrStdout()
			if kf.json {
				m := map[string]any{"space": kf.space, "region": reg.ID(), "size": l.Size(), "stored": reg.Size(), "file": out,
					"shards": l.Shards, "buckets": l.Buckets, "max_buckets": max(l.MaxBuckets, l.Buckets), "page": l.PageBytes, "heap": l.HeapBytes, "owners": l.Owners, "max_value": l.MaxValue(1)}
				if code != "" {
					m["ec"] = map[string]any{"k": l.Code.K, "m": l.Code.M, "shard": l.Code.Shard}
				}
				return json.NewEncoder(w).Encode(m)
			}
			coding := ""
			if code != "" {
				coding = fmt.Sprintf(", erasure-coded %d+%d in %s of pool memory", l.Code.K, l.Code.M, sizeString(uint64(reg.Size())))
			}
			keys := fmt.Sprint(l.Buckets)
			if l.MaxBuckets > l.Buckets {
				keys = fmt.Sprintf("%d (growing to %d)", l.Buckets, l.MaxBuckets)
			}
			fmt.Fprintf(w, "key space %q: region %d, %s%s, %d shards of %s keys, values up to %d bytes, %d owner ranks\nspace file %s (start each owner with ndma kvd --space-file %s --rank R)\n",
				kf.space, reg.ID(), sizeString(l.Size()), coding, l.Shards, keys, l.MaxValue(1), l.Owners, out, out)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&out, "out", "", "the space `file` to write (required; must not exist)")
	fl.IntVar(&shards, "shards", 16, "shards, 1 to 65536")
	fl.IntVar(&buckets, "buckets", 4096, "buckets per shard: the most keys a shard holds, unless its table grows (--max-buckets)")
	fl.IntVar(&maxBuckets, "max-buckets", 0, "the most buckets a shard's table grows to: --buckets times a power of two (0: it does not grow)")
	fl.StringVar(&page, "page", "64KiB", "heap page: the largest value record (a power of two, 64 B to 64 MiB)")
	fl.StringVar(&heap, "heap", "16MiB", "value space per shard (a multiple of --page)")
	fl.IntVar(&owners, "owners", 1, "owner ranks (ndma kvd) the shards are spread over")
	fl.IntVar(&copies, "replicas", 1, "copies of every byte on the memory nodes, 1 or 2")
	fl.StringVar(&stripe, "stripe", "64KiB", "the region's interleave unit (a multiple of 32 bytes)")
	fl.StringVar(&code, "ec", "", "erasure-code the key space as `K+M` data and parity shards (e.g. 4+2) instead of keeping copies")
	fl.StringVar(&shard, "ec-shard", "16KiB", "with --ec: the bytes of one shard of a row (a multiple of 4 KiB)")
	return cmd
}

// parseCoding parses --ec's K+M into c.
func parseCoding(s string, c *kv.Coding) error {
	ks, ms, ok := strings.Cut(s, "+")
	k, kerr := strconv.Atoi(ks)
	m, merr := strconv.Atoi(ms)
	if !ok || kerr != nil || merr != nil || k < 1 || m < 1 {
		return fmt.Errorf("--ec %q: want K+M, data and parity shards, such as 4+2", s)
	}
	c.K, c.M = k, m
	return nil
}

// newKvGetCmd is ndma kv get.
func newKvGetCmd(kf *kvFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "get KEY",
		Short: "Print a key's value (one-sided: no owner needed)",
		Long: `get reads KEY's value from the memory nodes and writes it to stdout as
it is (no newline added); with --json, an object with the value (or
value_base64, for bytes that are not UTF-8), version, flags and expiry.
A key that is absent or expired is an error.`,
		Example: `  ndma kv get --space cache user:42
  ndma kv get --space cache user:42 --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ep, ctx, cancel, err := kf.open(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			defer ep.Close()
			it, err := c.GetItem(ctx, []byte(args[0]))
			if err != nil {
				return fmt.Errorf("%q: %w", args[0], err)
			}
			w := cmd.OutOrStdout()
			if !kf.json {
				_, err = w.Write(it.Value)
				return err
			}
			m := map[string]any{"key": args[0], "version": it.Version, "flags": it.Flags}
			if utf8.Valid(it.Value) {
				m["value"] = string(it.Value)
			} else {
				m["value_base64"] = base64.StdEncoding.EncodeToString(it.Value)
			}
			if !it.Expires.IsZero() {
				m["expires"] = it.Expires.UTC().Format(time.RFC3339Nano)
			}
			return json.NewEncoder(w).Encode(m)
		},
	}
}

// newKvSetCmd is ndma kv set.
func newKvSetCmd(kf *kvFlags) *cobra.Command {
	var (
		ttl    time.Duration
		flags  uint32
		nx, xx bool
	)
	cmd := &cobra.Command{
		Use:   "set KEY [VALUE]",
		Short: "Store a value under a key (from stdin without VALUE)",
		Long: `set stores VALUE (or, without it, stdin) under KEY through the key's
owner and prints the new version. --ttl gives the value a time to live,
--nx stores only if the key is absent, --xx only if it is present.`,
		Example: `  ndma kv set --space cache user:42 alice --ttl 10m
  ndma kv set --space cache blob < picture.png`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if nx && xx {
				return errors.New("--nx and --xx: give one of them")
			}
			if ttl < 0 {
				return fmt.Errorf("--ttl %v: want a positive duration, or 0 for none", ttl)
			}
			c, ep, ctx, cancel, err := kf.open(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			defer ep.Close()
			key := []byte(args[0])
			var val []byte
			if len(args) == 2 {
				val = []byte(args[1])
			} else {
				limit := int64(c.MaxValue(len(key)))
				if val, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), limit+1)); err != nil {
					return fmt.Errorf("stdin: %w", err)
				}
				if int64(len(val)) > limit {
					return fmt.Errorf("stdin: %w: more than %d bytes (the largest value with this key)", kv.ErrTooLarge, limit)
				}
			}
			o := kv.SetOptions{TTL: ttl, Flags: flags}
			var ver uint64
			switch {
			case nx:
				ver, err = c.AddWith(ctx, key, val, o)
			case xx:
				ver, err = c.Replace(ctx, key, val, o)
			default:
				ver, err = c.SetWith(ctx, key, val, o)
			}
			if err != nil {
				return fmt.Errorf("%q: %w", args[0], err)
			}
			if kf.json {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"key": args[0], "version": ver})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d\n", ver)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.DurationVar(&ttl, "ttl", 0, "time to live (0: none)")
	fl.Uint32Var(&flags, "flags", 0, "32 bits kept with the value (memcached's flags)")
	fl.BoolVar(&nx, "nx", false, "store only if the key is absent")
	fl.BoolVar(&xx, "xx", false, "store only if the key is present")
	kf.registerOneSided(cmd)
	return cmd
}

// newKvDelCmd is ndma kv del.
func newKvDelCmd(kf *kvFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "del KEY",
		Short:   "Delete a key",
		Example: `  ndma kv del --space cache user:42`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ep, ctx, cancel, err := kf.open(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			defer ep.Close()
			if err := c.Delete(ctx, []byte(args[0])); err != nil {
				return fmt.Errorf("%q: %w", args[0], err)
			}
			if kf.json {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"key": args[0], "deleted": true})
			}
			return nil
		},
	}
}
