package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/stor"
	"github.com/ndma/ndma/transport"
)

// storDaemonFlags are the flags ndma stord and ndma storgw share.
type storDaemonFlags struct {
	listen  string
	sw      string
	service string
	mtu     int
	token   tokenFlags
	cred    credentialFlag
	log     logFlags
}

func (f *storDaemonFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.listen, "listen", ":0", "UDP `address` to serve on (host:port; port 0 picks one)")
	fl.StringVar(&f.sw, "switch", os.Getenv("NDMA_SWITCH"), "forwarding node `address` (host:port; default $NDMA_SWITCH)")
	fl.StringVar(&f.service, "service", stor.DefaultService, "storage service name at the switch (one per storage cluster)")
	fl.IntVar(&f.mtu, "mtu", transport.DefaultMTU, "largest datagram to send, in bytes, header included (at most the switch's)")
	f.token.register(fl)
	f.cred.register(fl, "of role member")
	f.cred.registerRekey(fl)
	f.log.register(fl)
}

// storDaemon is what a storage daemon runs with: its endpoint (which the
// caller closes), the switch, the fabric options, its credential and
// logger.
type storDaemon struct {
	ep     *endpoint.Endpoint
	sw     string
	fab    endpoint.FabricOptions
	id     *secure.Identity
	logger *slog.Logger
}

// open checks the flags and opens the daemon's endpoint, whose operations
// wait up to opTimeout (0: the default).
func (f *storDaemonFlags) open(cmd *cobra.Command, opTimeout time.Duration) (*storDaemon, error) {
	d := &storDaemon{}
	var err error
	if d.logger, err = f.log.logger(cmd.ErrOrStderr()); err != nil {
		return nil, err
	}
	if f.sw == "" {
		return nil, errors.New("--switch: no forwarding node given (nor $NDMA_SWITCH)")
	}
	if d.sw, err = resolvePeer("--switch", f.sw); err != nil {
		return nil, err
	}
	listen, err := resolveListen("--listen", f.listen)
	if err != nil {
		return nil, err
	}
	file := "storage-0.cred" // ndma fabric init issues none for a gateway
	if cmd.Name() != "stord" {
		file = ""
	}
	sec, err := resolveSecurity(&f.token, &f.cred, os.Getenv, true, logWarn(d.logger, cmd.Name()), file, secure.RoleMember)
	if err != nil {
		return nil, err
	}
	d.id, d.fab = sec.id, sec.fabric()
	if id := d.id; id != nil {
		d.logger.Info(fmt.Sprintf("%s: sealing every datagram (role %v, name %q): only processes with a credential of this fabric are answered", cmd.Name(), id.Cert.Role, id.Cert.Name),
			"key", secure.Fingerprint(id.Cert.Key), "authority", secure.Fingerprint(id.Authority))
	}
	if err = f.cred.watch(cmd, os.Getenv, d.id, d.logger); err != nil {
		return nil, err
	}
	eopts := sec.endpoint()
	if d.ep, err = endpoint.Listen(listen, endpoint.Config{Transport: transport.Config{MTU: f.mtu}, OpTimeout: opTimeout}, eopts); err != nil {
		return nil, fmt.Errorf("--listen/--mtu: %w", err)
	}
	return d, nil
}

// stordFlags are the flags of `ndma stord`.
type stordFlags struct {
	storDaemonFlags
	dir      string
	id       int
	capacity string
}

func init() {
	var f stordFlags
	cmd := &cobra.Command{
		Use:   "stord",
		Short: "Run a storage node: keep extents of replicated volumes on disk, serve them through the switch",
		Long: `stord runs an NDMA storage node. It keeps the extents of replicated volumes
(ndma vol) in files under --dir, each extent with the version of its last
write, and registers with the forwarding node (--switch) as a member of
the storage service: clients' writes reach it as multicasts to the
replica group of an extent, reads as anycasts to the extent's replica set
(the switch picks the replica with the fewest requests in flight), and
it answers the client directly.

Every node of a volume keeps the volume's descriptor: the nodes hold the
volume map, and a switch that restarts learns who serves what again from
them (each node checks every second that the switch lists it, and
registers again if not). A node that was down copies the extents it
missed from the other replicas before it serves reads again. Writes are
durable once the writer flushes (each replica fdatasyncs).

The node's id (--id) is kept in --dir at the first start; give each node
of a fabric its own. --capacity bounds the bytes of extents it takes (a
volume that would not fit is refused). Every datagram is sealed under
the node's credential (--credential, role member) and the fabric token
(--token-file, --token or $NDMA_TOKEN) authenticates its control
messages; without a credential it refuses to start, unless --insecure.
SIGINT or SIGTERM shuts the node down.`,
		Example: `  ndma fabric init fab --storage-nodes 2
  ndma stord --dir /var/lib/ndma/stor0 --id 0 --switch 127.0.0.1:7471 --token-file fab/token --credential fab/storage-0.cred
  ndma stord --dir ./s1 --id 1 --capacity 64GiB --switch 10.0.0.1:7471 --token-file fab/token --credential fab/storage-1.cred`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runStord(cmd, &f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dir, "dir", "", "`directory` holding the node's volumes (created if missing; required)")
	fl.IntVar(&f.id, "id", -1, fmt.Sprintf("node id, 0 to %d (default: the one --dir holds, 0 for a new one)", stor.MaxNodes-1))
	fl.StringVar(&f.capacity, "capacity", "0", "most bytes of extents to take (0: as much as the disk holds)")
	f.storDaemonFlags.register(fl)
	_ = cmd.MarkFlagRequired("dir")
	rootCmd.AddCommand(cmd)
}

func runStord(cmd *cobra.Command, f *stordFlags) error {
	if f.dir == "" {
		return errors.New("--dir: give the node's directory")
	}
	if f.id < -1 || f.id >= stor.MaxNodes {
		return fmt.Errorf("--id %d: want 0 to %d", f.id, stor.MaxNodes-1)
	}
	capacity, err := memnode.ParseSize(f.capacity)
	if err != nil || capacity < 0 {
		return fmt.Errorf("--capacity %q: want a size, 0 for no bound (%v)", f.capacity, err)
	}
	d, err := f.open(cmd, 0)
	if err != nil {
		return err
	}
	ep, sw, id := d.ep, d.sw, d.id
	defer ep.Close()
	n, err := stor.NewNode(ep, stor.NodeConfig{Dir: f.dir, ID: f.id, Capacity: uint64(capacity), Switch: sw, Fabric: d.fab, Service: f.service, Logger: d.logger})
	if err != nil {
		return err
	}
	return runUntilSignal(cmd, func(ctx context.Context) error {
		if err := startWaiting(ctx, d.logger, "stord", sw, id, n.Start); err != nil || ctx.Err() != nil {
			n.Close()
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "storage node %d listening on %v, dir %s, switch %s\n", n.ID(), ep.LocalAddr(), f.dir, sw)
		<-ctx.Done()
		n.Close()
		return nil
	})
}

func init() {
	var (
		f    storDaemonFlags
		name string
	)
	cmd := &cobra.Command{
		Use:   "storgw",
		Short: "Run a storage gateway: the controller every I/O goes through, for comparison with multicast and anycast",
		Long: `storgw runs the controller of the controller-forwarding design, which
NDMA's multicast writes and anycast reads improve on: a storage target on
its own host that clients send every read, write and flush to. It
forwards a read to one replica of its extent (as the switch picks) and
relays the answer, and a write to every replica, a copy each, answering
when all have it. Clients use it with ndma bench vol --mode controller
(or stor.OpenOptions.Controller); the volumes, leases and storage nodes
are the same as without it.
SIGINT or SIGTERM shuts it down.`,
		Example: `  ndma storgw --switch 127.0.0.1:7471 --token-file fab/token --credential gw.cred   # a member credential (ndma credential issue --role member)`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := f.open(cmd, stor.IOTimeout)
			if err != nil {
				return err
			}
			ep, sw, id := d.ep, d.sw, d.id
			defer ep.Close()
			gw := stor.NewGateway(ep, stor.GatewayConfig{Switch: sw, Fabric: d.fab, Service: f.service, Name: name, Logger: d.logger})
			return runUntilSignal(cmd, func(ctx context.Context) error {
				if err := startWaiting(ctx, d.logger, "storgw", sw, id, gw.Start); err != nil || ctx.Err() != nil {
					return err
				}
				if name == "" {
					name = stor.GatewayName(f.service)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "storage gateway %q listening on %v, switch %s\n", name, ep.LocalAddr(), sw)
				<-ctx.Done()
				gw.Close()
				return nil
			})
		},
	}
	fl := cmd.Flags()
	f.register(fl)
	fl.StringVar(&name, "name", "", "the gateway's own service name (default SERVICE.gw)")
	rootCmd.AddCommand(cmd)
}

// startWaiting runs start (a daemon's registration with the switch at
// sw), each try bounded to 10 s, until it succeeds. A switch that does
// not answer (not started yet, restarting) is tried again every second,
// with a warning each time the answer changes, for as long as the
// daemon runs, as a supervisor would restart it: a storage node started
// while the switch is down comes up when it is back. A refusal (a
// status: a wrong token or credential) ends it with the error. It
// returns nil without starting when ctx ends.
func startWaiting(ctx context.Context, log *slog.Logger, who, sw string, id *secure.Identity, start func(context.Context) error) error {
	warned := false
	for {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := start(sctx)
		cancel()
		switch {
		case err == nil:
			if warned {
				log.Info(who+": the switch answers: registered", "switch", sw)
			}
			return nil
		case ctx.Err() != nil:
			return nil
		case !errors.Is(err, endpoint.ErrNoSwitch) && !errors.Is(err, context.DeadlineExceeded):
			return credentialHint(err, id)
		case !warned:
			warned = true
			log.Warn(who+": no switch answers yet; trying again every second", "switch", sw, "err", credentialHint(err, id))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}
