package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/ndma/ndma/daemon/switchd"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
)

// switchFlags are the flags of `ndma switch`.
type switchFlags struct {
	listen           string
	token            tokenFlags
	cred             credentialFlag
	heartbeatTimeout time.Duration
	poolSlots        int
	mtu              int
	drop, dup        float64
	reorder, corrupt float64
	seed             uint64
	metrics          string
	busyPoll         time.Duration
	readers          int
	parent           string
	children         []string
	etcd             []string
	etcdPrefix       string
	log              logFlags
	prof             profileFlag
}

// switchFlagNames maps switchd.Config fields to the flags that set them,
// so that errors from switchd.Start name the flag the user typed.
var switchFlagNames = map[string]string{
	"Listen":           "--listen",
	"HeartbeatTimeout": "--heartbeat-timeout",
	"PoolSlots":        "--pool-slots",
	"MTU":              "--mtu",
	"Fault.Drop":       "--drop",
	"Fault.Dup":        "--dup",
	"Fault.Reorder":    "--reorder",
	"Fault.Corrupt":    "--corrupt",
	"MetricsAddr":      "--metrics",
	"BusyPoll":         "--busy-poll",
	"Readers":          "--readers",
	"Security":         "--credential",
	"Parent":           "--parent",
	"Children":         "--child",
	"Etcd":             "--etcd",
	"EtcdPrefix":       "--etcd-prefix",
}

func init() {
	var f switchFlags
	cmd := &cobra.Command{
		Use:   "switch",
		Short: "Run a forwarding node: multicast, aggregation and anycast for groups of endpoints over UDP",
		Long: `switch runs an NDMA forwarding node. Endpoints join jobs and register services
at it through its control plane (authenticated with the fabric token); it
then replicates each member's multicast to the group and merges the ACKs,
reduces aggregation contributions in a pool of slots and sends only the
result, and relays anycast requests to one member of a service.

The switch seals every datagram it sends and receives (encrypted and
authenticated, after a handshake that proves each peer's credential)
under its credential, --credential (or $NDMA_CREDENTIAL), of role switch
(ndma fabric init writes a fabric's): it talks only to processes with a
credential of the same fabric, and drops everything else. It also needs
the fabric token, which authenticates control messages: from
--token-file (its first line; only its owner may read it), --token (seen
in the process list: it warns) or $NDMA_TOKEN (the token itself).
Without a credential it refuses to start, unless --insecure asks it to
run unsealed: the token is then optional (without one nothing is
authenticated), and it logs a warning saying what anyone on the network
can do.

With --etcd the switch keeps its pool map in etcd: every region's shape,
key, homes, epoch, lost columns and fences, written in the background as
they change, under --etcd-prefix. A switch that starts takes the regions
from there (with their keys), then settles every copy with the memory
nodes' reports; it also holds a liveness key under a lease, gone once the
switch stops. Without --etcd the map lives in the switch alone and a
restarted switch rebuilds it from the memory nodes' reports.

--drop, --dup, --reorder and --corrupt inject faults into
everything the switch sends, reproducibly from --seed, to test endpoints
against a lossy fabric.

The listening address is printed on stdout; logs go to stderr. SIGINT or
SIGTERM shuts the switch down gracefully.`,
		Example: `  ndma fabric init fab
  ndma switch --listen 127.0.0.1:7471 --token-file fab/token --credential fab/switch.cred --metrics 127.0.0.1:9471
  ndma switch --token-file fab/token --credential fab/switch.cred --drop 0.01 --reorder 0.01 --seed 7 --json-logs
  ndma switch --listen 127.0.0.1:7471 --insecure --token-file fab/token   # unsealed: it warns what anyone on the network can do
  ndma switch --token-file fab/token --credential fab/switch.cred --etcd 10.0.0.5:2379,10.0.0.6:2379`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runSwitch(cmd, &f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", switchd.DefaultListen, "UDP `address` to serve on (host:port)")
	f.token.register(fl)
	f.cred.register(fl, "of role switch")
	f.cred.registerRekey(fl)
	fl.DurationVar(&f.heartbeatTimeout, "heartbeat-timeout", switchd.DefaultHeartbeatTimeout,
		fmt.Sprintf("how long a member may go without a heartbeat before it is declared dead (at least %v; up to 4 times that for a member whose heartbeats have been irregular)", switchd.MinHeartbeatTimeout))
	fl.IntVar(&f.poolSlots, "pool-slots", switchd.DefaultPoolSlots, fmt.Sprintf("aggregation slots, each one chunk of a reduction in flight (1 to %d)", switchd.MaxPoolSlots))
	fl.IntVar(&f.mtu, "mtu", switchd.DefaultMTU, fmt.Sprintf("largest datagram the switch's own streams send, in bytes, header included (%d to %d)", switchd.MinMTU, switchd.MaxMTU))
	fl.Float64Var(&f.drop, "drop", 0, "fault injection: probability of dropping each datagram sent, in [0, 1]")
	fl.Float64Var(&f.dup, "dup", 0, "fault injection: probability of sending a datagram twice, in [0, 1]")
	fl.Float64Var(&f.reorder, "reorder", 0, "fault injection: probability of holding a datagram back behind later ones, in [0, 1]")
	fl.Float64Var(&f.corrupt, "corrupt", 0, "fault injection: probability of flipping one bit of a datagram, in [0, 1]")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the fault injection generator (with --drop, --dup, --reorder or --corrupt; at least 1)")
	fl.StringVar(&f.metrics, "metrics", "", "TCP `address` to serve Prometheus metrics on at /metrics (default: none)")
	fl.DurationVar(&f.busyPoll, "busy-poll", 0, fmt.Sprintf("poll the socket this long before sleeping, e.g. 50us (Linux, at most %v): less latency per request for a core's time; 0 sleeps at once", netio.MaxBusyPoll))
	fl.StringVar(&f.parent, "parent", "", "UDP `address` (host:port) of the switch above this one in a tree of switches: jobs joined here are formed at the tree's root and span the tree (default: none)")
	fl.StringArrayVar(&f.children, "child", nil, "UDP `address` (host:port) a switch below this one sends from; repeat for each child (only these may join members through this switch)")
	fl.IntVar(&f.readers, "readers", 1, fmt.Sprintf("sockets bound to --listen (SO_REUSEPORT, Linux), each with a reader, so that a switch with cores of its own uses several (at most %d)", switchd.MaxReaders))
	fl.StringSliceVar(&f.etcd, "etcd", nil, "etcd client `endpoints` (host:port, comma-separated) to keep the pool map in (default: none, the map lives in the switch)")
	fl.StringVar(&f.etcdPrefix, "etcd-prefix", "", "etcd key `prefix` of the switch's keys, with --etcd (default \"/ndma/\")")
	f.log.register(fl)
	f.prof.register(fl)
	rootCmd.AddCommand(cmd)
}

func runSwitch(cmd *cobra.Command, f *switchFlags) error {
	cfg, err := f.config(cmd)
	if err != nil {
		return err
	}
	srv, err := switchd.Start(cfg)
	if err != nil {
		return fieldFlagError(err, switchFlagNames)
	}
	printSwitch(cmd.OutOrStdout(), srv)

	return f.prof.profiled(func() error { return runUntilSignal(cmd, srv.Run) })
}

// config turns the flags into a switchd.Config whose logger writes to the
// command's stderr.
func (f *switchFlags) config(cmd *cobra.Command) (switchd.Config, error) {
	logw := cmd.ErrOrStderr()
	logger, err := f.log.logger(logw)
	if err != nil {
		return switchd.Config{}, err
	}
	// Zero selects a default in switchd.Config; on the command line it
	// is a mistake, not a request for the default.
	if f.heartbeatTimeout <= 0 {
		return switchd.Config{}, fmt.Errorf("--heartbeat-timeout: %v: must be positive", f.heartbeatTimeout)
	}
	if f.poolSlots <= 0 {
		return switchd.Config{}, fmt.Errorf("--pool-slots: %d: want 1 to %d", f.poolSlots, switchd.MaxPoolSlots)
	}
	if f.mtu <= 0 {
		return switchd.Config{}, fmt.Errorf("--mtu: %d bytes: want %d to %d", f.mtu, switchd.MinMTU, switchd.MaxMTU)
	}
	if f.seed == 0 {
		return switchd.Config{}, errors.New("--seed: 0: want at least 1")
	}
	sec, err := resolveSecurity(&f.token, &f.cred, os.Getenv, true, logWarn(logger, "switchd"), "switch.cred", secure.RoleSwitch)
	if err == nil {
		err = f.cred.watch(cmd, os.Getenv, sec.id, logger)
	}
	if err != nil {
		return switchd.Config{}, err
	}
	listen, err := resolveListen("--listen", f.listen)
	if err != nil {
		return switchd.Config{}, err
	}
	return switchd.Config{
		Listen:           listen,
		Token:            sec.token,
		Insecure:         len(sec.token) == 0,
		Security:         sec.id,
		SecurityOptions:  sec.opts,
		HeartbeatTimeout: f.heartbeatTimeout,
		PoolSlots:        f.poolSlots,
		MTU:              f.mtu,
		Fault:            fabric.FaultConfig{Drop: f.drop, Dup: f.dup, Reorder: f.reorder, Corrupt: f.corrupt, Seed: f.seed},
		MetricsAddr:      f.metrics,
		BusyPoll:         f.busyPoll,
		Readers:          f.readers,
		Parent:           f.parent,
		Children:         f.children,
		Etcd:             f.etcd,
		EtcdPrefix:       f.etcdPrefix,
		Logger:           logger,
	}, nil
}

// printSwitch writes what endpoints and operators need: the switch's
// address and its metrics URL.
func printSwitch(w io.Writer, srv *switchd.Server) {
	fmt.Fprintf(w, "listen   %v (UDP, MTU %d bytes)\n", srv.Addr(), srv.MTU())
	if a := srv.MetricsAddr(); a != "" {
		fmt.Fprintf(w, "metrics  http://%s/metrics\n", a)
	}
}
