package endpoint

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ndma/ndma/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func listen(t *testing.T) *Endpoint {
	t.Helper()
	ep, err := Listen("127.0.0.1:0", Config{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	return ep
}

// TestUDPOneSided exercises every operation between two endpoints over
// loopback UDP, one of them exposing a registered region.
func TestUDPOneSided(t *testing.T) {
	srv, cli := listen(t), listen(t)
	mem := make([]byte, 1<<20)
	key, err := srv.Register(mem, wire.PermAll, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := cli.Dial(ctx, srv.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 300000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := r.Write(ctx, key, 1000, data); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if err := r.Read(ctx, key, 1000, got); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: %v", err)
	}
	if old, err := r.FetchAdd(ctx, key, 8, 5); err != nil || old != 0 {
		t.Fatalf("fadd %d %v", old, err)
	}
	if old, err := r.CompareAndSwap(ctx, key, 8, 5, 9); err != nil || old != 5 {
		t.Fatalf("cas %d %v", old, err)
	}
	if old, err := r.CompareAndSwap(ctx, key, 8, 5, 11); err != nil || old != 9 {
		t.Fatalf("failed cas %d %v", old, err)
	}
	vec := make([]byte, 16)
	vec[0], vec[8] = 3, 4
	if err := r.Apply(ctx, key, 8, wire.DtypeI64, wire.AluAdd, vec); err != nil {
		t.Fatal(err)
	}
	srv.Locked(func() {
		if mem[8] != 12 || mem[16] != 4 {
			t.Errorf("vector add: %d %d", mem[8], mem[16])
		}
	})
	// Refusals come back as typed errors.
	if err := r.Read(ctx, key^1, 0, got[:8]); !errors.Is(err, wire.StatusBadKey) {
		t.Fatalf("bad key: %v", err)
	}
	if err := r.Write(ctx, key, 1<<20-4, got[:8]); !errors.Is(err, wire.StatusOutOfBounds) {
		t.Fatalf("oob: %v", err)
	}
	if _, err := r.FetchAdd(ctx, key, 3, 1); !errors.Is(err, wire.StatusMisaligned) {
		t.Fatalf("misaligned: %v", err)
	}
	var oe *OpError
	if err := r.Apply(ctx, key, 0, wire.DtypeF32, wire.AluProd, vec); !errors.As(err, &oe) || !errors.Is(err, wire.StatusUnknownOp) {
		t.Fatalf("prod: %v", err)
	}
}

// TestUDPAtomicContention: N endpoints × M fetch-adds must sum exactly.
func TestUDPAtomicContention(t *testing.T) {
	srv := listen(t)
	mem := make([]byte, 64)
	key, _ := srv.Register(mem, wire.PermAll, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n, m = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		cli := listen(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := cli.Remote(srv.LocalAddr())
			for j := 0; j < m; j++ {
				if _, err := r.FetchAdd(ctx, key, 0, 1); err != nil {
					errs <- err
					return
				}
				// CAS-increment of a second word: retry until it lands.
				for {
					var cur [8]byte
					if err := r.Read(ctx, key, 8, cur[:]); err != nil {
						errs <- err
						return
					}
					v := uint64(cur[0]) | uint64(cur[1])<<8 | uint64(cur[2])<<16
					old, err := r.CompareAndSwap(ctx, key, 8, v, v+1)
					if err != nil {
						errs <- err
						return
					}
					if old == v {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	srv.Locked(func() {
		got := uint64(mem[0]) | uint64(mem[1])<<8 | uint64(mem[2])<<16
		cas := uint64(mem[8]) | uint64(mem[9])<<8 | uint64(mem[10])<<16
		if got != n*m || cas != n*m {
			t.Fatalf("fetch-add sum %d, cas sum %d, want %d", got, cas, n*m)
		}
	})
}

// TestDialDeadPeer: dialing an address where nobody answers fails within
// the context deadline, and Close fails outstanding ops.
func TestDialDeadPeer(t *testing.T) {
	cli := listen(t)
	dead := listen(t)
	addr := dead.LocalAddr().String()
	dead.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := cli.Dial(ctx, addr)
	if err == nil || !errors.Is(err, ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("dial took %v", time.Since(start))
	}
	op := &Op{Kind: KindNop, Peer: dead.LocalAddr()}
	if err := cli.Start(op, nil); err != nil {
		t.Fatal(err)
	}
	cli.Close()
	<-op.Done()
	if !errors.Is(op.Err, ErrClosed) {
		t.Fatalf("after close: %v", op.Err)
	}
}

// TestResolveAddr: an address may name its host (localhost resolves
// without a network) or give an IP literal; a missing host or port is an
// error naming the address.
func TestResolveAddr(t *testing.T) {
	for _, c := range []struct {
		in, want string
	}{
		{"127.0.0.1:7471", "127.0.0.1:7471"},
		{"[::1]:7471", "[::1]:7471"},
	} {
		got, err := ResolveAddr(c.in)
		if err != nil || got.String() != c.want {
			t.Errorf("ResolveAddr(%q) = %v, %v; want %s", c.in, got, err, c.want)
		}
	}
	if got, err := ResolveAddr("localhost:7471"); err != nil || !got.Addr().IsLoopback() || got.Port() != 7471 || got.Addr().Is4In6() {
		t.Errorf("ResolveAddr(localhost:7471) = %v, %v; want a loopback address, port 7471, not 4-in-6", got, err)
	}
	for _, bad := range []string{"7471", ":7471", "localhost"} {
		if _, err := ResolveAddr(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("ResolveAddr(%q): %v, want an error naming it", bad, err)
		}
	}
}
