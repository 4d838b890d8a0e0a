package testbed

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const mpiHello = `#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank, size, sum = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("mpi rank %d of %d sum %d\n", rank, size, sum);
    MPI_Finalize();
    return 0;
}
`

// TestMPICommand runs an MPI program with Open MPI's mpirun on a 3-host
// testbed, one rank per host, five times over (every orted of a job runs
// on this one machine: none may crash starting beside the others), and
// checks that the cleanup leaves nothing.
func TestMPICommand(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a testbed of network namespaces and runs MPI on it")
	}
	mpicc, err1 := exec.LookPath("mpicc")
	_, err2 := exec.LookPath("mpirun")
	if err1 != nil || err2 != nil {
		if os.Getenv("NDMA_REQUIRE_MPI") == "1" {
			t.Fatalf("no mpicc or mpirun on PATH, and NDMA_REQUIRE_MPI=1: %v %v", err1, err2)
		}
		t.Skip("Open MPI is not installed")
	}
	dir := t.TempDir()
	src, prog := filepath.Join(dir, "hello.c"), filepath.Join(dir, "hello")
	if err := os.WriteFile(src, []byte(mpiHello), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mpicc, "-O1", "-o", prog, src).CombinedOutput(); err != nil {
		t.Fatalf("mpicc: %v\n%s", err, out)
	}
	const hosts = 3
	st := upTestbed(t, Config{Hosts: hosts})
	for run := range 5 {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		cmd, cleanup, err := MPICommand(ctx, st, MPIConfig{Program: []string{prog}})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		agentDir := filepath.Dir(cmd.Args[slices.Index(cmd.Args, "plm_rsh_agent")+1])
		out, err := cmd.CombinedOutput()
		cleanup()
		cancel()
		if err != nil {
			t.Fatalf("run %d: mpirun: %v\n%s", run, err, out)
		}
		for r := range hosts {
			if want := fmt.Sprintf("mpi rank %d of %d sum %d", r, hosts, hosts*(hosts-1)/2); !strings.Contains(string(out), want) {
				t.Fatalf("run %d: no %q in:\n%s", run, want, out)
			}
		}
		if _, err := os.Stat(agentDir); !os.IsNotExist(err) {
			t.Fatalf("run %d: the launch agent's directory %s is left behind (%v)", run, agentDir, err)
		}
	}
}

// TestLaunchAgentLeaves: in a testbed whose switch is a tree, the launch
// agent gives each host's orted (and so its ranks) the host's leaf as
// NDMA_SWITCH when the job uses NDMA.
func TestLaunchAgentLeaves(t *testing.T) {
	st := &State{Prefix: "t", SwitchAddr: "10.0.0.1:7471"}
	for i, leaf := range []string{"10.0.0.1:7571", "10.0.0.1:7671"} {
		st.Hosts = append(st.Hosts, Node{Addr: netip.AddrFrom4([4]byte{10, 0, 0, byte(2 + i)}), NS: fmt.Sprintf("t-h%d", i), Leaf: leaf})
	}
	a := launchAgent(st, "/tmp/x")
	for _, h := range st.Hosts {
		if !strings.Contains(a, fmt.Sprintf("%s) ns=%s; i=", h.Addr, h.NS)) || !strings.Contains(a, "sw="+h.Leaf+" ;;") {
			t.Fatalf("the agent does not give host %s its leaf %s:\n%s", h.NS, h.Leaf, a)
		}
	}
	if !strings.Contains(a, `[ -z "$NDMA_SWITCH" ] || export NDMA_SWITCH="$sw"`) {
		t.Fatalf("the agent does not set NDMA_SWITCH:\n%s", a)
	}
}
