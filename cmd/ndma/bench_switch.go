package main

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ndma/ndma/bench"
	"github.com/ndma/ndma/netio"
)

func newBenchSwitchCmd() *cobra.Command {
	var (
		size, cores, tests string
		members, window    int
		mtu                int
		duration           time.Duration
		jsonOut, quiet     bool
	)
	cmd := &cobra.Command{
		Use:   "switch",
		Short: "The switch alone: reduced and replicated bytes per second per core, against a raw UDP loop and memcpy",
		Long: `Measures one switch process (this binary's switch, started with
GOMAXPROCS and --readers set to each of --cores) fed over loopback by
--members group members in this process:

  reduce     every member Allreduces --size bytes of float32 (sum), --window
             in flight; the bytes are the contributions the switch reduced
  replicate  member 0 multicasts --size bytes to the others; the bytes are
             the replicas the switch sent

Rates are per wall second and per CPU-second of the switch process (its
user+system time, read from /proc), so that the members' share of a shared
machine does not count against it. In the same run, the machine's limits:
a raw UDP loop (ndma bench udp-loop: one goroutine that reads datagram
batches and sends each on, grouped by receiver, with the same batching and
offloads as the switch) carrying the same traffic shape — for reduce,
--members senders to --members receivers in turn; for replicate, one sender
to each of --members-1 receivers — and
a memcpy between buffers larger than the caches. "vs UDP loop" is the
switch's rate per core over the loop's; "vs 1 core" its rate over its own
with one core.

  ndma bench switch --cores 1,2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := bench.SwitchConfig{Members: members, Window: window, Duration: duration, MTU: mtu}
			var err error
			if cfg.Size, err = bench.ParseSize(size); err != nil {
				return fmt.Errorf("--size: %w", err)
			}
			for _, c := range strings.Split(cores, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(c))
				if err != nil || n < 1 {
					return fmt.Errorf("--cores %q: want a comma-separated list of positive counts", cores)
				}
				cfg.Cores = append(cfg.Cores, n)
			}
			if tests != "all" {
				cfg.Tests = strings.Split(tests, ",")
			}
			if cfg.Binary, err = os.Executable(); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			var table *bench.SwitchTable
			var emit func(bench.SwitchResult) error
			if jsonOut {
				emit = bench.SwitchJSON(out)
			} else {
				table = bench.NewSwitchTable(out)
				emit = table.Write
			}
			p := newProgress(cmd.ErrOrStderr(), quiet || jsonOut)
			cfg.Progress = p.callback()
			err = bench.RunSwitch(cmdContext(cmd), cfg, emit)
			p.finish()
			if err != nil {
				return err
			}
			if table != nil {
				return table.Flush()
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&members, "members", 8, "group members feeding the switch")
	fl.StringVar(&size, "size", "1MiB", "bytes per Allreduce contribution and per multicast message")
	fl.IntVar(&window, "window", 4, "operations each member keeps in flight")
	fl.DurationVar(&duration, "duration", 2*time.Second, "measured time of each point")
	fl.StringVar(&cores, "cores", "1", "comma-separated GOMAXPROCS values (and reader sockets) to run the switch with, one point each")
	fl.StringVar(&tests, "tests", "all", "reduce, replicate, or all")
	fl.IntVar(&mtu, "mtu", 9000, "datagram size of the switch, the members and the UDP loop")
	fl.BoolVar(&jsonOut, "json", false, "print JSON Lines, one object per row")
	fl.BoolVar(&quiet, "quiet", false, "no progress bar")
	return cmd
}

// newBenchUDPLoopCmd is the raw loop the switch benchmark runs as its
// baseline process.
func newBenchUDPLoopCmd() *cobra.Command {
	var (
		listen, to string
		all        bool
	)
	cmd := &cobra.Command{
		Use:    "udp-loop",
		Short:  "Read UDP datagram batches and send each datagram on to the --to addresses in turn, or to each with --all (the switch benchmark's baseline)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var dsts []netip.AddrPort
			for _, s := range strings.Split(to, ",") {
				a, err := netip.ParseAddrPort(strings.TrimSpace(s))
				if err != nil {
					return fmt.Errorf("--to %q: %w", s, err)
				}
				dsts = append(dsts, a)
			}
			conn, err := netio.ListenUDP(listen, netio.UDPConfig{})
			if err != nil {
				return err
			}
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
			defer signal.Stop(sig)
			go func() {
				<-sig
				conn.Close()
			}()
			err = bench.UDPLoop(conn, dsts, all)
			conn.Close()
			if errors.Is(err, netio.ErrClosed) {
				return nil
			}
			return err
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:0", "UDP `address` to read from")
	cmd.Flags().StringVar(&to, "to", "", "comma-separated `addresses` to send the datagrams to, one after the other")
	cmd.Flags().BoolVar(&all, "all", false, "send every datagram to every --to address")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

func init() {
	benchCmd.AddCommand(newBenchSwitchCmd())
	benchCmd.AddCommand(newBenchUDPLoopCmd())
}
