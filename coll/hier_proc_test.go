package coll

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/wire"
)

// The environment of a rank process of TestHierarchyProcessCrash: the
// rank that kills itself, and the mark that the test binary runs as a
// rank.
const (
	hierChildEnv = "NDMA_TEST_HIER_CHILD"
	hierCrashEnv = "NDMA_TEST_HIER_CRASH"
)

// TestHierarchyProcessCrash: three processes of this test binary, ranks
// of one host meeting at a switch here with NDMA_HIERARCHY=auto, repeat
// an Allreduce until one is killed with SIGKILL; the two others fail
// with a *RankError naming it within their 20 s context (the switch
// would report it only after a minute: they find its process gone, a
// zombie until this test reaps it), and nothing is left in /dev/shm.
func TestHierarchyProcessCrash(t *testing.T) {
	needShm(t)
	if os.Getenv(hierChildEnv) != "" {
		t.Skip("a rank process")
	}
	conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	// The switch would report the killed rank only after a minute: the
	// others must find its process gone.
	s, err := fabric.New(fabric.Config{Token: testToken, HeartbeatTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	srv := fabric.NewServer(conn, s, nil)
	defer srv.Close()
	const n, crash = 3, 2
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmds := make([]*exec.Cmd, n)
	outs := make([]*os.File, n)
	for r := range n {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHierarchyProcessRank$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), hierChildEnv+"=1", hierCrashEnv+"="+strconv.Itoa(crash),
			"NDMA_RANK="+strconv.Itoa(r), "NDMA_SIZE="+strconv.Itoa(n), "NDMA_SWITCH="+srv.Addr().String(),
			"NDMA_JOB="+t.Name(), "NDMA_TOKEN="+string(testToken), "NDMA_INSECURE=1",
			"NDMA_HIERARCHY=auto", "NDMA_HOST_ID=one host")
		f, err := os.CreateTemp(t.TempDir(), "rank")
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr, outs[r] = f, f, f
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
	}
	for r, cmd := range cmds {
		err := cmd.Wait()
		out, _ := os.ReadFile(outs[r].Name())
		var ee *exec.ExitError
		switch {
		case r == crash && errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL:
		case r == crash:
			t.Errorf("rank %d: %v, want it killed\n%s", r, err, out)
		case err != nil:
			t.Errorf("rank %d: %v\n%s", r, err, out)
		default:
			t.Logf("rank %d:\n%s", r, out)
		}
	}
	for _, cmd := range cmds {
		left, _ := filepath.Glob(filepath.Join(shmDir, fmt.Sprintf("%s%d-*", shmPrefix, cmd.Process.Pid)))
		if len(left) > 0 {
			t.Errorf("segments left: %v", left)
		}
	}
}

// TestHierarchyProcessRank is one rank of TestHierarchyProcessCrash (it
// skips unless started by it).
func TestHierarchyProcessRank(t *testing.T) {
	if os.Getenv(hierChildEnv) == "" {
		t.Skip("runs as a rank of TestHierarchyProcessCrash")
	}
	crash, _ := strconv.Atoi(os.Getenv(hierCrashEnv))
	l, err := ParseEnv(os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := l.Communicator(ctx, ep)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if len(c.LocalRanks()) != l.Size {
		t.Fatalf("local ranks %v, want all %d", c.LocalRanks(), l.Size)
	}
	buf := make([]byte, 4096)
	for call := 0; ; call++ {
		if c.Rank() == crash && call == 50 {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		err := c.AllreduceBytes(ctx, nil, buf, wire.DtypeF32, Sum)
		if err == nil {
			continue
		}
		var re *RankError
		if !errors.As(err, &re) || re.Rank != crash {
			t.Fatalf("call %d: %v, want a RankError naming rank %d", call, err, crash)
		}
		t.Logf("call %d: %v", call, err)
		return
	}
}
