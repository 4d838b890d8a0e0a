package bench

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ndma/ndma/coll"
	"github.com/ndma/ndma/testbed"
)

// AlgoMPI names the rows SuiteConfig.MPI adds: the operation as Open MPI
// runs it, with its own choice of algorithm.
const AlgoMPI coll.Algo = "mpi"

//go:embed mpi/osu_coll.c
var osuCollSource []byte

// ErrNoMPI is returned by RunSuite with MPI set when Open MPI's mpicc or
// mpirun is not installed.
var ErrNoMPI = errors.New("bench: suite: --mpi needs Open MPI's mpicc and mpirun (Debian: apt-get install openmpi-bin libopenmpi-dev)")

// mpiRunner runs the MPI side of a suite: osu_coll built in a temporary
// directory, started by mpirun in the first host's namespace, mpirun
// reaching the other hosts through a launch agent that enters their
// namespaces (plm_rsh_agent).
type mpiRunner struct {
	dir    string // temporary: osu_coll, the agent
	prog   string
	mpirun string
	agent  string // written on first use, for the testbed it is given
}

func newMPIRunner(ctx context.Context) (*mpiRunner, error) {
	mpicc, err := exec.LookPath("mpicc")
	if err != nil {
		return nil, ErrNoMPI
	}
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		return nil, ErrNoMPI
	}
	dir, err := os.MkdirTemp("", "ndma-mpi-")
	if err != nil {
		return nil, err
	}
	r := &mpiRunner{dir: dir, prog: filepath.Join(dir, "osu_coll"), mpirun: mpirun}
	src := filepath.Join(dir, "osu_coll.c")
	if err := os.WriteFile(src, osuCollSource, 0o644); err != nil {
		r.close()
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, mpicc, "-O2", "-o", r.prog, src).CombinedOutput(); err != nil {
		r.close()
		return nil, fmt.Errorf("bench: suite: building osu_coll with %s: %w\n%s", mpicc, err, out)
	}
	return r, nil
}

// MPIVersion returns the first line of `mpirun --version` ("mpirun (Open
// MPI) 4.1.4"), or ErrNoMPI.
func MPIVersion(ctx context.Context) (string, error) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		return "", ErrNoMPI
	}
	out, err := exec.CommandContext(ctx, mpirun, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("mpirun --version: %w", err)
	}
	v, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return v, nil
}

func (r *mpiRunner) close() { os.RemoveAll(r.dir) }

// writeAgent writes the launch agent for st: mpirun calls it as
// "agent HOST COMMAND..." and it runs COMMAND with sh in HOST's namespace.
func (r *mpiRunner) writeAgent(st *testbed.State) error {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n# ndma bench suite: mpirun's launch agent for testbed " + st.Prefix + "\nhost=$1; shift\ncase \"$host\" in\n")
	for _, h := range st.Hosts {
		fmt.Fprintf(&b, "%s) ns=%s ;;\n", h.Addr, h.NS)
	}
	b.WriteString("*) echo \"ndma mpi agent: unknown host $host\" >&2; exit 1 ;;\nesac\nexec ip netns exec \"$ns\" sh -c \"$*\"\n")
	agent := filepath.Join(r.dir, "agent-"+st.Prefix)
	if err := os.WriteFile(agent, []byte(b.String()), 0o755); err != nil {
		return err
	}
	r.agent = agent
	return nil
}

// run runs one MPI job on st, writing its output to out.
func (r *mpiRunner) run(ctx context.Context, st *testbed.State, j suiteJob, iters int, out io.Writer) error {
	if len(st.Hosts) == 0 {
		return errors.New("bench: suite: the testbed has no hosts")
	}
	if r.agent == "" {
		if err := r.writeAgent(st); err != nil {
			return err
		}
	}
	it, warmup := (&CollConfig{Iters: iters}).iters(j.size)
	hosts := make([]string, len(st.Hosts))
	for i, h := range st.Hosts {
		hosts[i] = h.Addr.String() + ":1"
	}
	iface := st.Hosts[0].Iface
	args := []string{"netns", "exec", st.Hosts[0].NS, r.mpirun,
		"--host", strings.Join(hosts, ","), "-np", strconv.Itoa(len(st.Hosts)),
		"--bind-to", "none", // one rank per namespace, all on this machine's cores
		// The ranks share this machine's few cores, which mpirun cannot see
		// (each "host" has one slot): without yielding, ranks waiting in a
		// collective spin and starve the others (an 8 B Bcast took 17 ms).
		"--mca", "mpi_yield_when_idle", "1",
		"--mca", "plm_rsh_agent", r.agent,
		"--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", iface, "--mca", "oob_tcp_if_include", iface,
		r.prog, string(j.op), strconv.Itoa(j.size), strconv.Itoa(it), strconv.Itoa(warmup)}
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Env = append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("mpirun: %w", err)
	}
	return nil
}
