package volfs

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/stor"
)

var testToken = []byte("volfs test token")

// fabricUp starts a switch and n storage nodes on loopback UDP.
func fabricUp(t *testing.T, n int) (sw string, fab endpoint.FabricOptions) {
	t.Helper()
	f := newLiveFabric(t, n)
	return f.sw, f.fab
}

// need skips the test unless it runs as root with /dev/fuse and the
// programs named.
func need(t *testing.T, progs ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (mount, losetup)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no FUSE here: %v", err)
	}
	for _, p := range progs {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("needs %s: %v", p, err)
		}
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestExt4OnVolume mounts a volume through FUSE, puts an ext4 on it through
// a loop device, writes files, and reads them back after remounting.
func TestExt4OnVolume(t *testing.T) {
	need(t, "losetup", "mkfs.ext4", "mount", "umount")
	sw, fab := fabricUp(t, 3)
	ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	c := stor.NewClient(ep, sw, stor.ClientOptions{Fabric: fab})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.Create(ctx, stor.VolumeSpec{Name: "fs", Size: 32 << 20, Extent: 1 << 20, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	v, err := c.Open(ctx, "fs", stor.OpenOptions{Write: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	fuseDir, mnt := t.TempDir(), t.TempDir()
	m, err := Mount(fuseDir, v, Options{})
	if err != nil {
		t.Skipf("FUSE mount refused here: %v", err)
	}
	defer m.Unmount(5 * time.Second)
	img := m.Path()
	if img != filepath.Join(fuseDir, "fs") {
		t.Fatalf("Path %q, want %q", img, filepath.Join(fuseDir, "fs"))
	}
	if st, err := os.Stat(img); err != nil || st.Size() != 32<<20 {
		t.Fatalf("volume file: %v, %v", st, err)
	}
	loop := run(t, "losetup", "--find", "--show", img)
	defer exec.Command("losetup", "-d", loop).Run()
	run(t, "mkfs.ext4", "-q", "-F", loop)
	run(t, "mount", loop, mnt)
	want := make([]byte, 3<<20)
	rand.Read(want)
	if err := os.WriteFile(filepath.Join(mnt, "blob"), want, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(mnt, "a/b"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "a/b/small"), []byte("hello, volume\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, "umount", mnt)
	// Mounted again, the files are read from the volume.
	run(t, "mount", loop, mnt)
	got, err := os.ReadFile(filepath.Join(mnt, "blob"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("blob read back: %d bytes, equal %v, %v", len(got), bytes.Equal(got, want), err)
	}
	small, err := os.ReadFile(filepath.Join(mnt, "a/b/small"))
	if err != nil || string(small) != "hello, volume\n" {
		t.Fatalf("small read back: %q, %v", small, err)
	}
	run(t, "umount", mnt)
	if out, err := exec.Command("fsck.ext4", "-n", "-f", loop).CombinedOutput(); err != nil {
		t.Fatalf("fsck: %v\n%s", err, out)
	}
	run(t, "losetup", "-d", loop)
	// The bytes are on the storage nodes, not in a cache on this host:
	// another client reads the ext4 superblock and the file's blocks.
	ep2, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ep2.Close()
	r, err := stor.NewClient(ep2, sw, stor.ClientOptions{Fabric: fab}).Open(ctx, "fs", stor.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	all := make([]byte, r.Size())
	if _, err := r.ReadAt(all, 0); err != nil {
		t.Fatal(err)
	}
	if all[1080] != 0x53 || all[1081] != 0xef {
		t.Errorf("no ext4 superblock magic in the volume: %#x %#x", all[1080], all[1081])
	}
	if !bytes.Contains(all, want[:64<<10]) || !bytes.Contains(all, want[len(want)-4096:]) {
		t.Errorf("the file's blocks are not in the volume")
	}
}
