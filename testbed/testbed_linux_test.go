package testbed

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ndma/ndma/secure"
)

// helperArg, as the test binary's first argument, makes it a rank program
// for Run instead of a test run (see helperMain).
const helperArg = "testbed-helper"

// ndmaBin is the ndma binary the tests start daemons with, built once.
var ndmaBin struct {
	once      sync.Once
	dir, path string
	err       error
}

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == helperArg {
		os.Exit(helperMain(os.Args[2:]))
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) {
		if ndmaBin.dir != "" {
			os.RemoveAll(ndmaBin.dir)
		}
	}))
}

// ndmaBinary builds ./cmd/ndma once for all tests and returns its path.
func ndmaBinary(t *testing.T) string {
	t.Helper()
	ndmaBin.once.Do(func() {
		dir, err := os.MkdirTemp("", "ndma-testbed-bin")
		if err != nil {
			ndmaBin.err = err
			return
		}
		ndmaBin.dir, ndmaBin.path = dir, filepath.Join(dir, "ndma")
		out, err := exec.Command("go", "build", "-o", ndmaBin.path, "github.com/ndma/ndma/cmd/ndma").CombinedOutput()
		if err != nil {
			ndmaBin.err = fmt.Errorf("go build ./cmd/ndma: %v\n%s", err, out)
		}
	})
	if ndmaBin.err != nil {
		t.Fatal(ndmaBin.err)
	}
	return ndmaBin.path
}

// requireTestbed skips the test, with the precise reason, where a testbed
// cannot be built.
func requireTestbed(t *testing.T) {
	t.Helper()
	err := Check(t.Context(), "ndmat")
	for _, reason := range []error{ErrUnsupported, ErrNotRoot, ErrNoIproute2, ErrNoNetns} {
		if errors.Is(err, reason) {
			t.Skip(err)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}

// upTestbed builds a testbed with a prefix unique to this run, its state
// in a temporary directory, and removes it when the test ends.
func upTestbed(t *testing.T, cfg Config) *State {
	t.Helper()
	requireTestbed(t)
	cfg.Prefix = "ndmat" + randomHex(2)
	cfg.StateDir = t.TempDir()
	cfg.Binary = ndmaBinary(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := DownAt(ctx, cfg.StateDir, cfg.Prefix); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err := Up(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestUpRunDown(t *testing.T) {
	st := upTestbed(t, Config{Hosts: 3, MemNodes: 1, Rate: "100mbit", HostRate: "200mbit"})
	root := filepath.Dir(st.Dir)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	t.Run("namespaces", func(t *testing.T) {
		names, err := listNamespaces(ctx, st.Prefix)
		if err != nil {
			t.Fatal(err)
		}
		want := slices.Sorted(slices.Values(st.Namespaces()))
		if !slices.Equal(names, want) {
			t.Errorf("namespaces %v, want %v", names, want)
		}
		got, err := StatusAt(root, st.Prefix)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range append([]Node{got.Switch}, append(got.Hosts, got.MemNodes...)...) {
			if !n.Present {
				t.Errorf("status: %s not present", n.NS)
			}
		}
		if len(got.Daemons) != 2 {
			t.Fatalf("status: daemons %+v, want the switch and one memd", got.Daemons)
		}
		for _, d := range got.Daemons {
			if !d.Alive {
				t.Errorf("status: %s in %s (pid %d) not alive", d.Role, d.NS, d.PID)
			}
			// The daemons run with the testbed's GOMAXPROCS, if it set one.
			env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", d.PID))
			if err != nil {
				t.Fatal(err)
			}
			want := "GOMAXPROCS=" + strconv.Itoa(st.GoMaxProcs)
			if has := slices.Contains(strings.Split(string(env), "\x00"), want); has != (st.GoMaxProcs > 0) {
				t.Errorf("%s: %s in its environment: %v, want %v", d.Role, want, has, st.GoMaxProcs > 0)
			}
		}
		if len(got.Stray) != 0 {
			t.Errorf("status: stray namespaces %v", got.Stray)
		}
		if got.Token == "" || got.Token != st.Token || got.SwitchAddr != st.Switch.Addr.String()+":7471" {
			t.Errorf("status: switch %q token %q; Up said %q %q", got.SwitchAddr, got.Token, st.SwitchAddr, st.Token)
		}
	})

	t.Run("links", func(t *testing.T) {
		type link struct {
			Name   string `json:"ifname"`
			MTU    int    `json:"mtu"`
			Master string `json:"master"`
			State  string `json:"operstate"`
		}
		show := func(ns, dev string) link {
			t.Helper()
			var l []link
			out, err := command(ctx, "", "ip", "-n", ns, "-j", "link", "show", "dev", dev)
			if err == nil {
				err = json.Unmarshal([]byte(out), &l)
			}
			if err != nil || len(l) != 1 {
				t.Fatalf("%s %s: %v %v", ns, dev, l, err)
			}
			return l[0]
		}
		if br := show(st.Switch.NS, bridgeName); br.MTU != DefaultMTU || br.State != "UP" {
			t.Errorf("bridge: %+v, want MTU %d and UP", br, DefaultMTU)
		}
		for _, n := range append(slices.Clone(st.Hosts), st.MemNodes...) {
			if l := show(n.NS, nodeIface); l.MTU != DefaultMTU || l.State != "UP" {
				t.Errorf("%s %s: %+v, want MTU %d and UP", n.NS, nodeIface, l, DefaultMTU)
			}
			if l := show(st.Switch.NS, n.Port); l.MTU != DefaultMTU || l.Master != bridgeName || l.State != "UP" {
				t.Errorf("%s %s: %+v, want MTU %d, UP, a port of %s", st.Switch.NS, n.Port, l, DefaultMTU, bridgeName)
			}
		}
	})

	t.Run("tbf", func(t *testing.T) {
		check := func(ns, dev string, want uint64) {
			t.Helper()
			var q []struct {
				Kind    string `json:"kind"`
				Root    bool   `json:"root"`
				Options struct {
					Rate     uint64 `json:"rate"`     // bytes per second
					MinBurst int    `json:"minburst"` // the peak bucket, bytes
				} `json:"options"`
			}
			out, err := command(ctx, "", "tc", "-n", ns, "-j", "qdisc", "show", "dev", dev)
			if err == nil {
				err = json.Unmarshal([]byte(out), &q)
			}
			if err != nil {
				t.Fatalf("%s %s: %v", ns, dev, err)
			}
			if len(q) != 1 || q[0].Kind != "tbf" || !q[0].Root || q[0].Options.Rate*8 != want {
				t.Errorf("%s %s: qdiscs %+v, want a root tbf at %d bit/s", ns, dev, q, want)
			}
			// The default peak rate, with a peak bucket that holds a
			// whole frame after tc's rounding.
			if len(q) == 1 && q[0].Options.MinBurst < DefaultMTU+14 {
				t.Errorf("%s %s: peak bucket %d bytes, want at least a %d-byte frame", ns, dev, q[0].Options.MinBurst, DefaultMTU+14)
			}
		}
		if st.PeakRateBits != 200e6 || st.HostPeakRateBits != 400e6 || st.PeakBucket != peakBucket(DefaultMTU) {
			t.Errorf("peak rates %d, hosts %d, bucket %d; want twice each link's rate", st.PeakRateBits, st.HostPeakRateBits, st.PeakBucket)
		}
		// Hosts at --host-rate, memory nodes at --rate.
		for _, n := range st.Hosts {
			check(n.NS, nodeIface, 200e6)      // towards the switch
			check(st.Switch.NS, n.Port, 200e6) // towards the node
		}
		for _, n := range st.MemNodes {
			check(n.NS, nodeIface, 100e6)
			check(st.Switch.NS, n.Port, 100e6)
		}
	})

	t.Run("reach", func(t *testing.T) {
		// Every host reaches every other (TCP, through the bridge) and
		// the switch namespace's address.
		var out lockedBuilder
		if err := Run(ctx, st, helperCmd(t, "mesh", st), &out); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		for i := range st.Hosts {
			for j := range st.Hosts {
				if line := fmt.Sprintf("[rank %d] reached %d\n", i, j); i != j && !strings.Contains(out.String(), line) {
					t.Errorf("missing %q in:\n%s", line, out.String())
				}
			}
			if line := fmt.Sprintf("[rank %d] reached switch\n", i); !strings.Contains(out.String(), line) {
				t.Errorf("missing %q in:\n%s", line, out.String())
			}
		}
	})

	t.Run("env", func(t *testing.T) {
		var out lockedBuilder
		err := Run(ctx, st, []string{"sh", "-c", "echo $NDMA_RANK $NDMA_SIZE $NDMA_SWITCH $NDMA_TOKEN $NDMA_MTU ${GOMAXPROCS:-unset} $NDMA_JOB"}, &out)
		if err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		slices.Sort(lines)
		// The caller's GOMAXPROCS wins; else the testbed's, if it set one.
		gmp, set := os.LookupEnv("GOMAXPROCS")
		if !set || gmp == "" {
			gmp = "unset"
			if st.GoMaxProcs > 0 {
				gmp = strconv.Itoa(st.GoMaxProcs)
			}
		}
		if len(lines) != 3 {
			t.Fatalf("output:\n%s\nwant one line per rank", out.String())
		}
		var job string
		for i, line := range lines {
			prefix := fmt.Sprintf("[rank %d] %d 3 %s %s %d %s ", i, i, st.SwitchAddr, st.Token, st.DatagramMTU, gmp)
			rest, ok := strings.CutPrefix(line, prefix)
			if !ok {
				t.Errorf("line %q, want it to begin %q", line, prefix)
				continue
			}
			if i == 0 {
				job = rest
			}
			if rest != job || !strings.HasPrefix(job, st.Prefix+"-") {
				t.Errorf("rank %d: NDMA_JOB %q; rank 0's %q, want the same, beginning %s-", i, rest, job, st.Prefix)
			}
		}
	})

	t.Run("sealed", func(t *testing.T) {
		// Each rank gets a member credential of its own, issued for the
		// run and bound to the run's job and the rank (JOB/RANK), in a
		// file of mode 0600 that is gone once the run ends; the daemons
		// run with theirs and say so in their logs.
		var out lockedBuilder
		err := Run(ctx, st, []string{"sh", "-c", `printf 'cred=%s mode=%s job=%s id=%s\n' "$NDMA_CREDENTIAL" "$(stat -c %a "$NDMA_CREDENTIAL")" "$NDMA_JOB" "$(base64 -w0 < "$NDMA_CREDENTIAL")"`}, &out)
		if err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		for i := range st.Hosts {
			var path, mode, job, enc string
			prefix := fmt.Sprintf("[rank %d] ", i)
			for _, line := range strings.Split(out.String(), "\n") {
				if rest, ok := strings.CutPrefix(line, prefix); ok {
					fmt.Sscanf(rest, "cred=%s mode=%s job=%s id=%s", &path, &mode, &job, &enc)
				}
			}
			b, err := base64.StdEncoding.DecodeString(enc)
			if err != nil {
				t.Fatalf("rank %d: %v in:\n%s", i, err, out.String())
			}
			id, err := secure.ParseIdentity(b)
			if err != nil {
				t.Fatalf("rank %d: credential: %v", i, err)
			}
			if want := job + "/" + strconv.Itoa(i); id.Cert.Name != want || id.Cert.Role != secure.RoleMember || mode != "600" || filepath.Dir(path) != st.Dir {
				t.Errorf("rank %d: credential %s (mode %s) of %v %q, want a file of mode 600 in %s of a member named %q", i, path, mode, id.Cert.Role, id.Cert.Name, st.Dir, want)
			}
			if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("rank %d: credential %s after the run: %v, want it removed", i, path, err)
			}
		}
		files := []string{st.Secret, st.ClientCredential, st.Switch.Credential}
		for _, n := range append(slices.Clone(st.Hosts), st.MemNodes...) {
			files = append(files, n.Credential)
		}
		for _, f := range files {
			fi, err := os.Stat(f)
			if err != nil || fi.Mode().Perm() != 0o600 || filepath.Dir(f) != st.Dir {
				t.Errorf("%q: %v, %v; want a file of mode 0600 in %s", f, fi, err, st.Dir)
			}
		}
		for _, d := range st.Daemons {
			log, err := os.ReadFile(d.Log)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(log), "sealing every datagram") || !slices.Contains(d.Args, "--credential") {
				t.Errorf("%s (%v): log does not say it seals every datagram:\n%s", d.Role, d.Args, log)
			}
		}
	})

	t.Run("fail", func(t *testing.T) {
		var out lockedBuilder
		err := Run(ctx, st, []string{"sh", "-c", `echo out; test "$NDMA_RANK" != 1`}, &out)
		re, ok := errors.AsType[*RunError](err)
		if !ok || len(re.Ranks) != 1 || re.Ranks[0].Rank != 1 || !strings.Contains(err.Error(), "rank 1 failed") {
			t.Fatalf("Run: %v, want a RunError naming rank 1", err)
		}
		if n := strings.Count(out.String(), "] out\n"); n != 3 {
			t.Errorf("output of all ranks expected, got:\n%s", out.String())
		}
	})

	t.Run("ppn", func(t *testing.T) {
		// Two ranks in each host namespace, each told its host.
		var out lockedBuilder
		opts := RunOptions{PerHost: 2}
		if err := RunWith(ctx, st, []string{"sh", "-c", `echo "is $NDMA_RANK/$NDMA_SIZE $NDMA_HOST_ID $(ip netns identify)"`}, &out, opts); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		size := 2 * len(st.Hosts)
		for r := range size {
			ns := st.Hosts[r/2].NS
			if want := fmt.Sprintf("[rank %d] is %d/%d %s %s\n", r, r, size, ns, ns); !strings.Contains(out.String(), want) {
				t.Errorf("no %q in:\n%s", want, out.String())
			}
		}
		for _, bad := range []int{-1, MaxPerHost + 1} {
			if err := RunWith(ctx, st, []string{"true"}, nil, RunOptions{PerHost: bad}); !errors.Is(err, ErrInvalidRunOptions) {
				t.Errorf("%d ranks per host: %v, want ErrInvalidRunOptions", bad, err)
			}
		}
	})

	t.Run("cancel", func(t *testing.T) {
		rctx, rcancel := context.WithCancel(ctx)
		defer rcancel()
		// Cancels once every rank is running.
		out := &lineWaiter{want: "ready", n: len(st.Hosts), done: rcancel}
		err := Run(rctx, st, []string{"sh", "-c", "echo ready; sleep 30; echo late"}, out)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: %v, want context.Canceled", err)
		}
		if re, ok := errors.AsType[*RunError](err); !ok || len(re.Ranks) != len(st.Hosts) {
			t.Errorf("Run: %v, want every rank named", err)
		}
		for _, h := range st.Hosts {
			if pids, err := netnsPids(ctx, h.NS); err != nil || len(pids) > 0 {
				t.Errorf("%s: processes %v left (%v)", h.NS, pids, err)
			}
		}
	})

	t.Run("stall", func(t *testing.T) {
		// Each rank ticks every millisecond for 1.2 s and prints its
		// longest gap; ranks frozen for 80 ms every 150 ms see one of
		// about that length, and every rank ends (none left stopped).
		var out lockedBuilder
		var mu sync.Mutex
		stalled := map[int]int{}
		opts := RunOptions{Stall: 80 * time.Millisecond, StallEvery: 150 * time.Millisecond, Seed: 3,
			OnStall: func(r int) { mu.Lock(); stalled[r]++; mu.Unlock() }}
		if err := RunWith(ctx, st, helperCmd(t, "ticks", st), &out, opts); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		n := 0
		for r, k := range stalled {
			n += k
			var gap time.Duration
			for _, l := range strings.Split(out.String(), "\n") {
				if rest, ok := strings.CutPrefix(l, fmt.Sprintf("[rank %d] maxgap ", r)); ok {
					gap, _ = time.ParseDuration(rest)
				}
			}
			if gap < 70*time.Millisecond {
				t.Errorf("rank %d frozen %d times, its longest gap %v, want about 80ms\n%s", r, k, gap, out.String())
			}
		}
		if n < 4 {
			t.Errorf("%d stalls in 1.2 s at one per 150 ms", n)
		}
		if err := RunWith(ctx, st, []string{"true"}, nil, RunOptions{Stall: time.Second, StallEvery: time.Second}); !errors.Is(err, ErrInvalidRunOptions) {
			t.Errorf("stall as long as its period: %v, want ErrInvalidRunOptions", err)
		}
	})

	t.Run("rate", func(t *testing.T) {
		// TCP from host 1 to host 0 crosses two shaped links.
		var out lockedBuilder
		if err := Run(ctx, st, helperCmd(t, "tput", st), &out); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		var bps float64
		if _, err := fmt.Sscanf(out.String(), "[rank 0] bits_per_sec %g", &bps); err != nil {
			t.Fatalf("output %q: %v", out.String(), err)
		}
		t.Logf("TCP goodput h1→h0: %.1f Mbit/s over %s host links", bps/1e6, st.HostRate)
		// A bound that only shaping can meet: an unshaped veth carries
		// gigabits.
		if bps > 1.5*float64(st.HostRateBits) {
			t.Errorf("%.1f Mbit/s through links shaped to %s", bps/1e6, st.HostRate)
		}
	})

	t.Run("in use", func(t *testing.T) {
		_, err := Up(ctx, Config{Prefix: st.Prefix, StateDir: root, Binary: ndmaBinary(t)})
		if !errors.Is(err, ErrInUse) {
			t.Fatalf("second Up: %v, want ErrInUse", err)
		}
		got, err := StatusAt(root, st.Prefix)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range got.Daemons {
			if !d.Alive {
				t.Errorf("the refused Up ended %s in %s", d.Role, d.NS)
			}
		}
	})

	t.Run("restarted by hand", func(t *testing.T) {
		// The memory node killed, status says so; started again by hand
		// with its command line in its namespace, status finds it.
		got, err := StatusAt(root, st.Prefix)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(got.Daemons, func(d Daemon) bool { return d.Role == "memd" })
		if i < 0 {
			t.Fatalf("no memd in %+v", got.Daemons)
		}
		d := got.Daemons[i]
		p, err := os.FindProcess(d.PID)
		if err == nil {
			err = p.Kill()
		}
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(5 * time.Second); alive(d.PID, d.Start); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("memd (pid %d) still alive after SIGKILL", d.PID)
			}
		}
		if got, err = StatusAt(root, st.Prefix); err != nil || got.Daemons[i].Alive || got.Daemons[i].Restarted {
			t.Fatalf("status after the kill: %+v, %v; want not alive", got.Daemons[i], err)
		}
		again := exec.Command("ip", append([]string{"netns", "exec", d.NS}, d.Args...)...)
		if err := again.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			again.Process.Kill()
			again.Wait()
		}()
		deadline := time.Now().Add(5 * time.Second)
		for {
			got, err = StatusAt(root, st.Prefix)
			if err != nil {
				t.Fatal(err)
			}
			if g := got.Daemons[i]; g.Alive {
				if !g.Restarted || g.PID != again.Process.Pid {
					t.Errorf("status of memd started again: %+v, want pid %d and restarted", g, again.Process.Pid)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("status never found memd started again (pid %d): %+v", again.Process.Pid, got.Daemons[i])
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	t.Run("down", func(t *testing.T) {
		if err := DownAt(ctx, root, st.Prefix); err != nil {
			t.Fatal(err)
		}
		checkGone(t, st, root)
		if err := DownAt(ctx, root, st.Prefix); err != nil {
			t.Errorf("second Down: %v", err)
		}
		if _, err := StatusAt(root, st.Prefix); !errors.Is(err, ErrNotFound) {
			t.Errorf("Status after Down: %v, want ErrNotFound", err)
		}
	})
}

// checkGone fails the test if anything of st is left.
func checkGone(t *testing.T, st *State, root string) {
	t.Helper()
	if names, err := listNamespaces(t.Context(), st.Prefix); err != nil || len(names) > 0 {
		t.Errorf("namespaces left: %v (%v)", names, err)
	}
	for _, d := range st.Daemons {
		if alive(d.PID, d.Start) {
			t.Errorf("%s (pid %d) still running", d.Role, d.PID)
		}
	}
	if _, err := os.Stat(stateDir(root, st.Prefix)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("state directory left: %v", err)
	}
}

func TestDownAfterCrash(t *testing.T) {
	st := upTestbed(t, Config{Hosts: 2})
	root := filepath.Dir(st.Dir)
	// A rank left running by a killed `testbed run`, and the state file
	// lost.
	rank := exec.Command("ip", "netns", "exec", st.Hosts[0].NS, "sleep", "60")
	if err := rank.Start(); err != nil {
		t.Fatal(err)
	}
	rankDone := make(chan error, 1)
	go func() { rankDone <- rank.Wait() }()
	if err := os.RemoveAll(st.Dir); err != nil {
		t.Fatal(err)
	}

	got, err := StatusAt(root, st.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	if want := slices.Sorted(slices.Values(st.Namespaces())); !slices.Equal(got.Stray, want) {
		t.Errorf("Status without a state file: stray %v, want %v", got.Stray, want)
	}
	if _, err := Up(t.Context(), Config{Prefix: st.Prefix, StateDir: root, Binary: ndmaBinary(t)}); !errors.Is(err, ErrInUse) {
		t.Errorf("Up over the remains: %v, want ErrInUse", err)
	}

	if err := DownAt(t.Context(), root, st.Prefix); err != nil {
		t.Fatal(err)
	}
	checkGone(t, st, root)
	select {
	case err := <-rankDone:
		if ee, ok := errors.AsType[*exec.ExitError](err); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
			t.Errorf("the left rank ended with %v, want SIGTERM", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("the left rank still runs after Down")
	}
}

func TestCheckErrors(t *testing.T) {
	ctx := t.Context()
	defer func(f func() int) { geteuid = f }(geteuid)

	geteuid = func() int { return 1000 }
	for name, err := range map[string]error{
		"Check":  Check(ctx, "ndmat"),
		"DownAt": DownAt(ctx, t.TempDir(), "ndmat"),
	} {
		if !errors.Is(err, ErrNotRoot) || !strings.Contains(err.Error(), "uid 1000") {
			t.Errorf("%s as uid 1000: %v, want ErrNotRoot", name, err)
		}
	}
	if _, err := Up(ctx, Config{Prefix: "ndmat", StateDir: t.TempDir()}); !errors.Is(err, ErrNotRoot) {
		t.Errorf("Up as uid 1000: %v, want ErrNotRoot", err)
	}

	geteuid = func() int { return 0 }
	t.Setenv("PATH", t.TempDir())
	if err := Check(ctx, "ndmat"); !errors.Is(err, ErrNoIproute2) || !strings.Contains(err.Error(), "ip is not in $PATH") {
		t.Errorf("Check without ip: %v, want ErrNoIproute2", err)
	}
	if err := Check(ctx, "bad-prefix"); !errors.Is(err, ErrConfig) {
		t.Errorf("Check(bad-prefix): %v, want ErrConfig", err)
	}
}

func TestPrefixWriter(t *testing.T) {
	var mu sync.Mutex
	var out strings.Builder
	w := &prefixWriter{mu: &mu, out: &out, prefix: []byte("[rank 3] ")}
	for _, s := range []string{"a\nb", "c\n\nd"} {
		if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	w.flush()
	if got, want := out.String(), "[rank 3] a\n[rank 3] bc\n[rank 3] \n[rank 3] d\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	out.Reset()
	long := strings.Repeat("x", 100<<10)
	for chunk := range slices.Chunk([]byte(long), 4<<10) {
		w.Write(chunk)
	}
	w.flush()
	if lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n"); len(lines) != 2 ||
		strings.Join(lines, "") != "[rank 3] "+long[:64<<10]+"[rank 3] "+long[64<<10:] {
		t.Errorf("a 100 KiB line without an end: %d lines", len(lines))
	}
}

// lockedBuilder is a strings.Builder safe for concurrent writers.
type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// lineWaiter calls done once n written lines end with want.
type lineWaiter struct {
	mu   sync.Mutex
	want string
	n    int
	done func()
}

func (l *lineWaiter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if strings.HasSuffix(strings.TrimSuffix(string(p), "\n"), l.want) {
		if l.n--; l.n == 0 {
			l.done()
		}
	}
	return len(p), nil
}

// helperCmd is the command line that runs this test binary as mode's rank
// program, given the hosts' and the switch's addresses.
func helperCmd(t *testing.T, mode string, st *State) []string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := []string{exe, helperArg, mode, st.Switch.Addr.String()}
	for _, h := range st.Hosts {
		cmd = append(cmd, h.Addr.String())
	}
	return cmd
}

// Ports of the helper programs, inside the host namespaces.
const (
	meshPort = "7600"
	tputPort = "7601"
	// tputBytes is what the tput helper sends: 0.34 s at 100 Mbit/s.
	tputBytes = 4 << 20
)

// helperMain is a rank program, run by Run in each host namespace: args
// are the mode, the switch's address, and the hosts' addresses in rank
// order. It returns the exit status.
//
// "mesh": the rank listens on TCP, connects to every other rank and
// exchanges a byte, printing "reached J", and connects to a closed port of
// the switch address, printing "reached switch" when refused (the reset
// proves the path); it exits when every other rank has connected to it.
//
// "tput": rank 1 sends tputBytes over TCP to rank 0, which prints
// "bits_per_sec R", the rate from its first byte to the end.
//
// "ticks": helperTicks.
//
// "prio": rank 0 sends rank 1 a burst of data datagrams and then one
// marked Control (helperPrio); rank 1 prints where the Control one arrived.
//
// "integration": TestIntegration's rank program (integrationRank), given
// rankDeadline.
func helperMain(args []string) int {
	if len(args) < 3 {
		fmt.Fprintln(os.Stderr, "helper: want mode, switch and host addresses")
		return 2
	}
	mode, sw, hosts := args[0], args[1], args[2:]
	rank, err := strconv.Atoi(os.Getenv("NDMA_RANK"))
	if err != nil || rank < 0 || rank >= len(hosts) {
		fmt.Fprintln(os.Stderr, "helper: NDMA_RANK:", err)
		return 2
	}
	timeout := 20 * time.Second
	if mode == "integration" {
		timeout = rankDeadline
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	switch mode {
	case "mesh":
		err = helperMesh(ctx, rank, sw, hosts)
	case "tput":
		err = helperTput(ctx, rank, hosts)
	case "integration":
		err = integrationRank(ctx)
	case "prio":
		err = helperPrio(ctx, rank, hosts)
	case "ticks":
		err = helperTicks(ctx)
	default:
		err = fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	return 0
}

// helperTicks sleeps a millisecond at a time for 1.2 s and prints the
// longest gap between two ticks ("maxgap 81.2ms").
func helperTicks(ctx context.Context) error {
	var gap time.Duration
	start := time.Now()
	last := start
	for time.Since(start) < 1200*time.Millisecond && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
		now := time.Now()
		gap = max(gap, now.Sub(last))
		last = now
	}
	fmt.Printf("maxgap %v\n", gap)
	return ctx.Err()
}

// dialRetry connects to addr, retrying while it refuses (its listener may
// not be up yet) until ctx ends.
func dialRetry(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
			return c, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: %w", addr, err)
		case <-time.After(pollInterval):
		}
	}
}

func helperMesh(ctx context.Context, rank int, sw string, hosts []string) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(hosts[rank], meshPort))
	if err != nil {
		return err
	}
	defer ln.Close()
	accepted := make(chan error, len(hosts))
	go func() {
		for range len(hosts) - 1 {
			c, err := ln.Accept()
			if err != nil {
				accepted <- err
				return
			}
			b := make([]byte, 1)
			_, err = io.ReadFull(c, b)
			if err == nil {
				_, err = c.Write(b)
			}
			c.Close()
			accepted <- err
		}
	}()
	for j, h := range hosts {
		if j == rank {
			continue
		}
		c, err := dialRetry(ctx, net.JoinHostPort(h, meshPort))
		if err != nil {
			return err
		}
		b := []byte{byte(rank)}
		_, err = c.Write(b)
		if err == nil {
			_, err = io.ReadFull(c, b)
		}
		c.Close()
		if err != nil || b[0] != byte(rank) {
			return fmt.Errorf("exchange with rank %d: %v", j, err)
		}
		fmt.Println("reached", j)
	}
	var d net.Dialer
	if c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(sw, "9")); !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		return fmt.Errorf("switch %s port 9: %v, want connection refused", sw, err)
	}
	fmt.Println("reached switch")
	for range len(hosts) - 1 {
		select {
		case err := <-accepted:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func helperTput(ctx context.Context, rank int, hosts []string) error {
	addr := net.JoinHostPort(hosts[0], tputPort)
	switch rank {
	case 0:
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		defer ln.Close()
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		defer c.Close()
		r := bufio.NewReaderSize(c, 1<<20)
		if _, err := r.Peek(1); err != nil {
			return err
		}
		start := time.Now()
		n, err := io.Copy(io.Discard, r)
		if err != nil {
			return err
		}
		if n != tputBytes {
			return fmt.Errorf("received %d bytes, want %d", n, tputBytes)
		}
		fmt.Printf("bits_per_sec %g\n", float64(n)*8/time.Since(start).Seconds())
	case 1:
		c, err := dialRetry(ctx, addr)
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.Write(make([]byte, tputBytes)); err != nil {
			return err
		}
	}
	return nil
}

// TestSchedulingApart: a daemon in this session shares its autogroup; one
// started in a session of its own (setsid) does not, when the kernel
// groups by session.
func TestSchedulingApart(t *testing.T) {
	self := &State{Daemons: []Daemon{{Role: "switch", PID: os.Getpid(), Start: processStart(os.Getpid())}}}
	if why, apart := self.SchedulingApart(); apart {
		t.Errorf("this process as the daemon: apart (%s)", why)
	}
	if b, err := os.ReadFile(autogroupEnabled); err != nil || strings.TrimSpace(string(b)) != "1" {
		t.Skipf("autogroup scheduling is off here (%s: %q, %v)", autogroupEnabled, b, err)
	}
	c := exec.Command("sleep", "30")
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { c.Process.Kill(); c.Wait() }()
	other := &State{Daemons: []Daemon{{Role: "switch", PID: c.Process.Pid, Start: processStart(c.Process.Pid)}}}
	why, apart := other.SchedulingApart()
	// Some kernels and containers give a new session no group of its own
	// (an empty /proc/PID/autogroup: the default group, as for pid 1) or
	// show another PID namespace's /proc: there the child is not apart.
	mine, child := autogroupOf("self"), autogroupOf(strconv.Itoa(c.Process.Pid))
	if mine == "" || child == "" || child == mine || !alive(c.Process.Pid, other.Daemons[0].Start) {
		if apart {
			t.Errorf("a child whose autogroup reads %q (this process %q): apart (%s)", child, mine, why)
		}
		t.Skipf("this kernel gives a setsid child no autogroup of its own to compare (this process %q, child %q)", mine, child)
	}
	if !apart || !strings.Contains(why, fmt.Sprintf("switch daemon (pid %d) runs in scheduling group /autogroup-", c.Process.Pid)) {
		t.Errorf("a daemon in its own session: %q, %v; want apart, naming its group", why, apart)
	}
	c.Process.Kill()
	c.Wait()
	if why, apart := other.SchedulingApart(); apart {
		t.Errorf("a daemon no longer running: apart (%s)", why)
	}
}

// TestUpSwitches: with Switches 2 the switch namespace runs two switch
// processes, Run gives the ranks NDMA_SWITCHES naming both, and a job's
// in-network Allreduce runs sharded over them.
func TestUpSwitches(t *testing.T) {
	st := upTestbed(t, Config{Hosts: 2, Switches: 2})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	want := []string{st.Switch.Addr.String() + ":7471", st.Switch.Addr.String() + ":7571"}
	if !slices.Equal(st.SwitchAddrs, want) || st.SwitchAddr != want[0] {
		t.Fatalf("switches %v (first %s), want %v", st.SwitchAddrs, st.SwitchAddr, want)
	}
	alive := 0
	for _, d := range st.Daemons {
		if d.Role == "switch" && d.Alive {
			alive++
		}
	}
	if alive != 2 {
		t.Fatalf("daemons %+v, want two switch processes alive", st.Daemons)
	}
	var out lockedBuilder
	if err := Run(ctx, st, []string{"sh", "-c", "echo $NDMA_SWITCHES"}, &out); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(out.String(), strings.Join(want, ",")); got != 2 {
		t.Fatalf("NDMA_SWITCHES of the ranks:\n%s\nwant %s for both", out.String(), strings.Join(want, ","))
	}
	var bench lockedBuilder
	if err := Run(ctx, st, []string{ndmaBinary(t), "bench", "coll", "--op", "allreduce", "--algo", "innet", "--sizes", "64K", "--iters", "2"}, &bench); err != nil {
		t.Fatalf("%v\n%s", err, bench.String())
	}
	if !strings.Contains(bench.String(), "in-network calls over 2 switches") {
		t.Fatalf("bench coll did not run over both switches:\n%s", bench.String())
	}
}

// TestUpLeaves brings a testbed up whose switch is a tree of a root and
// two leaves over four hosts: the root and both leaves run, each host's
// ranks get their leaf as NDMA_SWITCH, and an in-network Allreduce and
// Bcast across the tree complete on all four ranks.
func TestUpLeaves(t *testing.T) {
	// After Down (upTestbed's cleanup, which runs before this one), no
	// namespace of the testbed is left, the leaves' included.
	var prefix string
	t.Cleanup(func() {
		out, err := command(context.Background(), "", "ip", "netns", "list")
		if err != nil || prefix == "" {
			return
		}
		for line := range strings.Lines(out) {
			if strings.HasPrefix(line, prefix+"-") {
				t.Errorf("left after Down: %s", strings.TrimSpace(line))
			}
		}
	})
	st := upTestbed(t, Config{Hosts: 4, Leaves: 2, UplinkRate: "50mbit"})
	prefix = st.Prefix
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	if len(st.Leaves) != 2 {
		t.Fatalf("leaves %+v, want two", st.Leaves)
	}
	var leaves []string
	for i, l := range st.Leaves {
		if want := nsName(st.Prefix, fmt.Sprintf("l%d", i)); l.NS != want || !l.Present || l.Addr == st.Switch.Addr {
			t.Fatalf("leaf %d: %+v, want namespace %s, present, an address of its own", i, l, want)
		}
		leaves = append(leaves, netip.AddrPortFrom(l.Addr, SwitchPort).String())
	}
	if !slices.Equal(st.LeafAddrs, leaves) {
		t.Fatalf("leaf addresses %v, want %v", st.LeafAddrs, leaves)
	}
	for i, h := range st.Hosts {
		if want := leaves[i/2]; h.Leaf != want || h.PortNS != st.Leaves[i/2].NS {
			t.Fatalf("host %d's leaf %q in %q, want %q in %q", i, h.Leaf, h.PortNS, want, st.Leaves[i/2].NS)
		}
		// The host's port is on its leaf's bridge.
		out, err := command(ctx, "", "ip", "-n", h.PortNS, "-o", "link", "show", "dev", h.Port)
		if err != nil || !strings.Contains(out, "master "+bridgeName) {
			t.Fatalf("host %d's port in %s: %q, %v", i, h.PortNS, out, err)
		}
	}
	// Each uplink shaped at UplinkRate both ways, the hosts' links at Rate.
	rate := func(ns, dev string) string {
		out, err := command(ctx, "", "tc", "-n", ns, "qdisc", "show", "dev", dev)
		if err != nil {
			t.Fatalf("%s %s: %v", ns, dev, err)
		}
		return out
	}
	for _, l := range st.Leaves {
		for _, q := range []string{rate(st.Switch.NS, l.Port), rate(l.NS, UplinkIface)} {
			if !strings.Contains(q, "tbf") || !strings.Contains(q, "rate 50Mbit") {
				t.Errorf("uplink of %s: %q, want a tbf at 50Mbit", l.Name, q)
			}
		}
	}
	if q := rate(st.Hosts[0].PortNS, st.Hosts[0].Port); !strings.Contains(q, "rate 100Mbit") {
		t.Errorf("host 0's link at its leaf: %q, want a tbf at 100Mbit", q)
	}
	alive := 0
	for _, d := range st.Daemons {
		if d.Role == "switch" && d.Alive {
			alive++
		}
	}
	if alive != 3 {
		t.Fatalf("daemons %+v, want three switch processes alive", st.Daemons)
	}
	for i, l := range st.Leaves {
		if !slices.ContainsFunc(st.Daemons, func(d Daemon) bool { return d.Role == "switch" && d.NS == l.NS }) {
			t.Fatalf("no switch daemon in leaf %d's namespace: %+v", i, st.Daemons)
		}
	}
	// Hosts under different leaves reach each other through the spine.
	var mesh lockedBuilder
	if err := Run(ctx, st, helperCmd(t, "mesh", st), &mesh); err != nil {
		t.Fatalf("%v\n%s", err, mesh.String())
	}
	var out lockedBuilder
	if err := Run(ctx, st, []string{"sh", "-c", "echo switch=$NDMA_SWITCH"}, &out); err != nil {
		t.Fatal(err)
	}
	for _, l := range leaves {
		if got := strings.Count(out.String(), "switch="+l); got != 2 {
			t.Fatalf("NDMA_SWITCH of the ranks:\n%s\nwant %s for two", out.String(), l)
		}
	}
	for _, op := range []string{"allreduce", "bcast"} {
		var bench lockedBuilder
		if err := Run(ctx, st, []string{ndmaBinary(t), "bench", "coll", "--op", op, "--algo", "innet", "--sizes", "64K", "--iters", "2"}, &bench); err != nil {
			t.Fatalf("%s: %v\n%s", op, err, bench.String())
		}
		if !strings.Contains(bench.String(), "65536") {
			t.Fatalf("%s: no row for 64 KiB:\n%s", op, bench.String())
		}
	}
}
