package memd

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/memnode/durable"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/wire/ctrl"
)

// freeUDPPort is a loopback address whose UDP port was free a moment
// ago (a restarted node must come back at its address).
func freeUDPPort(t *testing.T) string {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().String()
}

// TestDurableRestart writes a region with one copy on a durable node,
// stops the node and starts it again on its directory: every byte reads
// back and the switch says the region is whole. A second node on the
// same directory, or one of another size, is refused.
func TestDurableRestart(t *testing.T) {
	token := []byte("durable")
	conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := fabric.New(fabric.Config{Token: token, HeartbeatTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	fsrv := fabric.NewServer(conn, sw, nil)
	defer fsrv.Close()
	swAddr := fsrv.Addr().String()
	cfg := Config{Listen: freeUDPPort(t), Size: 1 << 20, Switch: swAddr, Token: token, Dir: t.TempDir(), Sync: durable.Sync{Every: 10 * time.Millisecond}}
	srv, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Start(cfg); !errors.Is(err, durable.ErrLocked) {
		t.Fatalf("a second node on the directory: %v, want ErrLocked", err)
	}

	ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	pc, err := pool.New(ep, swAddr, pool.Options{Fabric: endpoint.FabricOptions{Token: token}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := pc.Alloc(ctx, 256<<10, pool.AllocOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte("durable memory node "), int(r.Size())/20+1)[:r.Size()]
	if _, err := r.WriteAtContext(ctx, want, 0); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	bad := cfg
	bad.Size = 2 << 20
	if _, err := Start(bad); !errors.Is(err, durable.ErrSize) {
		t.Fatalf("another size on the directory: %v, want ErrSize", err)
	}
	if srv, err = Start(cfg); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	got := make([]byte, len(want))
	for {
		_, err := r.ReadAtContext(ctx, got, 0)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("reading after the restart: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the region reads back other bytes after the restart")
	}
	ps, err := ep.PoolStat(ctx, swAddr, endpoint.FabricOptions{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	if len(ps.Regions) != 1 || ps.Regions[0].Health != ctrl.HealthOK {
		t.Fatalf("pool stat after the restart: %+v", ps.Regions)
	}
}
