package bench

// The raw UDP loop: the baseline of the switch benchmark (the kernel's
// cost of moving the switch's bytes through one process, no protocol),
// and the load that measures it.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ndma/ndma/netio"
)

// udpLoopPoint measures the raw loop on the traffic of test: for
// SwitchReduce, Members senders whose datagrams the loop sends on to
// Members receivers in turn (as many bytes out as in, to as many
// receivers, as the switch's results); for SwitchReplicate, one sender
// whose datagrams the loop sends to each of Members-1 receivers. Bytes
// are the datagrams' bytes the receivers got.
func udpLoopPoint(ctx context.Context, cfg *SwitchConfig, test string) (SwitchResult, error) {
	r := SwitchResult{Test: test, Process: ProcUDPLoop, Cores: 1, Members: cfg.Members, Size: cfg.MTU}
	senders, sinks, all := cfg.Members, cfg.Members, "--all=false"
	if test == SwitchReplicate {
		senders, sinks, all = 1, cfg.Members-1, "--all"
	}
	// The receivers' goroutines end when their sockets close.
	var wg sync.WaitGroup
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
		wg.Wait()
	}()
	listen := func() (*netio.UDPConn, error) {
		c, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
		if err == nil {
			closers = append(closers, c)
		}
		return c, err
	}
	var recvBytes, recvDgrams atomic.Uint64
	sinkAddrs := make([]string, sinks)
	sinkConns := make([]*netio.UDPConn, sinks)
	for i := range sinks {
		c, err := listen()
		if err != nil {
			return r, err
		}
		sinkConns[i], sinkAddrs[i] = c, c.LocalAddr().String()
	}
	dir, err := os.MkdirTemp("", "ndma-bench-loop")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	port, err := freeUDPPort()
	if err != nil {
		return r, err
	}
	loopAddr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)
	c, err := startChild(dir, cfg.Binary, "udp-loop", 1, "bench", "udp-loop", "--listen", loopAddr.String(),
		"--to", strings.Join(sinkAddrs, ","), all)
	if err != nil {
		return r, err
	}
	defer c.stop()
	for _, sc := range sinkConns {
		wg.Go(func() { countReceived(sc, &recvBytes, &recvDgrams) })
	}
	// Each sender keeps at most this many datagrams on the way (sent and
	// not yet at every receiver), so that the loop's socket does not
	// overflow; those still missing after a 5ms stall are written off
	// as lost.
	const window, stall = 256, 5 * time.Millisecond
	conns := make([]*netio.UDPConn, senders)
	for i := range senders {
		if conns[i], err = listen(); err != nil {
			return r, err
		}
	}
	// copies is how many receivers each datagram goes to.
	copies := uint64(1)
	if test == SwitchReplicate {
		copies = uint64(sinks)
	}
	var (
		sent, lost atomic.Uint64
		stallMu    sync.Mutex
		lastRecv   uint64
		lastMove   = time.Now()
	)
	// full reports whether the senders must wait for the receivers.
	full := func() bool {
		got := recvDgrams.Load()
		if sent.Load()*copies < got+lost.Load()+uint64(window*senders)*copies {
			return false
		}
		stallMu.Lock()
		defer stallMu.Unlock()
		if got != lastRecv {
			lastRecv, lastMove = got, time.Now()
		} else if time.Since(lastMove) > stall {
			lost.Store(sent.Load()*copies - got)
			lastMove = time.Now()
		}
		return true
	}
	load := func(deadline time.Time) error {
		var lwg sync.WaitGroup
		errs := make([]error, senders)
		for i, sc := range conns {
			lwg.Go(func() {
				ds := make([]netio.Datagram, 32)
				payload := make([]byte, cfg.MTU)
				for j := range ds {
					ds[j] = netio.Datagram{Addr: loopAddr, Buf: payload}
				}
				for time.Now().Before(deadline) && ctx.Err() == nil {
					if full() {
						time.Sleep(20 * time.Microsecond)
						continue
					}
					if err := sc.WriteBatch(ds); err != nil {
						errs[i] = err
						return
					}
					sent.Add(uint64(len(ds)))
				}
			})
		}
		lwg.Wait()
		return errors.Join(errors.Join(errs...), ctx.Err())
	}
	// Warm-up: the loop has started when datagrams come back.
	wdl := time.Now().Add(5 * time.Second)
	for recvDgrams.Load() == 0 {
		if time.Now().After(wdl) {
			return r, fmt.Errorf("bench: the UDP loop forwarded nothing in 5s (its log: %s)", c.logTail())
		}
		if err := load(time.Now().Add(50 * time.Millisecond)); err != nil {
			return r, err
		}
	}
	b0, d0 := recvBytes.Load(), recvDgrams.Load()
	if err := c.measure(&r, cfg.Duration, load); err != nil {
		return r, err
	}
	r.Bytes, r.Ops = recvBytes.Load()-b0, recvDgrams.Load()-d0
	r.rates()
	return r, nil
}

// UDPLoop is the raw loop the switch benchmark measures: it reads
// datagram batches from conn and sends each datagram on — to every
// address of to when all is set, else to one address of to in turn —
// until conn is closed. A batch's datagrams are sent grouped by address,
// so that the socket's segmentation offload packs each group into one
// send, as the switch's output of a batch is.
func UDPLoop(conn netio.Conn, to []netip.AddrPort, all bool) error {
	if len(to) == 0 {
		return errors.New("bench: UDP loop: no address to send to")
	}
	ds := make([]netio.Datagram, conn.BatchSize())
	bufs := make([][]byte, len(ds))
	for i := range bufs {
		bufs[i] = make([]byte, netio.MaxDatagram)
	}
	out := make([]netio.Datagram, 0, len(ds)*len(to))
	next := 0 // the address the next datagram goes to, without all
	for {
		// Like the switch, the loop sends datagrams on from the socket's
		// own receive buffers where it can.
		k, err := netio.ReadViews(conn, ds, bufs)
		if err != nil {
			if errors.Is(err, netio.ErrClosed) {
				return nil
			}
			return err
		}
		out = out[:0]
		for j, a := range to {
			for i := range k {
				if all || (next+i)%len(to) == j {
					out = append(out, netio.Datagram{Addr: a, Buf: ds[i].Buf})
				}
			}
		}
		next = (next + k) % len(to)
		if err := conn.WriteBatch(out); err != nil {
			return err
		}
	}
}

// countReceived reads datagram batches from sc until it is closed, adding
// their bytes to bytes and their number to dgrams.
func countReceived(sc *netio.UDPConn, bytes, dgrams *atomic.Uint64) {
	ds := make([]netio.Datagram, sc.BatchSize())
	for i := range ds {
		ds[i].Buf = make([]byte, netio.MaxDatagram)
	}
	for {
		k, err := sc.ReadBatch(ds)
		if err != nil {
			return
		}
		var b uint64
		for i := range k {
			b += uint64(len(ds[i].Buf))
			ds[i].Buf = ds[i].Buf[:cap(ds[i].Buf)]
		}
		bytes.Add(b)
		dgrams.Add(uint64(k))
	}
}
