package volfs

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// memVolume is a volume in memory; fail, when set, is every call's error.
type memVolume struct {
	mu   sync.Mutex
	b    []byte
	fail error
}

func (m *memVolume) ReadAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return 0, m.fail
	}
	return copy(p, m.b[off:]), nil
}

func (m *memVolume) WriteAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return 0, m.fail
	}
	return copy(m.b[off:], p), nil
}

func (m *memVolume) Flush() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fail
}

func (m *memVolume) Size() int64 { return int64(len(m.b)) }

// logBuf is a slog text sink that tests read while the mount writes.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuf) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// mountMem mounts a 1 MiB memVolume as DIR/vol; the test's end unmounts it.
func mountMem(t *testing.T, dir string, o Options) (*Mounted, *memVolume) {
	t.Helper()
	need(t)
	v := &memVolume{b: make([]byte, 1<<20)}
	o.Name = "vol"
	m, err := mount(dir, v, "ndma:test", time.Now().UnixNano(), o)
	if err != nil {
		t.Skipf("FUSE mount refused here: %v", err)
	}
	t.Cleanup(func() {
		if _, err := m.Unmount(5 * time.Second); err != nil {
			t.Errorf("unmount at the end: %v", err)
		}
	})
	return m, v
}

// mounted reports whether dir is a mount point in this mount namespace.
func mounted(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// waitDone waits for the mount's server to stop, for up to d.
func waitDone(t *testing.T, m *Mounted, d time.Duration) {
	t.Helper()
	select {
	case <-m.Done():
	case <-time.After(d):
		t.Fatalf("the server still runs %v after the mount ended", d)
	}
}

// TestVolumeFileStays checks that the mount's one file cannot be removed,
// renamed, truncated or joined by others: each attempt fails with EPERM
// and the file is still there, of its size.
func TestVolumeFileStays(t *testing.T) {
	dir := t.TempDir()
	m, _ := mountMem(t, dir, Options{})
	p := m.Path()
	other := filepath.Join(dir, "other")
	for _, c := range []struct {
		what string
		err  error
	}{
		{"remove", os.Remove(p)},
		{"rename", os.Rename(p, other)},
		{"truncate", os.Truncate(p, 4096)},
		{"create", func() error { _, err := os.OpenFile(other, os.O_CREATE|os.O_WRONLY, 0o600); return err }()},
		{"mkdir", os.Mkdir(other, 0o700)},
		{"symlink", os.Symlink(p, other)},
		{"link", os.Link(p, other)},
		{"mknod", syscall.Mknod(other, syscall.S_IFIFO|0o600, 0)},
		{"chmod dir", os.Chmod(dir, 0o777)},
	} {
		if !errors.Is(c.err, syscall.EPERM) {
			t.Errorf("%s: %v, want EPERM", c.what, c.err)
		}
	}
	st, err := os.Stat(p)
	if err != nil || st.Size() != 1<<20 {
		t.Fatalf("the file after all that: %v, %v", st, err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != 1 || ents[0].Name() != "vol" {
		t.Fatalf("the directory holds %v (%v), want vol alone", ents, err)
	}
}

// TestUnmount checks a plain unmount of an idle mount: not lazy, the
// directory free, the server stopped.
func TestUnmount(t *testing.T) {
	dir := t.TempDir()
	m, _ := mountMem(t, dir, Options{})
	lazy, err := m.Unmount(3 * time.Second)
	if err != nil || lazy {
		t.Fatalf("Unmount: lazy %v, %v", lazy, err)
	}
	waitDone(t, m, 5*time.Second)
	if mounted(t, dir) {
		t.Fatal("still mounted")
	}
	if lazy, err := m.Unmount(time.Second); err != nil || lazy {
		t.Fatalf("Unmount again: lazy %v, %v", lazy, err)
	}
}

// TestUnmountBusy holds the file open (as an attached loop device does)
// and unmounts: Unmount gives up the plain unmount at its bound, detaches
// the mount lazily, says so, and the holder gets EIO from then on; once
// it lets go, the server stops.
func TestUnmountBusy(t *testing.T) {
	dir := t.TempDir()
	var logs logBuf
	m, _ := mountMem(t, dir, Options{Logger: logs.logger()})
	held, err := os.OpenFile(m.Path(), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if _, err := held.WriteAt([]byte("before"), 0); err != nil {
		t.Fatal(err)
	}
	type result struct {
		lazy bool
		err  error
	}
	res := make(chan result, 1)
	go func() {
		lazy, err := m.Unmount(500 * time.Millisecond)
		res <- result{lazy, err}
	}()
	var r result
	select {
	case r = <-res:
	case <-time.After(10 * time.Second):
		t.Fatal("Unmount of a busy mount did not return in 10s")
	}
	if r.err != nil || !r.lazy {
		t.Fatalf("Unmount: lazy %v, %v; want lazy", r.lazy, r.err)
	}
	if !strings.Contains(logs.String(), "detached lazily") {
		t.Errorf("the log does not say the unmount was lazy:\n%s", logs.String())
	}
	if mounted(t, dir) {
		t.Error("the directory is still a mount point")
	}
	if _, err := held.ReadAt(make([]byte, 6), 0); !errors.Is(err, syscall.EIO) {
		t.Errorf("read by the holder after the lazy unmount: %v, want EIO", err)
	}
	held.Close()
	waitDone(t, m, 10*time.Second)
}

// deadMountAt leaves at dir what a FUSE server that died leaves: a mount
// whose /dev/fuse descriptor is closed.
func deadMountAt(t *testing.T, dir string) {
	t.Helper()
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("open /dev/fuse: %v", err)
	}
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0", fd)
	if err := unix.Mount("ndma:dead", dir, "fuse.ndma", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		unix.Close(fd)
		t.Skipf("mount(2) of a FUSE file system refused here: %v", err)
	}
	unix.Close(fd)
	if _, err := os.Stat(dir); !errors.Is(err, syscall.ENOTCONN) {
		unix.Unmount(dir, unix.MNT_DETACH)
		t.Fatalf("stat of the dead mount: %v, want ENOTCONN", err)
	}
}

// TestMountCleansDeadMount mounts where a crashed server left a dead
// mount: Mount unmounts it, says so, and mounts.
func TestMountCleansDeadMount(t *testing.T) {
	need(t)
	dir := t.TempDir()
	deadMountAt(t, dir)
	var logs logBuf
	m, _ := mountMem(t, dir, Options{Logger: logs.logger()})
	if _, err := os.Stat(m.Path()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "dead mount") {
		t.Errorf("the log does not say a dead mount was cleaned:\n%s", logs.String())
	}
}

// TestIOErrorsLogged makes every call of the volume fail: the file's
// users get EIO, and the log has one line per kind for a burst, with
// offset, length and the error, and counts the rest when unmounted.
func TestIOErrorsLogged(t *testing.T) {
	dir := t.TempDir()
	var logs logBuf
	m, v := mountMem(t, dir, Options{Logger: logs.logger()})
	f, err := os.OpenFile(m.Path(), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v.mu.Lock()
	v.fail = errors.New("every replica is down")
	v.mu.Unlock()
	for range 20 {
		if _, err := f.WriteAt(make([]byte, 4096), 8192); !errors.Is(err, syscall.EIO) {
			t.Fatalf("write to a failing volume: %v, want EIO", err)
		}
	}
	if _, err := f.ReadAt(make([]byte, 4096), 4096); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read of a failing volume: %v, want EIO", err)
	}
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("fsync of a failing volume: %v, want EIO", err)
	}
	out := logs.String()
	for _, want := range []string{
		`level=WARN msg="volume write failed" offset=8192 length=4096 err="every replica is down"`,
		`level=WARN msg="volume read failed" offset=4096 length=4096 err="every replica is down"`,
		`level=WARN msg="volume fsync failed" err="every replica is down"`,
	} {
		if strings.Count(out, want) != 1 {
			t.Errorf("want one line %s in the log:\n%s", want, out)
		}
	}
	v.mu.Lock()
	v.fail = nil
	v.mu.Unlock()
	f.Close()
	if _, err := m.Unmount(3 * time.Second); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), `msg="volume write failed" err="every replica is down" more=19`) {
		t.Errorf("the log does not count the write failures left out:\n%s", logs.String())
	}
}
