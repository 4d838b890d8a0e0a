package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/ndma/ndma/daemon/kvd"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
)

// kvdFlags are the flags of `ndma kvd`.
type kvdFlags struct {
	listen    string
	sw        string
	spaceFile string
	rank      int
	mtu       int
	metrics   string
	write     time.Duration
	lease     time.Duration
	growAt    float64
	clients   []string
	standby   bool
	token     tokenFlags
	cred      credentialFlag
	log       logFlags
}

// kvdFlagNames maps kvd.Config fields to the flags that set them.
var kvdFlagNames = map[string]string{
	"Listen":       "--listen",
	"Switch":       "--switch",
	"MTU":          "--mtu",
	"Space":        "--space-file",
	"Region":       "--space-file",
	"Rank":         "--rank",
	"WriteTimeout": "--write-timeout",
	"Lease":        "--lease",
	"GrowAt":       "--grow-at",
	"Clients":      "--clients",
	"MetricsAddr":  "--metrics",
	"Security":     "--credential",
}

func init() {
	var f kvdFlags
	cmd := &cobra.Command{
		Use:   "kvd",
		Short: "Run an owner of a key-value store's key space: apply the writes of its shards",
		Long: `kvd runs one owner rank of a key space (ndma kv create makes one and
writes its space file). The key space's shards are spread over its owners
(kv create --owners); each rank's writes (set, add, replace, append,
prepend, cas, delete, incr, touch) reach the one kvd of that rank by
anycast through the forwarding node (--switch), which writes the value
into the space's pool region and then publishes it. Reads never reach an
owner: clients read the region one-sidedly, and go on while owners
restart. A kvd that starts loads its shards from the region, so a rank's
owner can be restarted, on any host, from the same space file.

Run two kvd of one rank (the second with --standby) for failover: the
switch lets one process hold a rank; the other waits, and takes the rank
over when the switch counts the holder dead (its heartbeats stopped: a
crash, or a cut link). A holder writes only while the switch has
answered one of its heartbeats within --lease, and a process that takes
a rank waits --lease plus 250 ms before writing and reads the shards
again, so two processes never write a rank's shards at once. Writes to
the rank are answered busy (and sent again by clients) meanwhile.

Every datagram is sealed under the daemon's credential (--credential,
role member, named kv-SPACE or kv-SPACE/RANK: only those may serve the
space's writes; ndma credential issue --role member --name kv-cache/0)
and the fabric token
(--token-file, --token or $NDMA_TOKEN) authenticates its control
messages; without a credential it refuses to start, unless --insecure.
On a sealed fabric only credentials of the key space's own scope and of
the scopes --clients names may use it: the owner refuses everyone else
(the switch certifies each request's scope), so give it the scopes of
the processes that read and write the key space (ndma kv commands, kv
serve front ends, programs).
SIGINT or SIGTERM shuts it down.`,
		Example: `  ndma kv create --space cache --owners 2 --out cache.space --switch 127.0.0.1:7471 --token-file fab/token --credential fab/client-0.cred
  ndma kvd --space-file cache.space --rank 0 --clients client-0 --switch 127.0.0.1:7471 --token-file fab/token --credential kv-0.cred
  ndma kvd --space-file cache.space --rank 1 --clients client-0 --switch 127.0.0.1:7471 --token-file fab/token --credential kv-1.cred --metrics 127.0.0.1:9475
  ndma kvd --space-file cache.space --rank 1 --clients client-0 --standby --switch 127.0.0.1:7471 --token-file fab/token --credential kv-1.cred`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runKvd(cmd, &f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", ":0", "UDP `address` to serve on (host:port; port 0 picks one)")
	fl.StringVar(&f.sw, "switch", os.Getenv("NDMA_SWITCH"), "forwarding node `address` (host:port; default $NDMA_SWITCH)")
	fl.StringVar(&f.spaceFile, "space-file", "", "the key space's space `file`, as ndma kv create wrote it (required)")
	fl.IntVar(&f.rank, "rank", 0, "the owner rank to run, 0 to the key space's owners - 1")
	fl.IntVar(&f.mtu, "mtu", transport.DefaultMTU, "largest datagram to send, in bytes, header included (at most the switch's)")
	fl.StringVar(&f.metrics, "metrics", "", "TCP `address` to serve Prometheus metrics on at /metrics (empty: none)")
	fl.DurationVar(&f.write, "write-timeout", 0, "bound on each write to the pool (0: 5s)")
	fl.DurationVar(&f.lease, "lease", 0, "how long the owner writes after the switch last confirmed it holds its rank (0: 1s)")
	fl.StringSliceVar(&f.clients, "clients", nil, "`scopes` whose credentials may use the key space besides its own (kv-SPACE), comma-separated: a client credential named NAME, or a member's SCOPE/NAME (on a sealed fabric every other scope is refused)")
	fl.Float64Var(&f.growAt, "grow-at", 0, "the load (keys over buckets) past which a shard's table grows, in a key space created with --max-buckets (0: 0.75)")
	fl.BoolVar(&f.standby, "standby", false, "start even while another process holds the rank, and take it over when that one fails")
	f.token.register(fl)
	f.cred.register(fl, "of role member")
	f.cred.registerRekey(fl)
	f.log.register(fl)
	_ = cmd.MarkFlagRequired("space-file")
	rootCmd.AddCommand(cmd)
}

func runKvd(cmd *cobra.Command, f *kvdFlags) error {
	logger, err := f.log.logger(cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	if f.sw == "" {
		return errors.New("--switch: no forwarding node given (nor $NDMA_SWITCH)")
	}
	sw, err := resolvePeer("--switch", f.sw)
	if err != nil {
		return err
	}
	listen, err := resolveListen("--listen", f.listen)
	if err != nil {
		return err
	}
	sp, err := kvd.ReadSpaceFile(f.spaceFile)
	if err != nil {
		return fmt.Errorf("--space-file: %w", err)
	}
	sec, err := resolveSecurity(&f.token, &f.cred, os.Getenv, true, logWarn(logger, "kvd"), "", secure.RoleMember)
	if err != nil {
		return err
	}
	if err = f.cred.watch(cmd, os.Getenv, sec.id, logger); err != nil {
		return err
	}
	fab := sec.fabric()
	srv, err := kvd.New(kvd.Config{Listen: listen, Switch: sw, Token: fab.Token, Insecure: fab.Insecure, Security: sec.id, SecurityOptions: sec.opts,
		MTU: f.mtu, Space: sp.Name, Region: sp.Region, RegionKey: sp.Key, Rank: f.rank, WriteTimeout: f.write, Lease: f.lease, GrowAt: f.growAt, Clients: f.clients, Standby: f.standby, MetricsAddr: f.metrics, Logger: logger})
	if err != nil {
		return fieldFlagError(err, kvdFlagNames)
	}
	return runUntilSignal(cmd, func(ctx context.Context) error {
		if err := startWaiting(ctx, logger, "kvd", sw, sec.id, srv.Start); err != nil || ctx.Err() != nil {
			return errors.Join(err, srv.Close())
		}
		fmt.Fprintf(cmd.OutOrStdout(), "listen   %v (UDP): key space %q, owner rank %d, switch %s\n", srv.Addr(), sp.Name, f.rank, sw)
		return srv.Run(ctx)
	})
}
