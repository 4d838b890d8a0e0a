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

	"github.com/ndma/ndma/coll"
	"github.com/ndma/ndma/testbed"
)

// AlgoMPI names the rows SuiteConfig.MPI adds: the operation as Open MPI
// runs it, with its own choice of algorithm.
const AlgoMPI coll.Algo = "mpi"

// The rows of SuiteConfig.MPINDMA: the same Open MPI program with the
// MPI interposition library (libndma/mpi) preloaded, its collectives
// through the switch (AlgoMPINDMA), or declined by the library (every
// call too small for NDMA_MPI_MIN_BYTES, Barrier turned off, so each
// call goes through the library's checks to Open MPI's own:
// AlgoMPIDeclined, the library's overhead when it declines).
const (
	AlgoMPINDMA     coll.Algo = "mpi-ndma"
	AlgoMPIDeclined coll.Algo = "mpi-ndma-declined"
)

// mpiTunedPrefix starts the names of the rows SuiteConfig.MPITuned adds:
// "mpi-tuned-ring" is Open MPI with its tuned component's ring forced.
const mpiTunedPrefix = "mpi-tuned-"

// IsMPI reports whether algo names rows Open MPI measured (AlgoMPI,
// AlgoMPINDMA, AlgoMPIDeclined or a forced tuned algorithm).
func IsMPI(algo coll.Algo) bool {
	return algo == AlgoMPI || strings.HasPrefix(string(algo), "mpi-")
}

// mpiOpVar is the name Open MPI's tuned component gives an operation in
// its coll_tuned_<name>_algorithm parameter.
var mpiOpVar = map[coll.Operation]string{
	coll.OpBcast: "bcast", coll.OpReduce: "reduce", coll.OpAllreduce: "allreduce", coll.OpAllgather: "allgather",
	coll.OpBarrier: "barrier", coll.OpReduceScatter: "reduce_scatter_block", coll.OpGather: "gather",
	coll.OpScatter: "scatter", coll.OpAlltoall: "alltoall",
}

// tunedKey names a tuned algorithm of one operation (the same name has
// a different parameter value for each operation).
type tunedKey struct {
	op   coll.Operation
	algo coll.Algo
}

// parseTuned reads `ompi_info --param coll tuned --level 9`: for each
// operation of ops, the algorithms its coll_tuned_<op>_algorithm
// parameter accepts (all but 0, "ignore"), as row names
// (mpiTunedPrefix+name) mapped to the parameter's value.
func parseTuned(out string, ops []coll.Operation) (map[coll.Operation][]coll.Algo, map[tunedKey]int) {
	algos := make(map[coll.Operation][]coll.Algo)
	values := make(map[tunedKey]int)
	lines := strings.Split(out, "\n")
	for _, op := range ops {
		v, ok := mpiOpVar[op]
		if !ok {
			continue
		}
		param := `parameter "coll_tuned_` + v + `_algorithm"`
		for i, l := range lines {
			if !strings.Contains(l, param) {
				continue
			}
			for _, m := range lines[i+1 : min(i+4, len(lines))] {
				_, list, ok := strings.Cut(m, "Valid values:")
				if !ok {
					continue
				}
				for _, item := range strings.Split(list, ",") {
					num, name, ok := strings.Cut(strings.TrimSpace(item), ":")
					n, err := strconv.Atoi(num)
					name = strings.Trim(name, `"`)
					if !ok || err != nil || n == 0 || name == "" {
						continue
					}
					a := coll.Algo(mpiTunedPrefix + strings.ReplaceAll(name, "_", "-"))
					algos[op] = append(algos[op], a)
					values[tunedKey{op, a}] = n
				}
				break
			}
			break
		}
	}
	return algos, values
}

// MPITunedAlgorithms lists, per operation of ops, the algorithms Open
// MPI's tuned component can be forced to (the rows SuiteConfig.MPITuned
// adds), from ompi_info.
func MPITunedAlgorithms(ctx context.Context, ops []coll.Operation) (map[coll.Operation][]coll.Algo, map[tunedKey]int, error) {
	info, err := exec.LookPath("ompi_info")
	if err != nil {
		return nil, nil, ErrNoMPI
	}
	out, err := exec.CommandContext(ctx, info, "--param", "coll", "tuned", "--level", "9").Output()
	if err != nil {
		return nil, nil, fmt.Errorf("ompi_info: %w", err)
	}
	algos, values := parseTuned(string(out), ops)
	return algos, values, nil
}

//go:embed mpi/osu_coll.c
var osuCollSource []byte

// ErrNoMPI is returned by RunSuite with MPI set when Open MPI's mpicc or
// mpirun is not installed.
var ErrNoMPI = errors.New("bench: suite: --mpi needs Open MPI's mpicc and mpirun (Debian: apt-get install openmpi-bin libopenmpi-dev)")

// mpiRunner runs the MPI side of a suite: osu_coll built in a temporary
// directory, started on the testbed by testbed.MPICommand.
type mpiRunner struct {
	dir     string // temporary: osu_coll
	prog    string
	mpirun  string
	ndmaLib string           // the interposition library (SuiteConfig.MPINDMA)
	tuned   map[tunedKey]int // tuned algorithms' parameter values
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

// run runs one MPI job on st, perHost ranks on each host (0: one),
// writing its output to out.
func (r *mpiRunner) run(ctx context.Context, st *testbed.State, j suiteJob, iters, perHost int, out io.Writer) error {
	it, warmup := (&CollConfig{Iters: iters}).iters(j.size)
	c := testbed.MPIConfig{MPIRun: r.mpirun, PerHost: perHost,
		Program: []string{r.prog, string(j.op), strconv.Itoa(j.size), strconv.Itoa(it), strconv.Itoa(warmup), string(j.algo)}}
	switch {
	case j.algo == AlgoMPINDMA || j.algo == AlgoMPIDeclined:
		if r.ndmaLib == "" {
			return fmt.Errorf("bench: suite: %s rows need the interposition library (SuiteConfig.MPINDMA)", j.algo)
		}
		c.NDMALib = r.ndmaLib
		if j.algo == AlgoMPIDeclined {
			c.MPIArgs = append(c.MPIArgs, "-x", "NDMA_MPI_MIN_BYTES=1099511627776", "-x", "NDMA_MPI_BARRIER=0")
		}
	case strings.HasPrefix(string(j.algo), mpiTunedPrefix):
		v, ok := r.tuned[tunedKey{j.op, j.algo}]
		if !ok {
			return fmt.Errorf("bench: suite: Open MPI has no tuned algorithm %q for %s", j.algo, j.op)
		}
		c.MPIArgs = append(c.MPIArgs, "--mca", "coll_tuned_use_dynamic_rules", "1",
			"--mca", "coll_tuned_"+mpiOpVar[j.op]+"_algorithm", strconv.Itoa(v))
	}
	cmd, cleanup, err := testbed.MPICommand(ctx, st, c)
	if err != nil {
		return fmt.Errorf("bench: suite: %w", err)
	}
	defer cleanup()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("mpirun: %w", err)
	}
	return nil
}
