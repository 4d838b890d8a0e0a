package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// mpiFlavor is one MPI implementation the interposition library is built
// for: its compiler wrapper, its launcher and the library's name.
type mpiFlavor struct {
	name           string
	mpicc, mpirun  []string // candidates, first found wins
	mpifort        []string
	fortranNDMA    bool // its Fortran bindings call the MPI_ functions (the library sees them)
	lib            string
	launchArgs     func(np int, env map[string]string, prog string, args ...string) []string
	requireInCI    bool
	fullMatrixRuns bool     // every run; otherwise the library's runs only
	args           []string // for the test program
}

var mpiFlavors = []mpiFlavor{
	{
		name: "openmpi", mpicc: []string{"mpicc.openmpi", "mpicc"}, mpirun: []string{"mpirun.openmpi", "mpirun"},
		mpifort: []string{"mpifort.openmpi", "mpifort"},
		lib:     "libndma_mpi.so", requireInCI: true, fullMatrixRuns: true,
		launchArgs: func(np int, env map[string]string, prog string, args ...string) []string {
			a := []string{"-np", strconv.Itoa(np), "--oversubscribe", "--bind-to", "none",
				// the ranks share two cores: waiting ranks yield
				"--mca", "mpi_yield_when_idle", "1", "--mca", "btl", "self,tcp"}
			for k, v := range env {
				a = append(a, "-x", k+"="+v)
			}
			return append(append(a, prog), args...)
		},
	},
	{
		name: "mpich", mpicc: []string{"mpicc.mpich"}, mpirun: []string{"mpirun.mpich"},
		mpifort: []string{"mpifort.mpich"}, fortranNDMA: true,
		// MPICH's ranks spin while they wait, slow on two shared cores:
		// the test program's quick matrix.
		lib: "libndma_mpi_mpich.so", requireInCI: true, args: []string{"quick"},
		launchArgs: func(np int, env map[string]string, prog string, args ...string) []string {
			a := []string{"-np", strconv.Itoa(np)}
			for k, v := range env {
				a = append(a, "-genv", k, v)
			}
			return append(append(a, prog), args...)
		},
	},
}

func lookFirst(names []string) string {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}

// TestMPI builds the MPI interposition library (libndma/mpi) for Open MPI
// and for MPICH and runs an unmodified MPI test program
// (testdata/mpi_collectives.c) as 4 ranks on loopback: without the
// library, with it through a switch that seals every datagram (every
// intercepted call checked against the MPI library's own), with the
// ranks sharing the host's memory (NDMA_HIERARCHY=auto), in
// deterministic mode (float sums exact in rank order), with no switch
// answering (one warning, results from MPI's own) and, strict, with no
// switch (the job fails). An MPI that is not installed skips, unless
// NDMA_REQUIRE_MPI=1 (as CI sets) makes that a failure.
func TestMPI(t *testing.T) {
	dir := buildLibrary(t)
	fab := startSealedFabric(t, "mpitest")

	for _, f := range mpiFlavors {
		t.Run(f.name, func(t *testing.T) {
			mpicc, mpirun := lookFirst(f.mpicc), lookFirst(f.mpirun)
			if mpicc == "" || mpirun == "" {
				if f.requireInCI && os.Getenv("NDMA_REQUIRE_MPI") == "1" {
					t.Fatalf("%s: no %v and %v on PATH, and NDMA_REQUIRE_MPI=1", f.name, f.mpicc, f.mpirun)
				}
				t.Skipf("%s is not installed (%v, %v)", f.name, f.mpicc, f.mpirun)
			}
			var runProg func(t *testing.T, prog string, args []string, env map[string]string) (string, error)
			libPath := filepath.Join(dir, f.lib)
			prog := filepath.Join(dir, "mpi_collectives-"+f.name)
			for _, c := range [][]string{
				{mpicc, "-Wall", "-Wextra", "-Werror", "-O2", "-shared", "-fPIC", "-I.", "-o", libPath, "mpi/ndma_mpi.c",
					"-L" + dir, "-lndma", "-lpthread", "-Wl,-rpath," + dir},
				{mpicc, "-Wall", "-Wextra", "-Werror", "-O1", "-o", prog, "testdata/mpi_collectives.c", "-ldl", "-lm"},
			} {
				if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
					t.Fatalf("%v: %v\n%s", c, err, out)
				}
			}
			run := func(t *testing.T, env map[string]string, args ...string) (string, error) {
				return runProg(t, prog, append(args, f.args...), env)
			}
			runProg = func(t *testing.T, prog string, args []string, env map[string]string) (string, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				cmd := exec.CommandContext(ctx, mpirun, f.launchArgs(4, env, prog, args...)...)
				cmd.Env = append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
				cmd.WaitDelay = 10 * time.Second
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				start := time.Now()
				err := cmd.Run()
				t.Logf("%s %v: %v in %v\n%s", f.name, args, err, time.Since(start).Round(time.Millisecond), out.String())
				return out.String(), err
			}
			oks := func(t *testing.T, out string, err error) {
				t.Helper()
				for r := range 4 {
					if err != nil || !strings.Contains(out, fmt.Sprintf("ok rank %d\n", r)) {
						t.Errorf("no ok from rank %d (err %v)", r, err)
					}
				}
			}
			// Every collective through the switch (the ranks share this
			// host: the hierarchy would keep them off the network).
			sealed := map[string]string{"LD_PRELOAD": libPath, "NDMA_SWITCH": fab.swAddr, "NDMA_TOKEN": fab.token,
				"NDMA_CREDENTIAL": fab.credPath, "NDMA_JOB": "mpitest", "NDMA_TIMEOUT": "60s", "NDMA_MPI_VERBOSE": "1",
				"NDMA_HIERARCHY": "off"}

			if f.fullMatrixRuns {
				t.Run("without", func(t *testing.T) {
					out, err := run(t, nil)
					oks(t, out, err)
				})
			}
			t.Run("ndma", func(t *testing.T) {
				out, err := run(t, sealed, "ndma")
				oks(t, out, err)
				if !strings.Contains(out, "4 ranks joined group") || strings.Contains(out, "share memory") {
					t.Errorf("the library did not report the ranks joined over the network")
				}
			})
			// Several ranks per host: the 4 ranks share this host's
			// memory, and no collective of theirs crosses the network.
			t.Run("hierarchy", func(t *testing.T) {
				env := map[string]string{}
				for k, v := range sealed {
					env[k] = v
				}
				env["NDMA_HIERARCHY"] = "auto"
				out, err := run(t, env, "ndma")
				oks(t, out, err)
				if !strings.Contains(out, "4 ranks of this host share memory") {
					t.Errorf("the library did not report the ranks sharing the host's memory")
				}
			})
			if f.fullMatrixRuns {
				t.Run("deterministic", func(t *testing.T) {
					env := map[string]string{"NDMA_DETERMINISTIC": "1"}
					for k, v := range sealed {
						env[k] = v
					}
					out, err := run(t, env, "ndma", "deterministic")
					oks(t, out, err)
				})
			}
			// A Fortran program: through NDMA where the MPI's Fortran
			// bindings call the MPI_ functions, else on MPI's own; right
			// either way.
			t.Run("fortran", func(t *testing.T) {
				mpifort := lookFirst(f.mpifort)
				if mpifort == "" {
					if os.Getenv("NDMA_REQUIRE_MPI") == "1" {
						t.Fatalf("no %v on PATH (gfortran), and NDMA_REQUIRE_MPI=1", f.mpifort)
					}
					t.Skipf("no %v on PATH", f.mpifort)
				}
				fprog := filepath.Join(dir, "mpi_fortran-"+f.name)
				if out, err := exec.Command(mpifort, "-O1", "-o", fprog, "testdata/mpi_fortran.f90").CombinedOutput(); err != nil {
					t.Fatalf("%s: %v\n%s", mpifort, err, out)
				}
				out, err := runProg(t, fprog, nil, sealed)
				oks(t, out, err)
				through := strings.Count(out, "calls through NDMA / MPI:")
				if f.fortranNDMA && (through != 4 || strings.Contains(out, "Allreduce 0/")) {
					t.Errorf("%s's Fortran calls did not all go through NDMA (%d ranks reported)", f.name, through)
				}
				if !f.fortranNDMA && through != 0 {
					t.Errorf("%s's Fortran bindings reached the library (%d ranks reported): update the docs", f.name, through)
				}
			})
			// A port nothing answers on: NDMA declines with one warning
			// and every call runs on MPI's own.
			dead := map[string]string{"LD_PRELOAD": libPath, "NDMA_SWITCH": "127.0.0.1:1", "NDMA_INSECURE": "1",
				"NDMA_JOIN_TIMEOUT": "2s"}
			t.Run("noswitch", func(t *testing.T) {
				out, err := run(t, dead)
				oks(t, out, err)
				if n := strings.Count(out, "NDMA declined"); n != 1 {
					t.Errorf("%d warnings that NDMA declined, want 1", n)
				}
			})
			if f.fullMatrixRuns {
				t.Run("strict", func(t *testing.T) {
					env := map[string]string{"NDMA_MPI_STRICT": "1"}
					for k, v := range dead {
						env[k] = v
					}
					out, err := run(t, env)
					if err == nil || strings.Contains(out, "ok rank") {
						t.Errorf("strict mode with no switch: the job ran (err %v)", err)
					}
					if !strings.Contains(out, "NDMA_MPI_STRICT=1") {
						t.Errorf("strict mode did not say why it aborted")
					}
				})
			}
		})
	}
}
