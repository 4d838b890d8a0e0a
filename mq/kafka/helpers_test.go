package kafka

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/ndma/ndma/daemon/memd"
	"github.com/ndma/ndma/daemon/switchd"
	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/mq"
	"github.com/ndma/ndma/pool"
)

// testLayout is the layout of the topics tests make: small segments, so
// that a topic fits a 4 MiB memory node.
var testLayout = mq.Layout{SegmentBytes: 64 << 10, Segments: 4, MaxBatch: 16 << 10, Groups: 4}

// startCatalog runs a switch and a memory node on loopback UDP and
// makes a catalog of 8 topics in the pool.
func startCatalog(t testing.TB) *mq.Catalog {
	t.Helper()
	token := []byte("kafka test token")
	sw, err := switchd.Start(switchd.Config{Listen: "127.0.0.1:0", Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sw.Close() })
	swAddr := sw.Addr().String()
	mn, err := memd.Start(memd.Config{Listen: "127.0.0.1:0", Size: 8 << 20, Switch: swAddr, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mn.Close() })
	ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	pc, err := pool.New(ep, swAddr, pool.Options{Fabric: endpoint.FabricOptions{Token: token}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for { // until the memory node has lent its memory
		cat, err := mq.CreateCatalog(ctx, pc, mq.CatalogOptions{Slots: 8, NoMirror: true}) // one memory node
		if err == nil {
			return cat
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startServer serves cat on a loopback port and returns its address.
func startServer(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	if cfg.Topic == (mq.Layout{}) {
		cfg.Topic = testLayout
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(l) }()
	t.Cleanup(func() { s.Close() })
	return s, l.Addr().String()
}

// testCtx is a context that ends with the test, or after 60 s.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
