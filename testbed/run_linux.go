package testbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// runWaitDelay is how long Run waits, after asking a cancelled rank to
// stop with SIGTERM, before killing its process group.
const runWaitDelay = 5 * time.Second

// Run starts cmd once per host namespace of st — rank i in st.Hosts[i] —
// with the bootstrap environment of coll.FromEnv added to the calling
// process's: NDMA_RANK, NDMA_SIZE (len(st.Hosts)), NDMA_HOST_ID (the
// host's namespace: ranks of one host share memory, those of others do
// not, though every namespace sees this machine's /dev/shm), NDMA_SWITCH
// (st.SwitchAddr) and, with several switch processes, NDMA_SWITCHES
// (st.SwitchAddrs), NDMA_TOKEN (st.Token), NDMA_MTU (st.DatagramMTU: the
// largest datagram one frame carries), NDMA_CREDENTIAL (unless the
// testbed runs without credentials: a member credential issued for this
// run, named JOB/RANK, which joins the run's job only as its own rank and
// the job's own groups as any rank, see fabric.RankMay; its file is
// removed when the run ends), NDMA_STORD_PIDS and NDMA_STORGW_PIDS (the storage
// daemons' pids, where there are any), NDMA_TESTBED_SWITCH_NS (the switch
// namespace, whose ports count every link's bytes) and NDMA_JOB, a job
// name fresh
// for each Run ("<prefix>-<random>"), so that a run never meets the
// remains of an earlier one at the switch; and GOMAXPROCS=st.GoMaxProcs
// when that is set and the calling environment has no GOMAXPROCS. Each
// rank's stdout and stderr go to out line by line, each line prefixed "[rank i] "; writes to out
// are serialised. Run waits for every rank and returns nil if all exit
// with status 0, else a *RunError naming the failed ranks. When ctx ends,
// every rank's process group gets SIGTERM, and SIGKILL runWaitDelay later;
// the error then wraps ctx.Err().
func Run(ctx context.Context, st *State, cmd []string, out io.Writer) error {
	return RunWith(ctx, st, cmd, out, RunOptions{})
}

// RunWith is Run with opts: with opts.PerHost K, K ranks in each host
// namespace (rank i in st.Hosts[i/K], NDMA_SIZE K × len(st.Hosts)).
func RunWith(ctx context.Context, st *State, cmd []string, out io.Writer, opts RunOptions) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	if len(cmd) == 0 {
		return errors.New("testbed: run: no command")
	}
	if st == nil || len(st.Hosts) == 0 {
		return errors.New("testbed: run: the testbed has no hosts")
	}
	if out == nil {
		out = io.Discard
	}
	job := st.Prefix + "-" + randomHex(4)
	perHost := max(1, opts.PerHost)
	size := len(st.Hosts) * perHost
	creds, remove, err := RankCredentials(st, job, size)
	if err != nil {
		return err
	}
	defer remove()
	var mu sync.Mutex // serialises writes to out
	errs := make([]error, size)
	pgids := make([]int, size) // 0: not started
	var wg sync.WaitGroup
	for i := range size {
		h := st.Hosts[i/perHost]
		w := &prefixWriter{mu: &mu, out: out, prefix: []byte("[rank " + strconv.Itoa(i) + "] ")}
		c := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.NS}, cmd...)...)
		c.Env = append(os.Environ(),
			"NDMA_RANK="+strconv.Itoa(i),
			"NDMA_SIZE="+strconv.Itoa(size),
			"NDMA_SWITCH="+hostSwitch(st, &h),
			"NDMA_JOB="+job,
			"NDMA_TOKEN="+st.Token,
			"NDMA_MTU="+strconv.Itoa(st.DatagramMTU),
			"NDMA_HOST_ID="+h.NS,
		)
		if creds != nil {
			c.Env = append(c.Env, "NDMA_CREDENTIAL="+creds[i])
		} else {
			c.Env = append(c.Env, "NDMA_CREDENTIAL=", "NDMA_INSECURE=1") // a testbed without credentials
		}
		if len(st.SwitchAddrs) > 1 {
			c.Env = append(c.Env, "NDMA_SWITCHES="+strings.Join(st.SwitchAddrs, ","))
		}
		c.Env = append(c.Env, daemonPIDs(st)...)
		c.Env = append(c.Env, "NDMA_TESTBED_SWITCH_NS="+st.Switch.NS)
		if _, set := os.LookupEnv("GOMAXPROCS"); !set && st.GoMaxProcs > 0 {
			c.Env = append(c.Env, "GOMAXPROCS="+strconv.Itoa(st.GoMaxProcs))
		}
		c.Stdout, c.Stderr = w, w
		// A process group per rank, so that cancelling reaches what
		// the rank started too.
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGTERM) }
		c.WaitDelay = runWaitDelay
		if err := c.Start(); err != nil {
			errs[i] = err
			continue
		}
		pgids[i] = c.Process.Pid
		wg.Go(func() {
			err := c.Wait()
			if ctx.Err() != nil {
				// Whatever of the group outlived SIGTERM.
				_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			}
			w.flush()
			errs[i] = err
		})
	}
	stop := make(chan struct{})
	var sg sync.WaitGroup
	if opts.Stall > 0 {
		sg.Go(func() { stallRanks(stop, pgids, opts) })
	}
	wg.Wait()
	close(stop)
	sg.Wait()
	var re RunError
	for i, err := range errs {
		if err != nil {
			re.Ranks = append(re.Ranks, RankError{Rank: i, Err: err})
		}
	}
	switch {
	case ctx.Err() != nil:
		if len(re.Ranks) > 0 {
			return fmt.Errorf("%w: %w", ctx.Err(), &re)
		}
		return ctx.Err()
	case len(re.Ranks) > 0:
		return &re
	}
	return nil
}

// stallRanks freezes, once every opts.StallEvery until stop is closed, the
// process group of one started rank (pgids[i] != 0) drawn at random for
// opts.Stall. A group that has exited is skipped; a frozen one is always
// resumed before it returns.
func stallRanks(stop <-chan struct{}, pgids []int, opts RunOptions) {
	seed := opts.Seed
	if seed == 0 {
		seed = mrand.Uint64()
	}
	r := mrand.New(mrand.NewPCG(seed, 0x5da11))
	tick := time.NewTicker(opts.StallEvery)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		i := r.IntN(len(pgids))
		if pgids[i] == 0 || syscall.Kill(-pgids[i], syscall.SIGSTOP) != nil {
			continue
		}
		t := time.NewTimer(opts.Stall)
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
		}
		_ = syscall.Kill(-pgids[i], syscall.SIGCONT)
		if opts.OnStall != nil {
			opts.OnStall(i)
		}
	}
}

// prefixWriter writes whole lines to out, each prefixed, holding *mu for
// each write so that ranks' lines never mix. It is used by one goroutine
// (os/exec's copier) at a time.
type prefixWriter struct {
	mu      *sync.Mutex
	out     io.Writer
	prefix  []byte
	partial []byte // the current line, not yet ended
	line    []byte // scratch
}

func (w *prefixWriter) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			w.partial = append(w.partial, b...)
			// A line without an end for too long is written as it is.
			if len(w.partial) >= 64<<10 {
				w.emit(nil)
			}
			break
		}
		w.emit(b[:i+1])
		b = b[i+1:]
	}
	return n, nil
}

// flush writes the last line if it has no line ending.
func (w *prefixWriter) flush() {
	if len(w.partial) > 0 {
		w.emit([]byte{'\n'})
	}
}

// emit writes prefix, the partial line and rest as one write. Errors of
// out are dropped: a rank's output must not stop the rank.
func (w *prefixWriter) emit(rest []byte) {
	w.line = append(append(append(w.line[:0], w.prefix...), w.partial...), rest...)
	if rest == nil {
		w.line = append(w.line, '\n')
	}
	w.partial = w.partial[:0]
	w.mu.Lock()
	_, _ = w.out.Write(w.line)
	w.mu.Unlock()
}

// daemonPIDs are the NDMA_STORD_PIDS and NDMA_STORGW_PIDS variables (the
// storage daemons' pids, comma-separated) of a testbed that has storage
// nodes, so that a benchmark rank can read their CPU time.
func daemonPIDs(st *State) []string {
	pids := map[string][]string{}
	for _, d := range st.Daemons {
		if d.Role == "stord" || d.Role == "storgw" {
			pids[d.Role] = append(pids[d.Role], strconv.Itoa(d.PID))
		}
	}
	var env []string
	for role, v := range map[string]string{"stord": "NDMA_STORD_PIDS", "storgw": "NDMA_STORGW_PIDS"} {
		if len(pids[role]) > 0 {
			env = append(env, v+"="+strings.Join(pids[role], ","))
		}
	}
	return env
}

// hostSwitch is the switch the ranks of host h meet at: its leaf in a
// tree, else the testbed's switch.
func hostSwitch(st *State, h *Node) string {
	if h.Leaf != "" {
		return h.Leaf
	}
	return st.SwitchAddr
}
