package testbed

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// MPICommand returns the command that runs c on st — mpirun in the first
// host's namespace, one rank per host (rank i on st.Hosts[i]), reaching
// the other hosts through a launch agent that enters their namespaces
// (plm_rsh_agent), its traffic (and the ranks') on the testbed's
// interfaces — and a cleanup that removes the agent and the credentials
// it issued. The ranks yield while they wait (mpi_yield_when_idle): they
// share this machine's cores, which mpirun cannot see. The command is
// cancelled with SIGTERM when ctx ends.
func MPICommand(ctx context.Context, st *State, c MPIConfig) (*exec.Cmd, func(), error) {
	if st == nil || len(st.Hosts) == 0 {
		return nil, func() {}, errors.New("testbed: mpirun: the testbed has no hosts")
	}
	if len(c.Program) == 0 {
		return nil, func() {}, errors.New("testbed: mpirun: no program")
	}
	mpirun := c.MPIRun
	if mpirun == "" {
		var err error
		if mpirun, err = exec.LookPath("mpirun"); err != nil {
			return nil, func() {}, errors.New("testbed: mpirun: Open MPI's mpirun is not installed (Debian: apt-get install openmpi-bin)")
		}
	}
	dir, err := os.MkdirTemp("", "ndma-mpirun-")
	if err != nil {
		return nil, func() {}, err
	}
	var removeCreds func()
	cleanup := func() {
		if removeCreds != nil {
			removeCreds()
		}
		os.RemoveAll(dir)
	}
	agent := filepath.Join(dir, "agent")
	if err := os.WriteFile(agent, []byte(launchAgent(st, dir)), 0o755); err != nil {
		cleanup()
		return nil, func() {}, err
	}
	if c.PerHost < 0 || c.PerHost > MaxPerHost {
		cleanup()
		return nil, func() {}, fmt.Errorf("testbed: mpirun: %d ranks per host: want 1 to %d", c.PerHost, MaxPerHost)
	}
	perHost := max(1, c.PerHost)
	hosts := make([]string, len(st.Hosts))
	for i, h := range st.Hosts {
		hosts[i] = h.Addr.String() + ":" + strconv.Itoa(perHost)
	}
	// A host's ranks reach each other through shared memory (Open MPI's
	// own hierarchy), other hosts' over TCP.
	btl := "tcp,self"
	if perHost > 1 {
		btl = "self,vader,tcp"
	}
	iface := st.Hosts[0].Iface
	args := []string{"netns", "exec", st.Hosts[0].NS, mpirun,
		"--host", strings.Join(hosts, ","), "-np", strconv.Itoa(len(st.Hosts) * perHost),
		"--bind-to", "none", // the ranks share this machine's cores
		// The ranks share this machine's few cores, which mpirun cannot
		// see (each "host" has one slot): without yielding, ranks waiting
		// in a collective spin and starve the others.
		"--mca", "mpi_yield_when_idle", "1",
		"--mca", "plm_rsh_agent", agent,
		// Every orted of the job runs on this one machine: sharing the
		// hardware topology through shared memory at a fixed address
		// (the default) crashed one now and then (a SIGSEGV in
		// hwloc_shmem_topology_write) when they started together.
		"--mca", "rtc_hwloc_vmhole", "none",
		"--mca", "btl", btl, "--mca", "btl_tcp_if_include", iface, "--mca", "oob_tcp_if_include", iface}
	// Each rank's host, for the two-level collectives: the agent gives
	// the other hosts theirs.
	env := append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "NDMA_HOST_ID="+st.Hosts[0].NS)
	if c.NDMALib != "" {
		job := c.Job
		if job == "" {
			job = fmt.Sprintf("%s-mpi-%08x", st.Prefix, mrand.Uint32())
		}
		// Each rank gets a credential of its own for the job (JOB/RANK),
		// as Run gives: with a rank per host, rank i's (on host i) from
		// the launch agent; with more, every rank finds its own in a
		// directory.
		var creds []string
		var remove func()
		if perHost == 1 {
			creds, remove, err = RankCredentials(st, job, len(st.Hosts))
		} else {
			creds, remove, err = RankCredentialDir(st, job, len(st.Hosts)*perHost, filepath.Join(dir, "creds"))
		}
		if err != nil {
			cleanup()
			return nil, func() {}, err
		}
		removeCreds = remove
		args = append(args, "-x", "LD_PRELOAD="+c.NDMALib,
			"-x", "NDMA_MTU="+strconv.Itoa(st.DatagramMTU), "-x", "NDMA_TOKEN", "-x", "NDMA_JOB="+job)
		if len(st.LeafAddrs) == 0 {
			args = append(args, "-x", "NDMA_SWITCH="+st.SwitchAddr)
		}
		// In a tree, each host's ranks meet at its leaf: rank 0's host
		// here, the others' from the launch agent.
		env = append(env, "NDMA_TOKEN="+st.Token, "NDMA_SWITCH="+hostSwitch(st, &st.Hosts[0]))
		if len(st.SwitchAddrs) > 1 {
			args = append(args, "-x", "NDMA_SWITCHES="+strings.Join(st.SwitchAddrs, ","))
		}
		switch {
		case len(creds) > 0 && perHost > 1:
			args = append(args, "-x", "NDMA_CREDENTIAL="+filepath.Join(dir, "creds"))
		case len(creds) > 0:
			// Rank 0 runs beside mpirun (host 0); the agent gives the
			// others theirs.
			env = append(env, "NDMA_CREDENTIAL="+creds[0], "NDMA_RANK_CREDENTIALS="+strings.Join(creds, " "))
		}
		if _, set := os.LookupEnv("GOMAXPROCS"); !set && st.GoMaxProcs > 0 {
			args = append(args, "-x", "GOMAXPROCS="+strconv.Itoa(st.GoMaxProcs))
		}
	}
	args = append(append(args, c.MPIArgs...), c.Program...)
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Env = append(env, c.Env...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	return cmd, cleanup, nil
}

// launchAgent is mpirun's launch agent for st: mpirun calls it as "agent
// HOST COMMAND..." and it runs COMMAND with sh in HOST's namespace. A
// credential reaches orted, and through it the ranks, as NDMA_CREDENTIAL
// (for the interposition library): host i's rank's own (field i+1 of
// NDMA_RANK_CREDENTIALS: one rank per host, in host order), else the
// host's (several ranks per host: NDMA_CREDENTIAL is a directory, set by
// mpirun -x, which the agent leaves); NDMA_HOST_ID is the host's
// namespace, and NDMA_SWITCH, when set, the host's switch (its leaf in a
// tree). Its orted runs in a UTS namespace of its own, its host name
// the host's namespace: Open MPI tells nodes apart by host name, and with
// the machine's one name for all it took the ranks of every host for one
// node's and its shared-memory transport (vader) crashed. Each host's orted keeps its session directory under dir/hI:
// in the default place (/tmp/ompi.HOSTNAME.UID, one for every namespace,
// as they share the machine's host name) the orteds starting together
// raced to create it and one now and then failed.
func launchAgent(st *State, dir string) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n# ndma: mpirun's launch agent for testbed " + st.Prefix + "\nhost=$1; shift\ncred=\ncase \"$host\" in\n")
	for i, h := range st.Hosts {
		fmt.Fprintf(&b, "%s) ns=%s; i=%d; cred=%s; sw=%s ;;\n", h.Addr, h.NS, i+1, h.Credential, hostSwitch(st, &h))
	}
	b.WriteString("*) echo \"ndma mpi agent: unknown host $host\" >&2; exit 1 ;;\nesac\n" +
		"[ -n \"$NDMA_RANK_CREDENTIALS\" ] && cred=$(echo \"$NDMA_RANK_CREDENTIALS\" | cut -d' ' -f$i)\n" +
		"[ -n \"$cred\" ] && export NDMA_CREDENTIAL=\"$cred\"\n" +
		"export NDMA_HOST_ID=\"$ns\"\n" +
		"[ -z \"$NDMA_SWITCH\" ] || export NDMA_SWITCH=\"$sw\"\n" +
		"export OMPI_MCA_orte_tmpdir_base=" + shellQuote(dir) + "/h$i\nmkdir -p \"$OMPI_MCA_orte_tmpdir_base\"\n" +
		"exec unshare --uts sh -c 'hostname \"$1\" && exec ip netns exec \"$1\" sh -c \"$2\"' agent \"$ns\" \"$*\"\n")
	return b.String()
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
