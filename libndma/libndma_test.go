package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/internal/memtest"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
)

// lib is the library and C test program the tests build once, in a
// directory TestMain removes.
var lib struct {
	once            sync.Once
	dir, prog, skip string
	err             error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if lib.dir != "" {
		os.RemoveAll(lib.dir)
	}
	os.Exit(code)
}

// buildLibrary builds libndma.so and the C test program
// testdata/collectives.c against ndma.h (once) and returns the
// directory holding both.
func buildLibrary(t *testing.T) string {
	t.Helper()
	if raceEnabled {
		t.Skip("builds the library and runs C programs: run without -race (make norace)")
	}
	lib.once.Do(func() {
		cc, err := exec.LookPath("cc")
		if err != nil {
			lib.skip = "no C compiler (cc) on PATH"
			return
		}
		gobin, err := exec.LookPath("go")
		if err != nil {
			lib.skip = "no go command on PATH to build the library with"
			return
		}
		if lib.dir, lib.err = os.MkdirTemp("", "libndma-test-"); lib.err != nil {
			return
		}
		build := exec.Command(gobin, "build", "-buildmode=c-shared", "-o", filepath.Join(lib.dir, "libndma.so"), ".")
		if out, err := build.CombinedOutput(); err != nil {
			lib.err = fmt.Errorf("go build -buildmode=c-shared: %v\n%s", err, out)
			return
		}
		lib.prog = filepath.Join(lib.dir, "collectives")
		ccmd := exec.Command(cc, "-Wall", "-Wextra", "-Werror", "-std=c11", "-D_DEFAULT_SOURCE", "-O1", "-I.", "-o", lib.prog,
			"testdata/collectives.c", "-L"+lib.dir, "-lndma", "-lpthread", "-Wl,-rpath,"+lib.dir)
		if out, err := ccmd.CombinedOutput(); err != nil {
			lib.err = fmt.Errorf("cc: %v\n%s", err, out)
		}
	})
	if lib.skip != "" {
		t.Skip(lib.skip)
	}
	if lib.err != nil {
		t.Fatal(lib.err)
	}
	return lib.dir
}

// startSwitch serves a switch with token on loopback (sealing every
// datagram under id, if not nil). Its heartbeat timeout is twice the
// default: the ranks are processes of their own, which a loaded test
// machine may starve of CPU for a second, and what these tests check is
// the C interface, not how fast a dead rank is noticed.
func startSwitch(t *testing.T, token []byte, id *secure.Identity) string {
	t.Helper()
	conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := fabric.New(fabric.Config{Token: token, HeartbeatTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	opts := fabric.ServerOptions{}
	if id != nil {
		opts = fabric.ServerOptions{Security: id, SecurityOptions: secure.Options{}}
	}
	srv, err := fabric.NewServerWith(conn, sw, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv.Addr().String()
}

// lendMemory starts n memory nodes on loopback, each lending size bytes
// to the pool of the switch at swAddr (which takes token).
func lendMemory(t *testing.T, swAddr, token string, n, size int) {
	t.Helper()
	sw, err := endpoint.ResolveAddr(swAddr)
	if err != nil {
		t.Fatal(err)
	}
	memtest.Lend(t, sw, []byte(token), n, size)
}

// TestCABI runs the C test program as 4 ranks on loopback, meeting at a
// switch that seals every datagram (each rank holds a member credential,
// as the testbed gives them): every collective of ndma.h, blocking and
// non-blocking, every data type and reduction, checked in C, then the
// errors a caller can make. It runs with every collective over the
// network (NDMA_HIERARCHY=off), and as two hosts of two ranks each
// (NDMA_HOST_ID) in two levels: shared memory inside a host, the
// leaders over the network, for the communicator from the environment
// and the one from ndma_config alike; and over the network with its
// in-network collectives sharded over two switches (NDMA_SWITCHES, and a
// comma-separated ndma_config.switch_addr).
func TestCABI(t *testing.T) {
	buildLibrary(t)
	prog := lib.prog
	for _, c := range []struct {
		name     string
		switches int
		env      func(r int) []string
	}{
		{"network", 1, func(int) []string { return []string{"NDMA_HIERARCHY=off", "NDMA_TEST_LOCAL_SIZE=1"} }},
		{"hierarchy", 1, func(r int) []string {
			return []string{"NDMA_HIERARCHY=auto", "NDMA_HOST_ID=host " + strconv.Itoa(r/2), "NDMA_TEST_LOCAL_SIZE=2"}
		}},
		{"sharded", 2, func(int) []string { return []string{"NDMA_HIERARCHY=off", "NDMA_TEST_LOCAL_SIZE=1"} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			fab := startSealedFabricK(t, "ctest", c.switches)
			env := []string{"NDMA_SWITCH=" + fab.swAddr, "NDMA_TOKEN=" + fab.token, "NDMA_JOB=ctest", "NDMA_CREDENTIAL=" + fab.credPath, "NDMA_TIMEOUT=60s"}
			if c.switches > 1 {
				env = append(env, "NDMA_SWITCHES="+strings.Join(fab.swAddrs, ","))
			}
			outs, errs := runRanksWith(t, 4, 4*time.Minute, []string{prog}, c.env, env...)
			for r := range outs {
				if errs[r] != nil || !bytes.Contains(outs[r].Bytes(), []byte("ok\n")) {
					t.Errorf("rank %d: %v\n%s", r, errs[r], outs[r].String())
				}
			}
		})
	}
}

// sealedFabric is a switch on loopback that seals every datagram (or
// several, swAddrs, swAddr the first), its token, and a member
// credential file for the ranks.
type sealedFabric struct {
	swAddr, token, credPath string
	swAddrs                 []string
}

// startSealedFabric starts a sealedFabric whose member credential is
// named name.
func startSealedFabric(t *testing.T, name string) sealedFabric {
	t.Helper()
	return startSealedFabricK(t, name, 1)
}

// startSealedFabricK is startSealedFabric with k switches under one
// authority and token.
func startSealedFabricK(t *testing.T, name string, k int) sealedFabric {
	t.Helper()
	a, err := secure.NewAuthority([]byte("libndma test fabric secret " + name))
	if err != nil {
		t.Fatal(err)
	}
	f := sealedFabric{token: "libndma test token " + name}
	for i := range k {
		swID, err := a.Issue(secure.RoleSwitch, "sw"+strconv.Itoa(i), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		f.swAddrs = append(f.swAddrs, startSwitch(t, []byte(f.token), swID))
	}
	f.swAddr = f.swAddrs[0]
	member, err := a.Issue(secure.RoleMember, name, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	cred, err := member.Encode()
	if err != nil {
		t.Fatal(err)
	}
	f.credPath = filepath.Join(t.TempDir(), "member.cred")
	if err := os.WriteFile(f.credPath, cred, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// runRanks runs cmd as ranks 0..n-1 (NDMA_RANK, NDMA_SIZE and env added
// to this process's environment), all at once, within limit, and returns
// each rank's output and exit error.
func runRanks(t *testing.T, n int, limit time.Duration, cmd []string, env ...string) ([]bytes.Buffer, []error) {
	t.Helper()
	return runRanksWith(t, n, limit, cmd, nil, env...)
}

// runRanksWith is runRanks with rankEnv(r) (if not nil) added to rank r's
// environment.
func runRanksWith(t *testing.T, n int, limit time.Duration, cmd []string, rankEnv func(r int) []string, env ...string) ([]bytes.Buffer, []error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var wg sync.WaitGroup
	outs := make([]bytes.Buffer, n)
	errs := make([]error, n)
	for r := range n {
		c := exec.CommandContext(ctx, cmd[0], cmd[1:]...)
		c.Env = append(append(os.Environ(), "NDMA_RANK="+strconv.Itoa(r), "NDMA_SIZE="+strconv.Itoa(n)), env...)
		if rankEnv != nil {
			c.Env = append(c.Env, rankEnv(r)...)
		}
		c.Stdout, c.Stderr = &outs[r], &outs[r]
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = c.Run()
		}()
	}
	wg.Wait()
	return outs, errs
}

// python is the interpreter the Python package is tested with: Debian's,
// whose python3-numpy, python3-pytest and python3-torch .ci/run installs.
const python = "/usr/bin/python3"

// TestPython runs the Python package's tests (python/tests) against the
// library built here and a switch on loopback. Without numpy and pytest
// it skips, unless NDMA_REQUIRE_PYTHON=1 (as CI sets) makes that a
// failure.
func TestPython(t *testing.T) {
	dir := buildLibrary(t)
	if err := exec.Command(python, "-c", "import numpy, pytest").Run(); err != nil {
		if os.Getenv("NDMA_REQUIRE_PYTHON") == "1" {
			t.Fatalf("%s cannot import numpy and pytest (apt install python3-numpy python3-pytest): %v", python, err)
		}
		t.Skipf("%s cannot import numpy and pytest: %v", python, err)
	}
	token := "libndma python test token"
	swAddr := startSwitch(t, []byte(token), nil)
	// Two memory nodes of 16 MiB for the pool tests (regions, optimizer
	// offload).
	lendMemory(t, swAddr, token, 2, 16<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "../python/tests")
	// Over the network (each rank alone in its communicator's view of
	// this host) unless a test sets NDMA_HIERARCHY=auto.
	cmd.Env = append(os.Environ(), "NDMA_LIB="+filepath.Join(dir, "libndma.so"), "NDMA_TEST_SWITCH="+swAddr, "NDMA_TEST_TOKEN="+token, "NDMA_INSECURE=1",
		"NDMA_HIERARCHY=off", "NDMA_TEST_LOCAL_SIZE=1")
	out, err := cmd.CombinedOutput()
	t.Logf("pytest:\n%s", out)
	if err != nil {
		t.Fatalf("pytest: %v", err)
	}
	if bytes.Contains(out, []byte("skipped")) && os.Getenv("NDMA_REQUIRE_PYTHON") == "1" {
		t.Fatalf("pytest skipped tests, and NDMA_REQUIRE_PYTHON=1")
	}
}

// TestExampleC builds examples/c/allreduce.c against the library and runs
// it as 2 ranks, so that the example the benchmarks cite keeps working.
func TestExampleC(t *testing.T) {
	dir := buildLibrary(t)
	prog := filepath.Join(dir, "example-allreduce")
	cc := exec.Command("cc", "-Wall", "-Wextra", "-Werror", "-O2", "-I.", "-o", prog, "../examples/c/allreduce.c",
		"-L"+dir, "-lndma", "-lpthread", "-Wl,-rpath,"+dir)
	if out, err := cc.CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	token := "libndma example token"
	swAddr := startSwitch(t, []byte(token), nil)
	outs, errs := runRanks(t, 2, 2*time.Minute, []string{prog, "100003", "3"}, "NDMA_SWITCH="+swAddr,
		"NDMA_TOKEN="+token, "NDMA_JOB=example", "NDMA_INSECURE=1")
	for r := range outs {
		if errs[r] != nil {
			t.Errorf("rank %d: %v\n%s", r, errs[r], outs[r].String())
		}
	}
	if !bytes.Contains(outs[0].Bytes(), []byte("allreduce 100000 bytes, 2 ranks:")) {
		t.Errorf("rank 0 printed no result:\n%s", outs[0].String())
	}
}
