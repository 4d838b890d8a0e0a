package memd

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start runs a server on a free loopback port for the test's duration.
func start(t *testing.T, cfg Config) *Server {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	srv, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	return srv
}

// dial opens a client endpoint and connects it to srv.
func dial(t *testing.T, ctx context.Context, srv *Server) *endpoint.Remote {
	t.Helper()
	ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	r, err := ep.Dial(ctx, srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// End-to-end layout of the region used by TestEndToEnd.
const (
	e2eClients  = 4
	e2eOps      = 250
	e2eDataArea = 2 << 20 // per client: random writes and read-backs
	e2eMaxWrite = 1 << 20
	e2eShared   = e2eClients * e2eDataArea // shared fetch-add word; CAS counter 8 bytes on
	e2eOwn      = e2eShared + 4096         // per client: 4 KiB of CAS word, i32 and f64 arrays
	e2eI32      = 256                      // i32 elements per client
	e2eF64      = 128                      // f64 elements per client
	e2eSize     = e2eOwn + e2eClients*4096
)

// TestEndToEnd runs several clients against one server, each doing a few
// hundred mixed operations and checking every result against a local
// model: write/read-back of random sizes up to 1 MiB, fetch-add and a
// CAS-loop increment on shared words (the totals must be exact),
// compare-and-swap on a private word, and i32 and f64 vector adds.
func TestEndToEnd(t *testing.T) {
	srv := start(t, Config{Size: e2eSize})
	key := srv.Regions()[0].Key
	ctx := testCtx(t)

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		faddSum  uint64
		casIncrs uint64
	)
	for c := range e2eClients {
		r := dial(t, ctx, srv)
		wg.Go(func() {
			sum, incrs, err := e2eClient(ctx, r, key, c)
			if err != nil {
				t.Errorf("client %d: %v", c, err)
			}
			mu.Lock()
			faddSum += sum
			casIncrs += incrs
			mu.Unlock()
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	r := dial(t, ctx, srv)
	var word [16]byte
	if err := r.Read(ctx, key, e2eShared, word[:]); err != nil {
		t.Fatal(err)
	}
	if got := binary.LittleEndian.Uint64(word[:]); got != faddSum {
		t.Errorf("shared fetch-add word %d, want %d", got, faddSum)
	}
	if got := binary.LittleEndian.Uint64(word[8:]); got != casIncrs {
		t.Errorf("shared CAS counter %d, want %d", got, casIncrs)
	}
	st := srv.Stats().Node.Server
	if st.RequestsServed == 0 || st.RequestsRefused != 0 {
		t.Errorf("served %d refused %d", st.RequestsServed, st.RequestsRefused)
	}
	t.Logf("served %d requests; transport %+v", st.RequestsServed, srv.Stats().Node.Transport)
}

func e2eClient(ctx context.Context, r *endpoint.Remote, key uint64, c int) (faddSum, casIncrs uint64, err error) {
	rng := rand.New(rand.NewPCG(uint64(c), 0x5eed))
	data := uint64(c) * e2eDataArea
	own := uint64(e2eOwn + c*4096)
	casAddr, i32Addr, f64Addr := own, own+8, own+8+4*e2eI32
	var (
		casVal uint64
		i32s   [e2eI32]int32
		f64s   [e2eF64]float64
		buf    = make([]byte, e2eMaxWrite)
		back   = make([]byte, e2eMaxWrite)
	)
	for op := range e2eOps {
		switch rng.IntN(6) {
		case 0: // write and read back
			n := 1 + rng.IntN(1<<(1+rng.IntN(20))) // log-uniform up to 1 MiB
			at := uint64(rng.IntN(e2eDataArea - n + 1))
			for i := range buf[:n] {
				buf[i] = byte(rng.Uint32())
			}
			if err := r.Write(ctx, key, data+at, buf[:n]); err != nil {
				return 0, 0, err
			}
			if err := r.Read(ctx, key, data+at, back[:n]); err != nil {
				return 0, 0, err
			}
			if !bytes.Equal(buf[:n], back[:n]) {
				return 0, 0, fmt.Errorf("op %d: read back %d bytes at %d differ", op, n, at)
			}
		case 1: // fetch-add on the shared word
			d := rng.Uint64() >> 8
			if _, err := r.FetchAdd(ctx, key, e2eShared, d); err != nil {
				return 0, 0, err
			}
			faddSum += d
		case 2: // CAS-loop increment of the shared counter
			var cur uint64
			for {
				old, err := r.CompareAndSwap(ctx, key, e2eShared+8, cur, cur+1)
				if err != nil {
					return 0, 0, err
				}
				if old == cur {
					break
				}
				cur = old
			}
			casIncrs++
		case 3: // CAS on the private word: one that fails, one that swaps
			next := rng.Uint64()
			if old, err := r.CompareAndSwap(ctx, key, casAddr, casVal+1, next); err != nil || old != casVal {
				return 0, 0, fmt.Errorf("op %d: failing CAS got old %d err %v, want %d", op, old, err, casVal)
			}
			if old, err := r.CompareAndSwap(ctx, key, casAddr, casVal, next); err != nil || old != casVal {
				return 0, 0, fmt.Errorf("op %d: CAS got old %d err %v, want %d", op, old, err, casVal)
			}
			casVal = next
		case 4: // i32 vector add over a random sub-range
			lo := rng.IntN(e2eI32)
			n := 1 + rng.IntN(e2eI32-lo)
			vec := make([]byte, 4*n)
			for i := range n {
				v := int32(rng.Uint32())
				binary.LittleEndian.PutUint32(vec[4*i:], uint32(v))
				i32s[lo+i] += v
			}
			if err := r.Apply(ctx, key, i32Addr+uint64(4*lo), wire.DtypeI32, wire.AluAdd, vec); err != nil {
				return 0, 0, err
			}
		case 5: // f64 vector add over a random sub-range
			lo := rng.IntN(e2eF64)
			n := 1 + rng.IntN(e2eF64-lo)
			vec := make([]byte, 8*n)
			for i := range n {
				v := rng.NormFloat64() * 1e3
				binary.LittleEndian.PutUint64(vec[8*i:], math.Float64bits(v))
				f64s[lo+i] += v
			}
			if err := r.Apply(ctx, key, f64Addr+uint64(8*lo), wire.DtypeF64, wire.AluAdd, vec); err != nil {
				return 0, 0, err
			}
		}
	}
	// The vectors must hold exactly the locally computed sums: each
	// client's arrays are its own, so the additions happen in the same
	// order at both ends.
	got := make([]byte, 4*e2eI32+8*e2eF64)
	if err := r.Read(ctx, key, i32Addr, got); err != nil {
		return 0, 0, err
	}
	for i, want := range i32s {
		if v := int32(binary.LittleEndian.Uint32(got[4*i:])); v != want {
			return 0, 0, fmt.Errorf("i32[%d] = %d, want %d", i, v, want)
		}
	}
	for i, want := range f64s {
		if v := math.Float64frombits(binary.LittleEndian.Uint64(got[4*e2eI32+8*i:])); v != want {
			return 0, 0, fmt.Errorf("f64[%d] = %v, want %v", i, v, want)
		}
	}
	return faddSum, casIncrs, nil
}

// TestRefusals checks that every kind of refusal reaches the client as
// the right wire.Status, through errors.Is, and is counted.
func TestRefusals(t *testing.T) {
	const size = 4096
	srv := start(t, Config{Size: size})
	ro := start(t, Config{Size: size, Perm: wire.PermRead})
	ctx := testCtx(t)
	r, rr := dial(t, ctx, srv), dial(t, ctx, ro)
	key, roKey := srv.Regions()[0].Key, ro.Regions()[0].Key
	buf := make([]byte, 16)

	for _, tc := range []struct {
		name string
		do   func() error
		want wire.Status
	}{
		{"bad key", func() error { return r.Read(ctx, key^1, 0, buf) }, wire.StatusBadKey},
		{"write past end", func() error { return r.Write(ctx, key, size-8, buf) }, wire.StatusOutOfBounds},
		{"read past end", func() error { return r.Read(ctx, key, size, buf[:1]) }, wire.StatusOutOfBounds},
		{"misaligned CAS", func() error { _, err := r.CompareAndSwap(ctx, key, 3, 0, 1); return err }, wire.StatusMisaligned},
		{"misaligned fetch-add", func() error { _, err := r.FetchAdd(ctx, key, 12, 1); return err }, wire.StatusMisaligned},
		{"misaligned vector", func() error { return r.Apply(ctx, key, 2, wire.DtypeI32, wire.AluAdd, buf) }, wire.StatusMisaligned},
		{"ALU prod", func() error { return r.Apply(ctx, key, 0, wire.DtypeF32, wire.AluProd, buf) }, wire.StatusUnknownOp},
		{"unknown ALU", func() error { return r.Apply(ctx, key, 0, wire.DtypeI64, wire.Alu(99), buf) }, wire.StatusUnknownOp},
		{"write to read-only", func() error { return rr.Write(ctx, roKey, 0, buf) }, wire.StatusPermission},
		{"atomic on read-only", func() error { _, err := rr.FetchAdd(ctx, roKey, 0, 1); return err }, wire.StatusPermission},
	} {
		err := tc.do()
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
			continue
		}
		if _, ok := errors.AsType[*endpoint.OpError](err); !ok {
			t.Errorf("%s: %T is not an *endpoint.OpError", tc.name, err)
		}
	}
	if err := rr.Read(ctx, roKey, 0, buf); err != nil {
		t.Errorf("read from read-only region: %v", err)
	}
	if got := srv.Stats().Node.Server.RequestsRefused; got != 8 {
		t.Errorf("server refused %d requests, want 8", got)
	}
	if got := ro.Stats().Node.Server.RequestsRefused; got != 2 {
		t.Errorf("read-only server refused %d requests, want 2", got)
	}
}
