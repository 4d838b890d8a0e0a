package memd

import (
	"context"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio"
)

// TestLendToPool: a memory node started with Switch lends its region to
// the switch's pool (the switch lists it, alive, with the region's size),
// and once it stops, the switch marks it dead.
func TestLendToPool(t *testing.T) {
	token := []byte("lend")
	conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := fabric.New(fabric.Config{Token: token, HeartbeatTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	fsrv := fabric.NewServer(conn, sw, nil)
	defer fsrv.Close()
	addr := fsrv.Addr().String()

	srv, err := Start(Config{Listen: "127.0.0.1:0", Size: 1 << 20, Switch: addr, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wait := func(want string, ok func([]fabric.PoolNodeInfo) bool) {
		t.Helper()
		for {
			ps, err := cli.PoolStat(ctx, addr, endpoint.FabricOptions{Token: token})
			nodes := ps.Nodes
			if err != nil {
				t.Fatal(err)
			}
			if ok(nodes) {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("%s: nodes %+v", want, nodes)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	wait("the node lent its region", func(n []fabric.PoolNodeInfo) bool {
		return len(n) == 1 && n[0].Alive && n[0].Capacity == 1<<20 && n[0].Addr == srv.Addr()
	})
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	wait("the stopped node is dead", func(n []fabric.PoolNodeInfo) bool { return len(n) == 1 && !n[0].Alive })
}
