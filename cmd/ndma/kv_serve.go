package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/spf13/cobra"

	"github.com/ndma/ndma/kv/frontend"
)

// newKvServeCmd is ndma kv serve.
func newKvServeCmd(kf *kvFlags) *cobra.Command {
	var (
		mcAddr, redisAddr string
		expose            bool
		cfg               frontend.Config
		log               logFlags
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve a key space to memcached and Redis clients",
		Long: `serve speaks the memcached text protocol (--memcached) and RESP2/RESP3
(--redis) on TCP, over the key space: run it beside unmodified clients
(redis-cli, redis-benchmark, libmemcached's tools, client libraries) as a
sidecar. A GET reads the memory nodes one-sidedly; writes go to the key's
owner.

memcached: get, gets, set, add, replace, append, prepend, cas, delete,
incr, decr, touch, stats, version, verbosity, quit; flush_all is
answered SERVER_ERROR (a key space has no global erase). Redis: GET, SET
(EX, PX, EXAT, PXAT, NX, XX), DEL, UNLINK, EXISTS, INCR, DECR, INCRBY,
DECRBY, MGET, MSET (key by key, not atomic), EXPIRE, PEXPIRE, TTL, PTTL,
PERSIST, PING, ECHO, INFO, HELLO (2 and 3), COMMAND, CONFIG GET, CLIENT
SETNAME/SETINFO, SELECT 0, QUIT; other commands get the protocol's
error. A value over the key space's largest is refused; a line over
--max-line, or RESP framing that cannot be followed, ends that
connection only. SIGINT or SIGTERM stops it.`,
		Example: `  ndma kv serve --space cache --memcached 127.0.0.1:11211 --redis 127.0.0.1:6379 --switch 127.0.0.1:7471 --token-file fab/token --credential fab/client-0.cred
  redis-cli -p 6379 SET greeting hello EX 60`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("json") {
				return errors.New("--json: kv serve prints no results to format (--json-logs writes its log as JSON)")
			}
			if mcAddr == "" && redisAddr == "" {
				return errors.New("--memcached, --redis: give at least one address to serve on")
			}
			for _, a := range []struct{ flag, addr string }{{"--memcached", mcAddr}, {"--redis", redisAddr}} {
				if err := frontAddrAllowed(a.flag, a.addr, expose); err != nil {
					return err
				}
			}
			logger, err := log.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			c, ep, _, cancel, err := kf.open(cmd)
			if err != nil {
				return err
			}
			cancel() // --timeout bounded the opening only
			defer ep.Close()
			cfg.Store, cfg.Logger = c, logger
			srv, err := frontend.New(cfg)
			if err != nil {
				return fmt.Errorf("--max-conns/--max-line/--max-request/--op-timeout: %w", err)
			}
			var lns []net.Listener
			defer func() {
				for _, l := range lns {
					l.Close()
				}
			}()
			for _, a := range []struct{ flag, addr string }{{"--memcached", mcAddr}, {"--redis", redisAddr}} {
				if a.addr == "" {
					continue
				}
				l, err := net.Listen("tcp", a.addr)
				if err != nil {
					return fmt.Errorf("%s: %w", a.flag, err)
				}
				lns = append(lns, l)
				fmt.Fprintf(cmd.OutOrStdout(), "listen   %v (TCP, %s): key space %q\n", l.Addr(), a.flag[2:], kf.space)
			}
			return runUntilSignal(cmd, func(ctx context.Context) error {
				failed := make(chan error, len(lns))
				for i, l := range lns {
					p := frontend.Memcached
					if i == 1 || mcAddr == "" {
						p = frontend.Redis
					}
					go func() { failed <- srv.Serve(l, p) }()
				}
				var err error
				select {
				case <-ctx.Done():
				case err = <-failed:
				}
				srv.Close()
				st := srv.Stats()
				logger.Info("kv serve: stopped", "connections", st.Accepted, "refused", st.Refused, "commands", st.Commands, "errors", st.Errors)
				return err
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&mcAddr, "memcached", "", "TCP `address` to serve the memcached text protocol on (host:port)")
	fl.StringVar(&redisAddr, "redis", "", "TCP `address` to serve RESP (Redis) on (host:port)")
	fl.BoolVar(&expose, "expose", false, "serve on addresses other than loopback: every client that reaches them may read and write the key space (the protocols carry no credential)")
	fl.IntVar(&cfg.MaxConns, "max-conns", frontend.DefaultMaxConns, "most connections served at once")
	fl.IntVar(&cfg.MaxLine, "max-line", frontend.DefaultMaxLine, "longest command line, in bytes")
	fl.IntVar(&cfg.MaxRequest, "max-request", 0, "most bytes of one request's arguments (0: 4 MiB, at least the largest value)")
	fl.DurationVar(&cfg.Timeout, "op-timeout", frontend.DefaultTimeout, "bound on each store operation")
	fl.DurationVar(&cfg.IdleTimeout, "idle-timeout", 0, "close a connection idle this long (0: never)")
	kf.registerOneSided(cmd)
	log.register(fl)
	return cmd
}

// frontAddrAllowed refuses a front-end address other than loopback
// without --expose: memcached, RESP and Kafka clients carry no
// credential to the front ends, so whoever reaches the address acts
// with the front end's.
func frontAddrAllowed(flag, addr string, expose bool) error {
	if addr == "" || expose {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q: %w", flag, addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%s %s: not a loopback address: the front end cannot authenticate its clients (memcached, Redis, Kafka), so anyone who reaches it would use this process's credential; serve on 127.0.0.1 beside the clients, or give --expose", flag, addr)
}
