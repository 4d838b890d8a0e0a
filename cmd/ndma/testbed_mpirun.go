package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/ndma/ndma/testbed"
)

// testbedMPIFlags are the flags of `ndma testbed mpirun`.
type testbedMPIFlags struct {
	ndmaLib string
	job     string
	mpiArgs []string
	ppn     int
}

// newTestbedMPIRunCmd is ndma testbed mpirun.
func newTestbedMPIRunCmd(f *testbedFlags) *cobra.Command {
	var m testbedMPIFlags
	cmd := &cobra.Command{
		Use:   "mpirun [flags] -- PROGRAM [ARG...]",
		Short: "Run an MPI program with Open MPI's mpirun, one rank (or --ppn) per testbed host",
		Long: `mpirun runs PROGRAM (built with Open MPI's mpicc) under Open MPI's mpirun
with one rank per host of the testbed (rank i on host i): mpirun runs in
the first host's namespace and reaches the others through a launch agent
that enters their namespaces (plm_rsh_agent); its traffic and the ranks'
go over the testbed's interfaces (btl tcp), and the ranks yield while they
wait (mpi_yield_when_idle: they share this machine's cores). --ppn K runs
K ranks on each host (ranks iK to iK+K-1 on host i), a host's ranks
reaching each other through Open MPI's shared memory (btl vader); each
host's mpirun daemon runs under a host name of its own (the host's
namespace), so that Open MPI tells the hosts apart.

--ndma LIB preloads NDMA's MPI interposition library (make libndma
builds build/libndma_mpi.so) into every rank, with the launch
environment it needs: NDMA_SWITCH, NDMA_MTU, NDMA_TOKEN, NDMA_JOB (--job,
or a fresh name) and, on a testbed with credentials, each rank's own
(issued for the run, removed after it), and NDMA_HOST_ID (the host's
namespace: the ranks of a host share memory unless NDMA_HIERARCHY=off).
--mpi-arg passes arguments to
mpirun before the program (repeat it: --mpi-arg=--mca --mpi-arg=coll_tuned_use_dynamic_rules
--mpi-arg=1, or -x VAR to pass a variable to the ranks). SIGINT or SIGTERM
stops mpirun.`,
		Example: `  make libndma && mpicc -O2 -o /tmp/prog prog.c
  sudo ndma testbed mpirun -- /tmp/prog
  sudo ndma testbed mpirun --ndma build/libndma_mpi.so -- /tmp/prog
  sudo ndma testbed mpirun --ppn 4 --ndma build/libndma_mpi.so -- /tmp/prog
  sudo ndma testbed mpirun --prefix tb2 --mpi-arg=-x --mpi-arg=NDMA_MPI_MIN_BYTES=4096 --ndma build/libndma_mpi.so -- /tmp/prog`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return errors.New("mpirun needs a program: ndma testbed mpirun [--prefix P] [--ndma LIB] -- PROGRAM [ARG...]")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return runTestbedMPIRun(cmd, f, &m, args) },
	}
	fl := cmd.Flags()
	fl.StringVar(&m.ndmaLib, "ndma", "", "NDMA's MPI interposition `library` to preload into every rank (build/libndma_mpi.so)")
	fl.StringVar(&m.job, "job", "", "NDMA_JOB for --ndma (default: a fresh name)")
	fl.StringArrayVar(&m.mpiArgs, "mpi-arg", nil, "an argument for mpirun, before the program (repeatable)")
	fl.IntVar(&m.ppn, "ppn", 1, fmt.Sprintf("ranks on each host, 1 to %d", testbed.MaxPerHost))
	return cmd
}

func runTestbedMPIRun(cmd *cobra.Command, f *testbedFlags, m *testbedMPIFlags, args []string) error {
	if m.ppn < 1 || m.ppn > testbed.MaxPerHost {
		return flagError(fmt.Errorf("--ppn %d: want 1 to %d ranks per host", m.ppn, testbed.MaxPerHost))
	}
	st, err := testbed.StatusAt(f.stateDir, f.prefix)
	if err != nil {
		return flagError(err)
	}
	if len(st.Hosts) == 0 {
		return fmt.Errorf("testbed %q has no state file, only namespaces left by a crash (%v): run `ndma testbed down --prefix %s` and `up` again", f.prefix, st.Stray, f.prefix)
	}
	if m.job != "" && m.ndmaLib == "" {
		return flagError(errors.New("--job names the NDMA job of --ndma: give --ndma too"))
	}
	if m.ndmaLib != "" {
		// The ranks load it from their own working directory: by its
		// absolute path.
		if m.ndmaLib, err = filepath.Abs(m.ndmaLib); err != nil {
			return flagError(fmt.Errorf("--ndma: %w", err))
		}
		if _, err := os.Stat(m.ndmaLib); err != nil {
			return flagError(fmt.Errorf("--ndma: %w (make libndma builds build/libndma_mpi.so)", err))
		}
	}
	ctx, stop := signalContext(cmd)
	defer stop()
	c, cleanup, err := testbed.MPICommand(ctx, st, testbed.MPIConfig{NDMALib: m.ndmaLib, Job: m.job, MPIArgs: m.mpiArgs, Program: args, PerHost: m.ppn})
	if err != nil {
		return err
	}
	defer cleanup()
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr()
	if err := c.Run(); err != nil {
		return fmt.Errorf("mpirun: %w", err)
	}
	return nil
}
