package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/ndma/ndma/daemon/memd"
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/memnode/durable"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// memdFlags are the flags of `ndma memd`.
type memdFlags struct {
	listen  string
	size    string
	perm    string
	keyFile string
	metrics string
	mtu     int
	busy    time.Duration
	log     logFlags
	prof    profileFlag
	sw      string
	dir     string
	sync    string
	token   tokenFlags
	cred    credentialFlag
}

// memdFlagNames maps memd.Config fields to the flags that set them, so
// that errors from memd.Start name the flag the user typed.
var memdFlagNames = map[string]string{
	"Listen":      "--listen",
	"Size":        "--size",
	"Perm":        "--perm",
	"KeyFile":     "--key-file",
	"MetricsAddr": "--metrics",
	"MTU":         "--mtu",
	"BusyPoll":    "--busy-poll",
	"Switch":      "--switch",
	"Security":    "--credential",
	"Dir":         "--dir",
	"Sync":        "--sync",
}

func init() {
	var f memdFlags
	cmd := &cobra.Command{
		Use:   "memd",
		Short: "Run a memory node: serve one-sided operations on memory regions over UDP",
		Long: `memd runs an NDMA memory node. It exposes memory regions to peers' one-sided
READ, WRITE, compare-and-swap, fetch-and-add and vector operations over UDP.

Without --key-file it creates one region of --size bytes with permissions
--perm under a random key; with --key-file it creates the regions the file
lists (lines of "<hex key> <size> <perm>"; only its owner may read it). The
listening address and each region's size and permissions are printed on
stdout, with the key when memd drew it (without --key-file and --switch);
logs go to stderr and never show a key.
With --switch it also lends its region with the lowest key to that
forwarding node's memory pool, repeating the offer as its heartbeat; it
then needs the fabric token (--token-file, --token or $NDMA_TOKEN). The
lent region is then reachable only through the pool (the others stay
reachable with their keys), and its key is not printed.
With --dir (and --switch, without --key-file) the node is durable: the
lent region is the file DIR/memory, mapped into the node, and the grants
of the pool regions it holds are saved in DIR whenever they change. Started
again on DIR (after a crash or a power loss) it takes both back and reports
its grants to the switch, which serves its copies again where they are
still current and rebuilds the others from their second copy. --sync says
when writes reach the disk: "always" (the default) before the node answers
them, or an interval such as 100ms, in the background (an answered write is
then in memory on every copy, on disk within the interval). DIR/replies
keeps the replies to the newest writes and atomics, flushed with them, so
that one resent across a restart is answered, not applied again. memd
refuses a DIR of another --size, a corrupt grant record, and a DIR another
process uses.
The node seals every datagram it sends and receives (encrypted and
authenticated, after a handshake that proves each peer's credential)
under its credential, --credential (or $NDMA_CREDENTIAL), of role
memory-node (ndma fabric init writes a fabric's): it talks only to
processes with a credential of the same fabric, its switch and its
clients alike, and drops everything else. Without a credential it
refuses to start, unless --insecure asks it to run unsealed (the token
then optional; it logs a warning saying what anyone on the network can
do).
SIGINT or SIGTERM shuts the node down gracefully.`,
		Example: `  ndma fabric init fab
  ndma memd --listen 127.0.0.1:0 --size 64MiB --switch 127.0.0.1:7471 --token-file fab/token --credential fab/memory-0.cred
  ndma memd --listen 127.0.0.1:7470 --size 1GiB --credential fab/memory-0.cred
  ndma memd --listen 10.0.0.5:7470 --size 4GiB --switch 10.0.0.1:7471 --token-file fab/token --credential fab/memory-0.cred --dir /var/lib/ndma/mem0 --sync 100ms
  ndma memd --key-file keys.txt --metrics 127.0.0.1:9470 --json-logs --credential fab/memory-0.cred
  ndma memd --listen 127.0.0.1:7470 --size 1GiB --insecure   # unsealed: it warns what anyone on the network can do`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runMemd(cmd, &f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", memd.DefaultListen, "UDP `address` to serve on (host:port)")
	fl.StringVar(&f.size, "size", "64MiB", "size of the region without --key-file (at most the machine's memory and 1TiB): bytes, or with a unit KiB, MiB, GiB, TiB, KB, MB, GB, TB")
	fl.StringVar(&f.perm, "perm", "rwav", "permissions of the region without --key-file: r(ead) w(rite) a(tomic) v(ector)")
	fl.StringVar(&f.keyFile, "key-file", "", "`file` listing the regions to expose (\"<hex key> <size> <perm>\" per line) instead of --size and --perm")
	fl.StringVar(&f.metrics, "metrics", "", "TCP `address` to serve Prometheus metrics on at /metrics (default: none)")
	fl.DurationVar(&f.busy, "busy-poll", 0, fmt.Sprintf("poll the socket this long before sleeping, e.g. 50us (Linux, at most %v): less latency per request for a core's time; 0 sleeps at once", netio.MaxBusyPoll))
	fl.IntVar(&f.mtu, "mtu", transport.DefaultMTU, fmt.Sprintf("largest datagram to send, in bytes, header included (%d to %d)", memd.MinMTU, memd.MaxMTU))
	fl.StringVar(&f.sw, "switch", "", "forwarding node `address` (host:port) whose memory pool this node lends its region with the lowest key to")
	fl.StringVar(&f.dir, "dir", "", "`directory` keeping the lent memory and the node's pool grants across restarts (needs --switch; default: the memory dies with the node)")
	fl.StringVar(&f.sync, "sync", "always", "with --dir: when writes reach the disk, \"always\" (before the node answers them) or an `interval` such as 100ms (in the background)")
	f.token.register(fl)
	f.cred.register(fl, "of role memory-node")
	f.cred.registerRekey(fl)
	f.log.register(fl)
	f.prof.register(fl)
	cmd.MarkFlagsMutuallyExclusive("key-file", "size")
	cmd.MarkFlagsMutuallyExclusive("key-file", "perm")
	cmd.MarkFlagsMutuallyExclusive("key-file", "dir")
	rootCmd.AddCommand(cmd)
}

func runMemd(cmd *cobra.Command, f *memdFlags) error {
	cfg, err := f.config(cmd.ErrOrStderr())
	if err == nil {
		err = f.cred.watch(cmd, os.Getenv, cfg.Security, cfg.Logger)
	}
	if err != nil {
		return err
	}
	srv, err := memd.Start(cfg)
	if err != nil {
		return fieldFlagError(err, memdFlagNames)
	}
	printMemd(cmd.OutOrStdout(), srv, keyShown(cfg))

	return f.prof.profiled(func() error { return runUntilSignal(cmd, srv.Run) })
}

// config turns the flags into a memd.Config whose logger writes to logw.
func (f *memdFlags) config(logw io.Writer) (memd.Config, error) {
	logger, err := f.log.logger(logw)
	if err != nil {
		return memd.Config{}, err
	}
	cfg := memd.Config{
		KeyFile:     f.keyFile,
		MetricsAddr: f.metrics,
		MTU:         f.mtu,
		BusyPoll:    f.busy,
		Logger:      logger,
	}
	if cfg.Listen, err = resolveListen("--listen", f.listen); err != nil {
		return memd.Config{}, err
	}
	if f.sw == "" && f.token.givenToken() {
		return memd.Config{}, errors.New("--token, --token-file: only with --switch (the token authenticates this node to the forwarding node)")
	}
	sec, err := resolveSecurity(&f.token, &f.cred, os.Getenv, f.sw != "", logWarn(logger, "memd"), "memory-0.cred", secure.RoleMemoryNode)
	if err != nil {
		return memd.Config{}, err
	}
	cfg.Security, cfg.SecurityOptions = sec.id, sec.opts
	if f.sw != "" {
		if cfg.Switch, err = resolvePeer("--switch", f.sw); err != nil {
			return memd.Config{}, err
		}
		cfg.Token, cfg.Insecure = sec.token, len(sec.token) == 0
	}
	if f.dir != "" {
		if f.sw == "" {
			return memd.Config{}, errors.New("--dir: only with --switch (a durable node keeps the region it lends to the pool)")
		}
		cfg.Dir = f.dir
		if cfg.Sync, err = durable.ParseSync(f.sync); err != nil {
			return memd.Config{}, fmt.Errorf("--sync: %w", err)
		}
	} else if f.sync != "always" {
		return memd.Config{}, errors.New("--sync: only with --dir (it says when a durable node's writes reach the disk)")
	}
	if f.keyFile == "" {
		size, err := memnode.ParseSize(f.size)
		if err != nil {
			return memd.Config{}, fmt.Errorf("--size: %w", err)
		}
		if size <= 0 {
			return memd.Config{}, fmt.Errorf("--size: %q: a region needs at least 1 byte", f.size)
		}
		perm, err := wire.ParsePerm(f.perm)
		if err != nil {
			return memd.Config{}, fmt.Errorf("--perm: %w", err)
		}
		if perm == 0 {
			return memd.Config{}, fmt.Errorf("--perm: %q allows nothing", f.perm)
		}
		cfg.Size, cfg.Perm = size, perm
	}
	return cfg, nil
}

// keyShown says where memd's output shows a region's key instead of the
// key: only a key memd drew itself for a region clients reach directly is
// printed (the operator has a key file's keys; a lent region's key opens
// every pool region on the node and no client needs it). "" means the
// key.
func keyShown(cfg memd.Config) string {
	switch {
	case cfg.KeyFile != "":
		return "(in " + cfg.KeyFile + ")"
	case cfg.Switch != "":
		return "(lent to the pool)"
	}
	return ""
}

// printMemd writes what a client needs to reach the node: its address and
// each region's size, permissions and key, or instead of the key where it
// is (keyShown).
func printMemd(w io.Writer, srv *memd.Server, shown string) {
	fmt.Fprintf(w, "listen   %v (UDP, MTU %d bytes)\n", srv.Addr(), srv.MTU())
	if a := srv.MetricsAddr(); a != "" {
		fmt.Fprintf(w, "metrics  http://%s/metrics\n", a)
	}
	for _, r := range srv.Regions() {
		key := shown
		if key == "" {
			key = memd.FormatKey(r.Key)
		}
		fmt.Fprintf(w, "region   key %s  size %s (%d bytes)  perm %v\n", key, formatSize(int64(r.Size)), r.Size, r.Perm)
	}
}

// formatSize writes n bytes with the largest binary unit that divides it
// exactly, in memnode.ParseSize's syntax.
func formatSize(n int64) string {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.mult && n%u.mult == 0 {
			return fmt.Sprintf("%d%s", n/u.mult, u.suffix)
		}
	}
	return fmt.Sprintf("%dB", n)
}
