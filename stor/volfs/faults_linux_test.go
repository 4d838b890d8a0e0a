package volfs

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/stor"
)

// testLogger logs to the test's output with STOR_DEBUG set (none
// otherwise).
func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("STOR_DEBUG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// liveFabric is a switch and storage nodes on loopback UDP that a test
// can kill (close at once, as a SIGKILL stops their datagrams) and start
// again at the same addresses and directories.
type liveFabric struct {
	t     *testing.T
	sw    string
	fab   endpoint.FabricOptions
	srv   *fabric.Server
	dirs  []string
	nodes []*stor.Node
	eps   []*endpoint.Endpoint
}

func newLiveFabric(t *testing.T, n int) *liveFabric {
	f := &liveFabric{t: t, sw: "127.0.0.1:0", fab: endpoint.FabricOptions{Token: testToken},
		dirs: make([]string, n), nodes: make([]*stor.Node, n), eps: make([]*endpoint.Endpoint, n)}
	f.startSwitch()
	for i := range n {
		f.dirs[i] = t.TempDir()
		f.startNode(i)
	}
	t.Cleanup(func() {
		for i := range f.nodes {
			f.killNode(i)
		}
		f.killSwitch()
	})
	return f
}

func (f *liveFabric) startSwitch() {
	f.t.Helper()
	var conn *netio.UDPConn
	var err error
	for try := 0; try < 50; try++ { // the port of the switch that was killed
		if conn, err = netio.ListenUDP(f.sw, netio.UDPConfig{}); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		f.t.Fatal(err)
	}
	s, err := fabric.New(fabric.Config{Token: testToken})
	if err != nil {
		f.t.Fatal(err)
	}
	f.srv = fabric.NewServer(conn, s, nil)
	f.sw = conn.LocalAddr().String()
}

func (f *liveFabric) killSwitch() {
	if f.srv != nil {
		f.srv.Close()
		f.srv = nil
	}
}

func (f *liveFabric) startNode(i int) {
	f.t.Helper()
	ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
	if err != nil {
		f.t.Fatal(err)
	}
	node, err := stor.NewNode(ep, stor.NodeConfig{Dir: f.dirs[i], ID: i, Switch: f.sw, Fabric: f.fab, Logger: testLogger(f.t)})
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := node.Start(ctx); err != nil {
		f.t.Fatalf("node %d start: %v", i, err)
	}
	f.nodes[i], f.eps[i] = node, ep
}

// killNode cuts node i off at once (its endpoint first, so that nothing
// more leaves it), then releases what it held.
func (f *liveFabric) killNode(i int) {
	if f.nodes[i] == nil {
		return
	}
	f.eps[i].Close()
	f.nodes[i].Close()
	f.nodes[i], f.eps[i] = nil, nil
}

// TestFioVerifyThroughFaults: fio writes and verifies (crc32c) files on
// ext4 on a loop device on a mounted three-copy volume while a storage
// node is killed and started again and then the switch is: fio finishes
// with no error, and fsck finds the filesystem clean.
func TestFioVerifyThroughFaults(t *testing.T) {
	if os.Getenv("STOR_FIO") == "" {
		t.Skip("kills a storage node and the switch under a mounted ext4 for a minute (root, fio): STOR_FIO=1 runs it")
	}
	need(t, "losetup", "mkfs.ext4", "fsck.ext4", "mount", "umount", "fio")
	f := newLiveFabric(t, 3)
	ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{OpTimeout: stor.IOTimeout}, endpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	c := stor.NewClient(ep, f.sw, stor.ClientOptions{Fabric: f.fab})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.Create(ctx, stor.VolumeSpec{Name: "fio", Size: 64 << 20, Extent: 1 << 20, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	v, err := c.Open(ctx, "fio", stor.OpenOptions{Write: true, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	fuseDir, mnt := t.TempDir(), t.TempDir()
	m, err := Mount(fuseDir, v, Options{Logger: testLogger(t)})
	if err != nil {
		t.Skipf("FUSE mount refused here: %v", err)
	}
	defer m.Unmount(3 * time.Second)
	dev := run(t, "losetup", "--find", "--show", filepath.Join(fuseDir, "fio"))
	defer exec.Command("losetup", "-d", dev).Run()
	run(t, "mkfs.ext4", "-q", "-F", dev)
	run(t, "mount", dev, mnt)
	mounted := true
	defer func() {
		if mounted {
			exec.Command("umount", mnt).Run()
		}
	}()

	fio := exec.Command("fio", "--name=faults", "--directory="+mnt, "--rw=randwrite", "--bs=4k", "--size=24m",
		"--ioengine=psync", "--fsync=16", "--verify=crc32c", "--verify_fatal=1", "--do_verify=1", "--numjobs=2",
		"--group_reporting", "--output-format=terse", "--verify_state_save=0")
	fio.Dir = t.TempDir() // what fio writes beside its jobs stays out of the tree
	out := &strings.Builder{}
	fio.Stdout, fio.Stderr = out, out
	if err := fio.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fio.Wait() }()
	// The faults, one after the other, while fio writes.
	start := time.Now()
	faults := 0
	step := func(d time.Duration, what string, do func()) {
		select {
		case err := <-done:
			done <- err
			return
		case <-time.After(d):
		}
		t.Logf("%v: %s", time.Since(start).Round(time.Millisecond), what)
		do()
		faults++
	}
	step(2*time.Second, "storage node 2 killed", func() { f.killNode(2) })
	step(3*time.Second, "storage node 2 started again", func() { f.startNode(2) })
	step(3*time.Second, "switch killed", f.killSwitch)
	step(2*time.Second, "switch started again", f.startSwitch)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("fio: %v\n%s", err, out)
		}
	case <-time.After(3 * time.Minute):
		fio.Process.Kill()
		t.Fatalf("fio did not finish in 3 minutes\n%s", out)
	}
	t.Logf("fio finished after %v", time.Since(start).Round(time.Millisecond))
	if faults < 4 {
		t.Fatalf("fio finished before the faults did (%d of 4): make its job larger", faults)
	}
	if strings.Contains(out.String(), "verify:") || strings.Contains(out.String(), "bad magic") {
		t.Fatalf("fio reported a verify error:\n%s", out)
	}
	run(t, "umount", mnt)
	mounted = false
	if fsck, err := exec.Command("fsck.ext4", "-f", "-n", dev).CombinedOutput(); err != nil {
		t.Fatalf("fsck: %v\n%s", err, fsck)
	}
	if _, err := os.Stat(fuseDir); err != nil {
		t.Fatal(err)
	}
}
