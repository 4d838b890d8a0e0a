package hostile_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndma/ndma/coll"
	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/internal/hostile"
	"github.com/ndma/ndma/pool"
)

// floodCount is the number of crafted datagrams sent at each target.
const floodCount = 100_000

// Memory bounds under the flood, in bytes, above what the process held at
// start (docs/ARCHITECTURE.md, "Tables and their bounds", adds up where
// they come from): the daemons' peak resident memory (the memory node's
// includes the 20 MiB of its regions, which the workload touches), and
// the growth of the Go heap in use of the test process, which holds the
// job's endpoints and the clients.
const (
	memdFloodRSS      = 64 << 20
	switchFloodRSS    = 48 << 20
	endpointFloodHeap = 48 << 20
)

// TestFloodDaemons aims 100,000 crafted datagrams (every kind of
// package hostile, from several source ports) at a running `ndma memd`,
// a running `ndma switch` and an endpoint of a collective job, over real
// UDP on loopback, while legitimate clients keep working: READ/WRITE to
// the memory node, a pool region through the switch, Allreduce in the
// job, each verified. The clients must see no error during or after the
// flood, and the daemons' peak resident memory must stay within its
// documented bound.
func TestFloodDaemons(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemons")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "ndma")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/ndma/ndma/cmd/ndma").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	token := filepath.Join(dir, "token")
	keys := filepath.Join(dir, "keys")
	// The first region is lent to the switch's pool, the second one is
	// read and written directly.
	const key = 0x5eed1234abcd
	write(t, token, "flood-test-token\n")
	write(t, keys, fmt.Sprintf("0x7007 4MiB rwav\n%#x 16MiB rwav\n", key))

	swAddr := freePort(t)
	sw := startDaemon(ctx, t, bin, "switch", "--listen", swAddr, "--insecure", "--token-file", token)
	mdAddr := freePort(t)
	md := startDaemon(ctx, t, bin, "memd", "--listen", mdAddr, "--key-file", keys, "--switch", swAddr, "--insecure", "--token-file", token)

	ep := listen(t)
	mem, err := ep.Dial(ctx, mdAddr)
	if err != nil {
		t.Fatal(err)
	}
	fab := endpoint.FabricOptions{Token: []byte("flood-test-token")}
	pc, err := pool.New(ep, swAddr, pool.Options{Fabric: fab})
	if err != nil {
		t.Fatal(err)
	}
	var region *pool.Region
	for deadline := time.Now().Add(20 * time.Second); ; {
		region, err = pc.Alloc(ctx, 1<<20, pool.AllocOptions{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // the memory node joins the pool once a heartbeat went through
	}
	const ranks = 3
	comms := make([]*coll.Communicator, ranks)
	eps := make([]*endpoint.Endpoint, ranks)
	var wg sync.WaitGroup
	errs := make([]error, ranks)
	for r := range ranks {
		eps[r] = listen(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = coll.New(ctx, coll.Config{Endpoint: eps[r], Rank: r, Size: ranks, Switch: swAddr, Job: "flood", Token: fab.Token})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// The legitimate workload, running until stop is closed.
	stop := make(chan struct{})
	var ops atomic.Int64
	failures := make(chan error, 16)
	fail := func(err error) {
		select {
		case failures <- err:
		default:
		}
	}
	var work sync.WaitGroup
	work.Add(2 + ranks)
	go func() {
		defer work.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		buf, back := make([]byte, 4096), make([]byte, 4096)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			for j := range buf {
				buf[j] = byte(rng.Uint32())
			}
			off := uint64(rng.UintN(16<<20-4096)) &^ 7
			if err := mem.Write(ctx, key, off, buf); err != nil {
				fail(fmt.Errorf("memd write %d: %w", i, err))
				return
			}
			if err := mem.Read(ctx, key, off, back); err != nil || !bytes.Equal(buf, back) {
				fail(fmt.Errorf("memd read %d: %v (equal %v)", i, err, bytes.Equal(buf, back)))
				return
			}
			ops.Add(1)
		}
	}()
	go func() {
		defer work.Done()
		rng := rand.New(rand.NewPCG(3, 4))
		buf, back := make([]byte, 32<<10), make([]byte, 32<<10)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			for j := range buf {
				buf[j] = byte(rng.Uint32())
			}
			off := int64(rng.UintN(1<<20-32<<10)) &^ 7
			if _, err := region.WriteAtContext(ctx, buf, off); err != nil {
				fail(fmt.Errorf("pool write %d: %w", i, err))
				return
			}
			if _, err := region.ReadAtContext(ctx, back, off); err != nil || !bytes.Equal(buf, back) {
				fail(fmt.Errorf("pool read %d: %v (equal %v)", i, err, bytes.Equal(buf, back)))
				return
			}
			ops.Add(1)
		}
	}()
	// Every rank runs the same number of Allreduces: rank 0 decides when
	// to stop and the others follow through the result's last element.
	for r := range ranks {
		go func() {
			defer work.Done()
			send, recv := make([]int64, 1024), make([]int64, 1024)
			for i := 0; ; i++ {
				for j := range send {
					send[j] = int64(i*1000 + r + j)
				}
				stopping := int64(0)
				if r == 0 {
					select {
					case <-stop:
						stopping = 1
					default:
					}
				}
				send[len(send)-1] = stopping
				if err := coll.Allreduce(ctx, comms[r], send, recv, coll.Sum); err != nil {
					fail(fmt.Errorf("rank %d allreduce %d: %w", r, i, err))
					return
				}
				for j := range len(recv) - 1 {
					if want := int64(ranks*(i*1000+j) + ranks*(ranks-1)/2); recv[j] != want {
						fail(fmt.Errorf("rank %d allreduce %d: element %d = %d, want %d", r, i, j, recv[j], want))
						return
					}
				}
				ops.Add(1)
				if recv[len(recv)-1] != 0 {
					return
				}
			}
		}()
	}

	// Memory is measured from when the workload runs (its own buffers
	// are not the flood's).
	for ops.Load() < 100 {
		select {
		case err := <-failures:
			t.Fatal(err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	mdRSS0, swRSS0 := rss(t, md.cmd, "VmRSS"), rss(t, sw.cmd, "VmRSS")
	runtime.GC()
	heap0 := heapInUse()

	// The flood: every target gets floodCount datagrams from four source
	// ports, aimed at the job's group and members.
	g := comms[0].Group().ID()
	targets := []string{mdAddr, swAddr, eps[0].LocalAddr().String()}
	before := ops.Load()
	for i, target := range targets {
		flood(t, target, hostile.Config{Seed: uint64(i + 1), Groups: []uint32{g}, Members: []uint16{0, 1, 2}})
	}
	during := ops.Load() - before
	// Keep the workload going a little after the flood, then stop it.
	for after := ops.Load(); ops.Load() < after+20; {
		select {
		case err := <-failures:
			t.Fatal(err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	close(stop)
	work.Wait()
	select {
	case err := <-failures:
		t.Fatal(err)
	default:
	}
	t.Logf("%d legitimate operations during the flood, %d in all", during, ops.Load())

	for _, d := range []struct {
		p     *daemon
		start int64
		bound int64
	}{{md, mdRSS0, memdFloodRSS}, {sw, swRSS0, switchFloodRSS}} {
		select {
		case <-d.p.done:
			t.Fatalf("%s exited during the flood", d.p.name)
		default:
		}
		peak := rss(t, d.p.cmd, "VmHWM")
		t.Logf("%s: RSS %d KiB at start, peak %d KiB", d.p.name, d.start>>10, peak>>10)
		if peak-d.start > d.bound {
			t.Errorf("%s: peak RSS grew by %d MiB under the flood, bound %d MiB", d.p.name, (peak-d.start)>>20, d.bound>>20)
		}
	}
	runtime.GC()
	grew := int64(heapInUse()) - int64(heap0)
	t.Logf("endpoints: heap in use grew by %d KiB", grew>>10)
	if grew > endpointFloodHeap {
		t.Errorf("endpoints' heap grew by %d MiB under the flood, bound %d MiB", grew>>20, endpointFloodHeap>>20)
	}
	for _, c := range comms {
		_ = c.Close(ctx)
	}
}

// flood sends floodCount crafted datagrams to target from four sockets.
func flood(t *testing.T, target string, cfg hostile.Config) {
	t.Helper()
	to, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		t.Fatal(err)
	}
	var conns []*net.UDPConn
	for range 4 {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	g := hostile.New(cfg)
	for i := range floodCount {
		if _, err := conns[i%len(conns)].WriteToUDP(g.Next(), to); err != nil && !errors.Is(err, net.ErrClosed) {
			// A full socket buffer (ENOBUFS) only loses that datagram.
			continue
		}
	}
}

// daemon is an ndma daemon run by a test.
type daemon struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited
}

// startDaemon runs `bin args...`; the test's cleanup stops it (SIGINT,
// then SIGKILL after 5 s) and prints its logs if the test failed.
func startDaemon(ctx context.Context, t *testing.T, bin string, args ...string) *daemon {
	t.Helper()
	d := &daemon{name: args[0], cmd: exec.CommandContext(ctx, bin, args...), done: make(chan struct{})}
	var logs bytes.Buffer
	d.cmd.Stdout, d.cmd.Stderr = &logs, &logs
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = d.cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(func() {
		_ = d.cmd.Process.Signal(os.Interrupt)
		select {
		case <-d.done:
		case <-time.After(5 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.done
		}
		if t.Failed() {
			t.Logf("%s logs:\n%s", d.name, logs.String())
		}
	})
	return d
}

func listen(t *testing.T) *endpoint.Endpoint {
	t.Helper()
	ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	return ep
}

func freePort(t *testing.T) string {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return netip.MustParseAddrPort(c.LocalAddr().String()).String()
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

// rss reads a memory figure (VmRSS, VmHWM) of a process, in bytes.
func rss(t *testing.T, p *exec.Cmd, field string) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, p.Process.Pid)
	return 0
}

func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}
