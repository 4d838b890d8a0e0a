package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio"
)

// TestExampleCStalled runs examples/c/allreduce as 3 ranks and stops
// rank 1 (SIGSTOP: a debugger, a suspended host) for 5 s in the middle,
// then lets it run again (SIGCONT). The other ranks fail within seconds,
// naming rank 1; rank 1, once it runs, must fail as well within a bound,
// never hang, with an error that says the switch counted it dead (not
// that the switch stopped answering).
func TestExampleCStalled(t *testing.T) {
	dir := buildLibrary(t)
	prog := filepath.Join(dir, "example-allreduce-stall")
	cc := exec.Command("cc", "-Wall", "-Wextra", "-Werror", "-O2", "-I.", "-o", prog, "../examples/c/allreduce.c",
		"-L"+dir, "-lndma", "-lpthread", "-Wl,-rpath,"+dir)
	if out, err := cc.CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	token := "libndma stall token"
	conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := fabric.New(fabric.Config{Token: []byte(token)})
	if err != nil {
		t.Fatal(err)
	}
	srv := fabric.NewServer(conn, sw, nil)
	t.Cleanup(func() { srv.Close() })
	swAddr := srv.Addr().String()
	trials := 3
	if v, err := strconv.Atoi(os.Getenv("NDMA_STALL_TRIALS")); err == nil && v > 0 {
		trials = v
	}
	for trial := range trials {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		const n = 3
		outs := make([]bytes.Buffer, n)
		cmds := make([]*exec.Cmd, n)
		for r := range n {
			c := exec.CommandContext(ctx, prog, "1048576", "100000")
			c.Env = append(os.Environ(), "NDMA_RANK="+strconv.Itoa(r), "NDMA_SIZE="+strconv.Itoa(n), "NDMA_SWITCH="+swAddr,
				"NDMA_TOKEN="+token, "NDMA_JOB=stall"+strconv.Itoa(trial), "NDMA_INSECURE=1")
			c.Stdout, c.Stderr = &outs[r], &outs[r]
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			cmds[r] = c
		}
		ended := make([]time.Time, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r, c := range cmds {
			wg.Go(func() { errs[r] = c.Wait(); ended[r] = time.Now() })
		}
		// Once the job formed (on a slow machine the ranks take a while
		// to load and join), and its ranks run collectives.
		job := "stall" + strconv.Itoa(trial)
		for !slices.ContainsFunc(srv.Groups(), func(g fabric.GroupInfo) bool { return g.Name == job }) {
			if ctx.Err() != nil {
				t.Fatalf("trial %d: the job never formed", trial)
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(500 * time.Millisecond)
		if err := cmds[1].Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		resumed := time.Now()
		if err := cmds[1].Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		cancel()
		for r := range n {
			t.Logf("trial %d rank %d: %v after the resume: %v\n%s", trial, r, ended[r].Sub(resumed).Round(time.Millisecond), errs[r], outs[r].String())
			if errs[r] == nil {
				t.Errorf("trial %d rank %d finished its calls: the stall was not noticed", trial, r)
			}
		}
		if d := ended[1].Sub(resumed); d > 15*time.Second {
			t.Errorf("trial %d: rank 1 ended %v after it resumed", trial, d)
		}
		if !bytes.Contains(outs[1].Bytes(), []byte("this rank (1) is no longer a member of the group: the switch counted it dead")) {
			t.Errorf("trial %d: rank 1's error does not say that it was counted dead:\n%s", trial, outs[1].String())
		}
	}
}
