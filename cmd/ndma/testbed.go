package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/testbed"
	"github.com/ndma/ndma/testbed/fidelity"
)

// testbedFlagNames maps testbed.Config fields to the flags that set them,
// so that errors from testbed.Up name the flag the user typed.
var testbedFlagNames = map[string]string{
	"Prefix":     "--prefix",
	"Hosts":      "--hosts",
	"MemNodes":   "--memnodes",
	"StorNodes":  "--stornodes",
	"Gateway":    "--gateway",
	"Rate":       "--rate",
	"HostRate":   "--host-rate",
	"Burst":      "--burst",
	"PeakRate":   "--peak-rate",
	"Latency":    "--latency",
	"MTU":        "--mtu",
	"Subnet":     "--subnet",
	"MemSize":    "--mem-size",
	"StateDir":   "--state-dir",
	"Binary":     "--binary",
	"GoMaxProcs": "--gomaxprocs",
	"Switches":   "--switches",
	"Leaves":     "--leaves",
	"UplinkRate": "--uplink-rate",
}

// testbedFlags are the flags of `ndma testbed` and its subcommands.
type testbedFlags struct {
	prefix, stateDir string

	stall, stallEvery time.Duration // run
	stallSeed         uint64
	ppn               int // run: ranks per host
	fidelityCPU       float64

	hosts, memnodes, burst, mtu     int
	stornodes                       int
	switches                        int
	leaves                          int
	gateway                         bool
	gomaxprocs                      int
	rate, hostRate, subnet, memSize string
	uplinkRate                      string
	peakRate                        string
	latency                         time.Duration
	binary                          string
	noCredentials                   bool
	priorityQueues                  bool

	json bool
}

func init() {
	var f testbedFlags
	cmd := &cobra.Command{
		Use:   "testbed",
		Short: "Build a multi-host network of namespaces on this machine, with rate-limited links (Linux, root)",
		Long: `testbed builds a network on one Linux machine out of network namespaces:
a switch namespace (<prefix>-sw) running ndma switch, N host namespaces
(<prefix>-h0 …) and K memory-node namespaces (<prefix>-m0 …) running ndma
memd, each joined to the switch namespace by a veth pair that is a port of
a bridge there, so ordinary IP traffic between hosts crosses the switch
namespace as well. Both directions of every link are limited by tbf to
--rate. "run" starts a command once per host (--ppn K: K times) with the
bootstrap environment (NDMA_RANK, NDMA_SIZE, NDMA_SWITCH, NDMA_JOB,
NDMA_TOKEN, NDMA_HOST_ID: the host's namespace, and NDMA_MTU: the largest
datagram one frame carries, the interfaces' MTU minus 28); the ranks also
read NDMA_JOIN_TIMEOUT, NDMA_LIVENESS and NDMA_HIERARCHY from the
environment "run" passes on (see ndma testbed run --help).

The testbed's addresses (--subnet, the switch at its first address) exist
only inside its namespaces: run clients such as ndma pool or ndma stat
there, with "run" or "ip netns exec <prefix>-h0 ndma ...".

It needs root and iproute2 (ip, tc). Everything it creates is named with
--prefix, and "down" removes all of it, even after a crash or without the
state file.`,
		Example: `  sudo ndma testbed up --hosts 8 --rate 100mbit --mtu 9000 --memnodes 1
  sudo ndma testbed run -- ndma bench coll --op allreduce
  sudo ndma testbed status
  sudo ndma testbed down`,
		Args: cobra.NoArgs,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.prefix, "prefix", testbed.DefaultPrefix, "name prefix of the testbed's namespaces and state (letters, digits, underscores)")
	pf.StringVar(&f.stateDir, "state-dir", testbed.DefaultStateDir(), "`directory` holding each testbed's state file, daemon logs and token")

	cmd.AddCommand(newTestbedUpCmd(&f))

	cmd.AddCommand(newTestbedRunCmd(&f))
	cmd.AddCommand(newTestbedMPIRunCmd(&f))

	cmd.AddCommand(&cobra.Command{
		Use:   "down",
		Short: "Stop the daemons and ranks and remove every namespace named with the prefix",
		Long: `down ends the daemons the state file lists and every process in a namespace
named with the prefix, deletes those namespaces (with their links) and the
state directory. It works after a crash and without the state file, and
does nothing when there is nothing to remove.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runTestbedDown(cmd, &f) },
	})

	status := &cobra.Command{
		Use:   "status",
		Short: "Show the testbed's namespaces, addresses, links and daemons",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runTestbedStatus(cmd, &f) },
	}
	status.Flags().BoolVar(&f.json, "json", false, "print the state as JSON (the state file, with liveness filled in)")
	cmd.AddCommand(status)

	rootCmd.AddCommand(cmd)
}

// newTestbedUpCmd is ndma testbed up.
func newTestbedUpCmd(f *testbedFlags) *cobra.Command {
	up := &cobra.Command{
		Use:   "up",
		Short: "Create the namespaces, links and qdiscs and start the switch and memory nodes",
		Long: `up builds the testbed and starts ndma switch in the switch namespace and ndma
memd in each memory-node namespace (from this binary, or --binary; each
lends its region to the switch's memory pool), with
--mtu minus 28 as their datagram size, so one datagram fits one frame. It
refuses when a testbed with the prefix exists. The switch address, the
token, the memory nodes' keys and the daemons' logs are in the state
directory; "status" shows them.

Every datagram of the testbed is sealed: up draws a fabric secret (the
state directory's "secret" file) and issues under it a credential per
node, each in a file of the state directory readable by root alone:
sw.cred (role switch) and m<j>.cred (memory-node), given to the daemons
with --credential; h<i>.cred (member), the NDMA_CREDENTIAL of rank i under
"run"; and client.cred (client), for tools run in a host namespace
outside "run". --no-credentials runs without them.

--switches K starts K ndma switch processes in the switch namespace (the
first on port 7471, switch i on 7471+100·i, each logging to
switch[-i].log): "run" then gives every rank NDMA_SWITCHES, and a job's
in-network collectives are sharded over them, each switch carrying one
stripe of every message. ndma bench suite reports each switch process's
CPU per MiB.

` + rateAutoHelp,
		Example: `  sudo ndma testbed up --hosts 8 --rate 100mbit --mtu 9000
  sudo ndma testbed up --hosts 8 --rate auto
  sudo ndma testbed up --hosts 4 --memnodes 2 --rate 1gbit --prefix tb2 --subnet 10.78.0.0/16
  sudo ndma testbed up --hosts 4 --switches 2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runTestbedUp(cmd, f) },
	}
	fl := up.Flags()
	fl.IntVar(&f.hosts, "hosts", testbed.DefaultHosts, fmt.Sprintf("host namespaces, one rank each (1 to %d with --memnodes)", testbed.MaxNodes))
	fl.IntVar(&f.memnodes, "memnodes", 0, "memory-node namespaces, each running ndma memd")
	fl.IntVar(&f.switches, "switches", 1, fmt.Sprintf("ndma switch processes in the switch namespace (1 to %d): above 1, the ranks of run shard their in-network collectives over them (NDMA_SWITCHES)", testbed.MaxSwitches))
	fl.IntVar(&f.leaves, "leaves", 0, fmt.Sprintf("make the fabric a leaf-spine tree: the switch namespace the spine (the root switch) and this many leaf namespaces, each with a leaf switch and an uplink to the spine (1 to %d, at most --hosts); the hosts in blocks, one per leaf, each host's ranks meeting at its leaf (default: one switch)", testbed.MaxSwitches))
	fl.StringVar(&f.uplinkRate, "uplink-rate", "", "rate of each leaf's uplink to the spine, each way, with --leaves (default: --rate, every link equal)")
	fl.IntVar(&f.stornodes, "stornodes", 0, "storage-node namespaces (s0, s1, ...), each running ndma stord with its directory in the state directory")
	fl.BoolVar(&f.gateway, "gateway", false, "a namespace (g0) running ndma storgw, the controller of ndma bench vol --mode controller (needs --stornodes)")
	fl.StringVar(&f.rate, "rate", testbed.DefaultRate, "rate of every link, each direction, in tc's syntax: 100mbit, 1gbit, 12mbps (bytes/s); auto: the highest rate at which the heaviest jobs are faithful on this machine (see above)")
	fl.Float64Var(&f.fidelityCPU, "fidelity-cpu", fidelity.DefaultMaxCPUShare, "with --rate auto: largest share of this machine's CPU the testbed may use for a job to be faithful, from 0 to 1")
	fl.StringVar(&f.hostRate, "host-rate", "", "rate of the host namespaces' links instead of --rate (e.g. a client faster than each memory node)")
	fl.IntVar(&f.gomaxprocs, "gomaxprocs", 0, "GOMAXPROCS of the testbed's daemons and ranks: 0 = automatic (1 when the switch, hosts and memory nodes outnumber this machine's CPUs), -1 = Go's default (ranks of testbed run get it unless GOMAXPROCS is set)")
	fl.IntVar(&f.burst, "burst", 0, "tbf bucket size in bytes, at least one frame (default: the larger of two frames and 1 ms at --rate)")
	fl.StringVar(&f.peakRate, "peak-rate", "", "fastest rate at which frames leave a link back to back (tbf peakrate, one-frame peak bucket), above --rate; none: --burst bytes leave at once after an idle gap (default: twice each link's rate, up to 10gbit)")
	fl.DurationVar(&f.latency, "latency", testbed.DefaultLatency, "longest a packet may wait in a link's queue before tbf drops it (1ms to 10s)")
	fl.IntVar(&f.mtu, "mtu", testbed.DefaultMTU, fmt.Sprintf("MTU of every interface, in bytes (%d to %d)", testbed.MinMTU, testbed.MaxMTU))
	fl.StringVar(&f.subnet, "subnet", testbed.DefaultSubnet, "private IPv4 subnet for the testbed's addresses; it exists only inside its namespaces")
	fl.StringVar(&f.memSize, "mem-size", "64MiB", "size of each memory node's region: bytes, or with a unit KiB, MiB, GiB, KB, MB, GB")
	fl.StringVar(&f.binary, "binary", "", "`path` of the ndma binary that runs the daemons (default: this one)")
	fl.BoolVar(&f.priorityQueues, "priority-queues", false, "three strict-priority bands per link queue (pfifo_fast under the tbf): the ACKs and other control datagrams NDMA marks (IP TOS low-delay) leave ahead of queued data; the queue then counts packets, as many per band as the tbf queue holds full frames")
	fl.BoolVar(&f.noCredentials, "no-credentials", false, "issue no credentials: the switch, the memory nodes and the ranks run without the security layer (datagrams not sealed; the token still authenticates control messages), to compare figures")
	return up
}

// newTestbedRunCmd is ndma testbed run.
func newTestbedRunCmd(f *testbedFlags) *cobra.Command {
	run := &cobra.Command{
		Use:   "run [flags] -- CMD [ARG...]",
		Short: "Run a command once per host namespace, with the rank environment, output prefixed by rank",
		Long: `run starts CMD once in each host namespace, rank i in <prefix>-h<i>, with
NDMA_RANK, NDMA_SIZE, NDMA_SWITCH (and NDMA_SWITCHES, every switch, after
up --switches), NDMA_TOKEN, NDMA_MTU (the largest
datagram one frame carries: MTU minus 28, what the daemons use; ndma bench
coll and ndma bench pool take it as their default --mtu), NDMA_CREDENTIAL
(the file of host i's member credential, which bench coll's ranks, the
pool commands, stat and bench pool seal their datagrams under; none with
up --no-credentials), NDMA_HOST_ID (the host's namespace) and a fresh
NDMA_JOB added to the environment, and prints each rank's output prefixed
"[rank i] ". The rest of the environment passes through, such as
NDMA_JOIN_TIMEOUT (how long the ranks' rendezvous waits for all of them,
1m by default), NDMA_LIVENESS (how long a host algorithm waits for a
silent rank, e.g. 90s; "off": no bound) and NDMA_HIERARCHY. It
waits for every rank and fails, naming them, if any exits non-zero. SIGINT
or SIGTERM stops every rank.

--ppn K runs K ranks in each host namespace (rank i in <prefix>-h<i/K>,
NDMA_SIZE K times the hosts), as a cluster with several ranks per host:
the ranks of one host share its link and, unless NDMA_HIERARCHY=off, its
memory (NDMA_HOST_ID tells them apart from the other hosts', though every
namespace sees this machine's /dev/shm).

--stall D --stall-every P freezes one rank drawn at random for D once
every P (SIGSTOP and SIGCONT to its process group), as a host that does
not schedule a process for a while: a busy machine, or a hypervisor
taking a virtual CPU. It makes that disturbance reproducible for
comparing builds.

` + fidelityHelp + `
After the job, run prints the verdict and its evidence on standard error.`,
		Example: `  sudo ndma testbed run -- sh -c 'echo $NDMA_RANK of $NDMA_SIZE via $NDMA_SWITCH'
  sudo ndma testbed run -- ndma bench coll --op bcast
  sudo NDMA_JOIN_TIMEOUT=2m ndma testbed run -- ndma bench coll --op allreduce
  sudo ndma testbed run --ppn 4 -- ndma bench coll --op allreduce
  sudo ndma testbed run --stall 4ms --stall-every 30ms -- ndma bench coll --op bcast --algo innet --sizes 16M`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return errors.New("run needs a command: ndma testbed run [--prefix P] -- CMD [ARG...]")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return runTestbedRun(cmd, f, args) },
	}
	run.Flags().DurationVar(&f.stall, "stall", 0, "freeze one rank drawn at random for this long once every --stall-every (e.g. 4ms); 0: never")
	run.Flags().DurationVar(&f.stallEvery, "stall-every", 0, "period of --stall, longer than the stall (e.g. 30ms)")
	run.Flags().IntVar(&f.ppn, "ppn", 1, fmt.Sprintf("ranks in each host namespace, 1 to %d", testbed.MaxPerHost))
	run.Flags().Uint64Var(&f.stallSeed, "stall-seed", 0, "seed of the ranks --stall draws (0: a random one)")
	run.Flags().Float64Var(&f.fidelityCPU, "fidelity-cpu", fidelity.DefaultMaxCPUShare, "largest share of this machine's CPU the testbed may use for the job to be faithful, from 0 to 1 (see above)")
	return run
}

// signalContext is the command's context, ended by SIGINT or SIGTERM.
func signalContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	return signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
}

// config turns the flags of `testbed up` into a testbed.Config.
func (f *testbedFlags) config() (testbed.Config, error) {
	// Zero selects a default in testbed.Config; on the command line it is
	// a mistake, not a request for the default.
	if f.hosts <= 0 {
		return testbed.Config{}, fmt.Errorf("--hosts: %d: want 1 to %d", f.hosts, testbed.MaxNodes)
	}
	if f.stornodes < 0 {
		return testbed.Config{}, fmt.Errorf("--stornodes: %d: want 0 or more", f.stornodes)
	}
	if f.memnodes < 0 {
		return testbed.Config{}, fmt.Errorf("--memnodes: %d: want 0 or more", f.memnodes)
	}
	if f.burst < 0 {
		return testbed.Config{}, fmt.Errorf("--burst: %d bytes: must not be negative", f.burst)
	}
	if f.latency <= 0 {
		return testbed.Config{}, fmt.Errorf("--latency: %v: must be positive", f.latency)
	}
	if f.mtu <= 0 {
		return testbed.Config{}, fmt.Errorf("--mtu: %d bytes: want %d to %d", f.mtu, testbed.MinMTU, testbed.MaxMTU)
	}
	if f.stateDir == "" {
		return testbed.Config{}, errors.New("--state-dir: empty")
	}
	size, err := memnode.ParseSize(f.memSize)
	if err != nil {
		return testbed.Config{}, fmt.Errorf("--mem-size: %w", err)
	}
	if size <= 0 {
		return testbed.Config{}, fmt.Errorf("--mem-size: %q: a region needs at least 1 byte", f.memSize)
	}
	return testbed.Config{
		Prefix:     f.prefix,
		Hosts:      f.hosts,
		MemNodes:   f.memnodes,
		StorNodes:  f.stornodes,
		Switches:   f.switches,
		Leaves:     f.leaves,
		Gateway:    f.gateway,
		Rate:       f.rate,
		HostRate:   f.hostRate,
		UplinkRate: f.uplinkRate,
		Burst:      f.burst,
		PeakRate:   f.peakRate,
		Latency:    f.latency,
		MTU:        f.mtu,
		Subnet:     f.subnet,
		MemSize:    size,
		StateDir:   f.stateDir,
		Binary:     f.binary,
		GoMaxProcs: f.gomaxprocs,

		NoCredentials:  f.noCredentials,
		PriorityQueues: f.priorityQueues,
	}, nil
}

// flagError rewrites a *testbed.FieldError to name the flag instead of
// the Config field.
func flagError(err error) error { return fieldFlagError(err, testbedFlagNames) }

func runTestbedUp(cmd *cobra.Command, f *testbedFlags) error {
	cfg, err := f.config()
	if err != nil {
		return err
	}
	ctx, stop := signalContext(cmd)
	defer stop()
	if isRateAuto(cfg.Rate) {
		rule, err := fidelityRule(f.fidelityCPU)
		if err != nil {
			return err
		}
		if cfg, err = chooseRate(ctx, cfg, rule, false, cmd.ErrOrStderr()); err != nil {
			return flagError(err)
		}
	}
	st, err := testbed.Up(ctx, cfg)
	if err != nil {
		return flagError(err)
	}
	printTestbed(cmd.OutOrStdout(), st)
	return nil
}

func runTestbedRun(cmd *cobra.Command, f *testbedFlags, args []string) error {
	if f.ppn < 1 || f.ppn > testbed.MaxPerHost {
		return flagError(fmt.Errorf("--ppn %d: want 1 to %d ranks per host", f.ppn, testbed.MaxPerHost))
	}
	rule, err := fidelityRule(f.fidelityCPU)
	if err != nil {
		return err
	}
	st, err := testbed.StatusAt(f.stateDir, f.prefix)
	if err != nil {
		return flagError(err)
	}
	if len(st.Hosts) == 0 {
		return fmt.Errorf("testbed %q has no state file, only namespaces left by a crash (%v): run `ndma testbed down --prefix %s` and `up` again", f.prefix, st.Stray, f.prefix)
	}
	if why, apart := st.SchedulingApart(); apart {
		fmt.Fprintf(cmd.ErrOrStderr(), "ndma testbed run: warning: %s: with the kernel's autogroup scheduling the daemons get a CPU share of their own "+
			"and the switch wakes for every packet (a third more CPU, slower in-network collectives); for comparable figures run `testbed up` and "+
			"`testbed run` from one shell (sudo -s), or use `ndma bench suite`\n", why)
	}
	opts := testbed.RunOptions{Stall: f.stall, StallEvery: f.stallEvery, Seed: f.stallSeed, PerHost: f.ppn}
	if f.stallEvery != 0 && f.stall == 0 {
		return flagError(errors.New("--stall-every needs --stall"))
	}
	if err := opts.Validate(); err != nil {
		return flagError(err)
	}
	var stalls atomic.Int64
	if f.stall > 0 {
		opts.OnStall = func(int) { stalls.Add(1) }
	}
	ctx, stop := signalContext(cmd)
	defer stop()
	stderr := cmd.ErrOrStderr()
	// The monitor watches the job; a testbed it cannot watch (its state
	// without a switch daemon, its namespaces gone) still runs the
	// command, without a verdict. A daemon killed is a verdict:
	// daemon-missing, or counted with its new process if started again.
	var mon *fidelity.Monitor
	target, err := fidelity.TargetOf(st)
	if err == nil {
		mon, err = fidelity.Start(ctx, target, 0)
	}
	if err != nil {
		fmt.Fprintf(stderr, "ndma testbed run: warning: no fidelity verdict: %v\n", err)
	}
	err = testbed.RunWith(ctx, st, args, cmd.OutOrStdout(), opts)
	if f.stall > 0 {
		fmt.Fprintf(stderr, "ndma testbed run: froze a rank %d times for %v\n", stalls.Load(), f.stall)
	}
	if mon != nil {
		printVerdict(stderr, "ndma testbed run", mon, rule)
	}
	return err
}

// fidelityHelp describes the fidelity monitor, for the help of the
// commands that run it.
const fidelityHelp = `A fidelity monitor watches the job: from /proc, the CPU time of every
process of the testbed (the job's processes, the switch, memory and
storage node daemons), the kernel's softirq time (the links' packet work)
and the time stolen by the hypervisor, against the CPU the machine had over
the job; the largest run queue; and every link's bytes (the switch ports'
counters) and tbf statistics. The job is faithful when the testbed used at
most --fidelity-cpu of the machine's CPU and, for a bulk job (its
bottleneck link's bytes take at least 0.5 s at the link's rate), that link
was busy at least 90% of its transfer (the sampling intervals, 50 ms, in
which it carried at least 5% of its rate); cpu-bound above the CPU share,
link-idle when the bottleneck idled within it. A daemon killed during the
job and started again in its namespace with its own command line counts
with both its processes (the reason says so); one with no process at the
end makes the job daemon-missing, whatever its CPU and links show.
`

// fidelityRule is the rule of --fidelity-cpu share.
func fidelityRule(share float64) (fidelity.Rule, error) {
	if share <= 0 || share > 1 {
		return fidelity.Rule{}, fmt.Errorf("--fidelity-cpu: %v: want a share of the machine above 0, at most 1", share)
	}
	return fidelity.Rule{MaxCPUShare: share}, nil
}

// printVerdict stops mon, judges the job by rule and prints the verdict
// and its evidence to w, each line starting with who.
func printVerdict(w io.Writer, who string, mon *fidelity.Monitor, rule fidelity.Rule) {
	rec, err := mon.Stop(context.Background())
	if err != nil {
		fmt.Fprintf(w, "%s: no fidelity verdict: %v\n", who, err)
		return
	}
	v, err := rec.Judge(rule)
	if err != nil {
		fmt.Fprintf(w, "%s: no fidelity verdict: %v\n", who, err)
		return
	}
	fmt.Fprintf(w, "%s: fidelity: %s: %s\n%s: %s\n", who, v.Class, v.Reason, who, v.Details())
}

func runTestbedDown(cmd *cobra.Command, f *testbedFlags) error {
	ctx, stop := signalContext(cmd)
	defer stop()
	return testbed.DownAt(ctx, f.stateDir, f.prefix)
}

func runTestbedStatus(cmd *cobra.Command, f *testbedFlags) error {
	st, err := testbed.StatusAt(f.stateDir, f.prefix)
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if f.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	printTestbed(w, st)
	return nil
}

// peakText describes a link's peak rate for printTestbed.
func peakText(bits uint64) string {
	if bits == 0 {
		return "no peak rate"
	}
	return "peak " + testbed.FormatRate(bits)
}

// printTestbed writes a testbed's state as tables: the links, the
// namespaces with their addresses, the daemons and whether they run.
func printTestbed(w io.Writer, st *testbed.State) {
	if len(st.Hosts) == 0 && st.Switch.NS == "" {
		fmt.Fprintf(w, "testbed %s: no state file in %s; namespaces left behind: %v\n", st.Prefix, st.Dir, st.Stray)
		fmt.Fprintf(w, "remove them with: ndma testbed down --prefix %s\n", st.Prefix)
		return
	}
	fmt.Fprintf(w, "testbed %s  (state %s, created %s)\n", st.Prefix, st.Dir, st.Created.Format(time.RFC3339))
	fmt.Fprintf(w, "links    %s each way (tbf burst %d B, %s, latency %v), MTU %d (datagrams up to %d B), subnet %s\n",
		st.Rate, st.Burst, peakText(st.PeakRateBits), st.Latency, st.MTU, st.DatagramMTU, st.Subnet)
	if st.QueuePackets > 0 {
		fmt.Fprintf(w, "queues   three priority bands of %d packets per link (pfifo_fast): IP TOS low-delay (NDMA's ACKs) first\n", st.QueuePackets)
		if st.HostQueuePackets > 0 {
			fmt.Fprintf(w, "         host links: %d packets per band\n", st.HostQueuePackets)
		}
	}
	if st.HostRate != "" {
		fmt.Fprintf(w, "hosts    %s each way (tbf burst %d B, %s)\n", st.HostRate, st.HostBurst, peakText(st.HostPeakRateBits))
	}
	if st.GoMaxProcs > 0 {
		fmt.Fprintf(w, "procs    GOMAXPROCS=%d for the daemons and the ranks of testbed run\n", st.GoMaxProcs)
	}
	fmt.Fprintf(w, "switch   %s  (NDMA_SWITCH)\n", st.SwitchAddr)
	if len(st.SwitchAddrs) > 1 {
		fmt.Fprintf(w, "switches %s  (NDMA_SWITCHES: in-network collectives sharded over %d switch processes)\n", strings.Join(st.SwitchAddrs, ","), len(st.SwitchAddrs))
	}
	if len(st.LeafAddrs) > 0 {
		fmt.Fprintf(w, "leaves   %s  (a tree: the switch above is the root; each host's ranks meet at its leaf, below)\n", strings.Join(st.LeafAddrs, ","))
		fmt.Fprintf(w, "uplinks  %s each way between each leaf and the spine (tbf burst %d B, %s)\n", st.UplinkRate, st.UplinkBurst, peakText(st.UplinkPeakRateBits))
	}
	if st.Secret != "" {
		fmt.Fprintf(w, "sealed   every datagram: credentials <node>.cred under the secret %s (each rank of testbed run: one of its own, JOB/RANK, as NDMA_CREDENTIAL; other tools: --credential %s)\n", st.Secret, st.ClientCredential)
	} else {
		fmt.Fprintf(w, "sealed   no: the testbed runs without credentials (up --no-credentials)\n")
	}
	fmt.Fprintln(w)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tNAMESPACE\tADDRESS\tIFACE\tSERVICE\tPRESENT")
	row := func(n testbed.Node) {
		svc := dash(n.Service)
		if n.Leaf != "" {
			svc = "leaf " + n.Leaf // a host's switch in a tree
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\t%s\n", n.Name, n.NS, n.Addr, n.Iface, svc, yesNo(n.Present))
	}
	row(st.Switch)
	for _, n := range st.Leaves {
		row(n)
	}
	for _, n := range st.Hosts {
		row(n)
	}
	for _, n := range st.MemNodes {
		row(n)
	}
	for _, n := range st.StorNodes {
		row(n)
	}
	for _, n := range st.Gateways {
		row(n)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "DAEMON\tNAMESPACE\tPID\tALIVE\tLOG")
	for _, d := range st.Daemons {
		alive := yesNo(d.Alive)
		if d.Restarted {
			alive = "yes (started again)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", d.Role, d.NS, d.PID, alive, d.Log)
	}
	tw.Flush()
	if len(st.Stray) > 0 {
		fmt.Fprintf(w, "\nnamespaces not in the state (remove them with `ndma testbed down --prefix %s`): %v\n", st.Prefix, st.Stray)
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
