package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
)

// buildLibrary builds libndma.so and the C test program
// testdata/collectives.c against ndma.h into a temporary directory and
// returns the program's path.
func buildLibrary(t *testing.T) string {
	t.Helper()
	if raceEnabled {
		t.Skip("builds the library and runs C programs: run without -race (make norace)")
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler (cc) on PATH")
	}
	dir := t.TempDir()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to build the library with")
	}
	build := exec.Command(gobin, "build", "-buildmode=c-shared", "-o", filepath.Join(dir, "libndma.so"), ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -buildmode=c-shared: %v\n%s", err, out)
	}
	prog := filepath.Join(dir, "collectives")
	ccmd := exec.Command(cc, "-Wall", "-Wextra", "-Werror", "-std=c11", "-D_DEFAULT_SOURCE", "-O1", "-I.", "-o", prog,
		"testdata/collectives.c", "-L"+dir, "-lndma", "-lpthread", "-Wl,-rpath,"+dir)
	if out, err := ccmd.CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	return prog
}

// TestCABI runs the C test program as 4 ranks on loopback, meeting at a
// switch that seals every datagram (each rank holds a member credential,
// as the testbed gives them): every collective of ndma.h, blocking and
// non-blocking, every data type and reduction, checked in C, then the
// errors a caller can make.
func TestCABI(t *testing.T) {
	prog := buildLibrary(t)
	a, err := secure.NewAuthority([]byte("libndma test fabric secret"))
	if err != nil {
		t.Fatal(err)
	}
	swID, err := a.Issue(secure.RoleSwitch, "sw0", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	token := []byte("libndma test token")
	sw, err := fabric.New(fabric.Config{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := fabric.NewServerWith(conn, sw, fabric.ServerOptions{Security: swID, SecurityOptions: secure.Options{Encrypt: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	member, err := a.Issue(secure.RoleMember, "ctest", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	cred, err := member.Encode()
	if err != nil {
		t.Fatal(err)
	}
	credPath := filepath.Join(t.TempDir(), "member.cred")
	if err := os.WriteFile(credPath, cred, 0o600); err != nil {
		t.Fatal(err)
	}

	const size = 4
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	outs := make([]bytes.Buffer, size)
	errs := make([]error, size)
	for r := range size {
		cmd := exec.CommandContext(ctx, prog)
		cmd.Env = append(os.Environ(), "NDMA_RANK="+strconv.Itoa(r), "NDMA_SIZE="+strconv.Itoa(size),
			"NDMA_SWITCH="+srv.Addr().String(), "NDMA_TOKEN="+string(token), "NDMA_JOB=ctest",
			"NDMA_CREDENTIAL="+credPath, "NDMA_TIMEOUT=60s")
		cmd.Stdout, cmd.Stderr = &outs[r], &outs[r]
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = cmd.Run()
		}()
	}
	wg.Wait()
	for r := range size {
		if errs[r] != nil || !bytes.Contains(outs[r].Bytes(), []byte("ok\n")) {
			t.Errorf("rank %d: %v\n%s", r, errs[r], outs[r].String())
		}
	}
}
