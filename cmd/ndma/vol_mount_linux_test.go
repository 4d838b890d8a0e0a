package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/stor"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// needFUSE skips the test unless it runs as root with /dev/fuse.
func needFUSE(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (mount)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no FUSE here: %v", err)
	}
}

// startStor starts an in-process sealed fabric, a switch and n storage
// nodes, each with its credential, creates a volume of 8 MiB in 1 MiB
// extents named name on them, and returns the switch's address and a
// client of it; the test's end closes them. The commands the test runs
// get a member credential of the same fabric and scope (the volume's
// owner) in $NDMA_CREDENTIAL.
func startStor(t *testing.T, n int, name string) (string, *stor.Client) {
	t.Helper()
	a, cred := testAuthority(t, secure.RoleMember)
	t.Setenv(credentialEnv, cred)
	conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := fabric.New(fabric.Config{Token: testToken, Transport: transport.Config{MTU: transport.DefaultMTU - wire.TagLen}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := fabric.NewServerWith(conn, sw, fabric.ServerOptions{Security: issueIdentity(t, a, secure.RoleSwitch, "switch"), SecurityOptions: sealOptions})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	addr := srv.Addr().String()
	fab := endpoint.FabricOptions{Token: testToken}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range n {
		ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpointOptions(issueIdentity(t, a, secure.RoleMember, "stor/storage-"+strconv.Itoa(i))))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ep.Close() })
		node, err := stor.NewNode(ep, stor.NodeConfig{Dir: t.TempDir(), ID: i, Switch: addr, Fabric: fab})
		if err != nil {
			t.Fatal(err)
		}
		if err := node.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { node.Close() })
	}
	ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpointOptions(issueIdentity(t, a, secure.RoleMember, "client-0/writer")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	c := stor.NewClient(ep, addr, stor.ClientOptions{Fabric: fab})
	if _, err := c.Create(ctx, stor.VolumeSpec{Name: name, Size: 8 << 20, Extent: 1 << 20, Replicas: n}); err != nil {
		t.Fatal(err)
	}
	return addr, c
}

// lockedBuf is standard error of a command the test runs in the
// background.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startVolMount runs `ndma vol mount` with args in the background, with
// $NOTIFY_SOCKET set to a socket of the test's; it returns once the
// command said READY=1 there. stop cancels the command (as SIGTERM does)
// and returns its error once it has returned.
func startVolMount(t *testing.T, args ...string) (logs *lockedBuf, notify *net.UnixConn, stop func() error) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "notify")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { notify.Close() })
	t.Setenv("NOTIFY_SOCKET", sock)
	logs = &lockedBuf{}
	rootCmd.SetErr(logs)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- executeContext(t, ctx, &lockedBuf{}, append([]string{"vol", "mount"}, args...)...) }()
	var once sync.Once
	var exitErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case exitErr = <-errc:
			case <-time.After(30 * time.Second):
				t.Fatalf("vol mount still runs 30s after it was told to stop:\n%s", logs.String())
			}
			rootCmd.SetErr(nil)
		})
		return exitErr
	}
	t.Cleanup(func() { stop() })
	got := make(chan string, 1)
	go func() {
		buf := make([]byte, 256)
		n, err := notify.Read(buf)
		if err != nil {
			close(got)
			return
		}
		got <- string(buf[:n])
	}()
	select {
	case msg, ok := <-got:
		if !ok || msg != "READY=1" {
			t.Fatalf("$NOTIFY_SOCKET got %q, want READY=1:\n%s", msg, logs.String())
		}
	case err := <-errc:
		t.Fatalf("vol mount returned before it was ready: %v\n%s", err, logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("vol mount not ready in 30s:\n%s", logs.String())
	}
	return logs, notify, stop
}

// TestVolMountReady mounts a volume with --ready-file and $NOTIFY_SOCKET:
// when READY=1 comes, the ready file holds the file's path and the file is
// there, of the volume's size; a ready file an earlier run left is not
// taken for this one's. Stopped, the command says STOPPING=1, removes the
// ready file, unmounts and gives the lease back, and its log says so.
func TestVolMountReady(t *testing.T) {
	needFUSE(t)
	sw, c := startStor(t, 3, "data")
	dir, ready := t.TempDir(), filepath.Join(t.TempDir(), "data.ready")
	if err := os.WriteFile(ready, []byte("left by an earlier run\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	logs, notify, stop := startVolMount(t, "data", dir, "--switch", sw, "--ready-file", ready)
	path := filepath.Join(dir, "data")
	b, err := os.ReadFile(ready)
	if err != nil || string(b) != path+"\n" {
		t.Fatalf("ready file: %q, %v; want %q", b, err, path+"\n")
	}
	st, err := os.Stat(path)
	if err != nil || st.Size() != 8<<20 {
		t.Fatalf("the volume's file: %v, %v", st, err)
	}
	if err := os.WriteFile(path, []byte("hello"), 0); err == nil {
		t.Error("a write that truncates the volume's file succeeded")
	}
	if err := os.Remove(path); err == nil {
		t.Error("the volume's file was removed")
	}
	if err := stop(); err != nil {
		t.Fatalf("vol mount: %v\n%s", err, logs.String())
	}
	if _, err := os.Stat(ready); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ready file after shutdown: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the volume's file after shutdown: %v (still mounted?)", err)
	}
	notify.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 256)
	if n, err := notify.Read(buf); err != nil || string(buf[:n]) != "STOPPING=1" {
		t.Errorf("$NOTIFY_SOCKET at shutdown: %q, %v; want STOPPING=1", buf[:n], err)
	}
	for _, want := range []string{"msg=mounted", "msg=unmounting", `msg="volume flushed and closed"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log has no %s:\n%s", want, logs.String())
		}
	}
	leaseFree(t, c, "data")
}

// TestVolMountBusyShutdown stops a mount whose file is held open (as by an
// attached loop device): the command still returns promptly, detaching
// the mount lazily, says so, and gives the lease back.
func TestVolMountBusyShutdown(t *testing.T) {
	needFUSE(t)
	sw, c := startStor(t, 1, "busy")
	dir := t.TempDir()
	logs, _, stop := startVolMount(t, "busy", dir, "--switch", sw, "--lease", "30s")
	held, err := os.OpenFile(filepath.Join(dir, "busy"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := stop(); err != nil {
		t.Fatalf("vol mount: %v\n%s", err, logs.String())
	}
	if !strings.Contains(logs.String(), "detached lazily") {
		t.Errorf("the log does not say the mount was detached lazily:\n%s", logs.String())
	}
	if _, err := held.ReadAt(make([]byte, 512), 0); err == nil {
		t.Error("the holder still reads the volume after shutdown")
	}
	// With a 30s lease, a writer that kept it would refuse this one.
	leaseFree(t, c, "busy")
}

// leaseFree checks that volume name can be opened for writing: nobody
// holds its lease.
func leaseFree(t *testing.T, c *stor.Client, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := c.Open(ctx, name, stor.OpenOptions{Write: true})
	if err != nil {
		t.Fatalf("open %s for writing after the mount ended: %v", name, err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
}
