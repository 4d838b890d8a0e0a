package stor

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio"
)

// TestDiskFull: a storage node whose disk fills up fails the writes it
// cannot keep, and the writer sees ErrNoSpace at its flush; the node keeps
// serving. Root only: the node's directory is a tmpfs of 256 KiB.
func TestDiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (mounts a small tmpfs)")
	}
	small := t.TempDir()
	if err := syscall.Mount("tmpfs", small, "tmpfs", 0, "size=256k"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	defer syscall.Unmount(small, syscall.MNT_DETACH)

	conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := fabric.New(fabric.Config{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	srv := fabric.NewServer(conn, sw, nil)
	defer srv.Close()
	swAddr := conn.LocalAddr().String()
	fab := endpoint.FabricOptions{Token: testToken}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var nodes []*Node
	for i, dir := range []string{t.TempDir(), small} {
		ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer ep.Close()
		n, err := NewNode(ep, NodeConfig{Dir: dir, ID: i, Switch: swAddr, Fabric: fab})
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		nodes = append(nodes, n)
	}
	cep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cep.Close()
	c := NewClient(cep, swAddr, ClientOptions{Fabric: fab})
	if _, err := c.Create(ctx, VolumeSpec{Name: "full", Size: 16 * MinExtent, Extent: MinExtent, Replicas: 2}); err != nil {
		t.Fatal(err)
	}
	v, err := c.Open(ctx, "full", OpenOptions{Write: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	data := make([]byte, 16*MinExtent) // 1 MiB: four times the small disk
	for i := range data {
		data[i] = byte(i*7 + 1)
	}
	if _, err := v.WriteAt(data, 0); err != nil {
		t.Fatalf("write: %v (a write completes when the replicas have it; the flush reports what they could not keep)", err)
	}
	err = v.Flush()
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("flush after filling node 1's disk: %v, want ErrNoSpace", err)
	}
	// The node still serves: a small write that fits goes through.
	if _, err := v.WriteAt([]byte("still here"), 0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 10)
	if _, err := v.ReadAt(got, 0); err != nil || string(got) != "still here" {
		t.Fatalf("read after the full disk: %q, %v", got, err)
	}
	if nodes[1].Stats().Writes == 0 {
		t.Errorf("node 1 applied no write")
	}
}
