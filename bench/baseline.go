package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// udpPingPong measures the round trip of a size-byte datagram to an echo
// goroutine over loopback, one datagram in flight: the floor any
// UDP-based protocol's latency is compared with.
func udpPingPong(ctx context.Context, size, iters, warmup int) (Result, error) {
	srv, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return Result{}, fmt.Errorf("bench: udp baseline: %w", err)
	}
	echoDone := make(chan struct{})
	go func() {
		defer close(echoDone)
		buf := make([]byte, maxUDPPayload)
		for {
			n, from, err := srv.ReadFromUDPAddrPort(buf)
			if err != nil {
				return // closed
			}
			if _, err := srv.WriteToUDPAddrPort(buf[:n], from); err != nil {
				return
			}
		}
	}()
	defer func() { srv.Close(); <-echoDone }()
	cli, err := net.DialUDP("udp4", nil, srv.LocalAddr().(*net.UDPAddr))
	if err != nil {
		return Result{}, fmt.Errorf("bench: udp baseline: %w", err)
	}
	defer cli.Close()
	for _, c := range []*net.UDPConn{srv, cli} {
		// Best effort: the defaults suffice for one datagram in flight.
		_ = c.SetReadBuffer(4 << 20)
		_ = c.SetWriteBuffer(4 << 20)
	}
	out := make([]byte, size)
	in := make([]byte, maxUDPPayload)
	once := func() error {
		if _, err := cli.Write(out); err != nil {
			return err
		}
		if err := cli.SetReadDeadline(time.Now().Add(2 * time.Second)); err != nil {
			return err
		}
		n, err := cli.Read(in)
		if err != nil {
			return err
		}
		if n != size {
			return fmt.Errorf("echo of %d bytes, want %d", n, size)
		}
		return nil
	}
	for range warmup {
		if err := once(); err != nil {
			return Result{}, fmt.Errorf("bench: udp baseline %s warm-up: %w", FormatSize(size), err)
		}
	}
	samples := make([]time.Duration, iters)
	cpu0 := rusageCPU()
	for i := range samples {
		if err := ctx.Err(); err != nil {
			return Result{}, err
		}
		t0 := time.Now()
		if err := once(); err != nil {
			return Result{}, fmt.Errorf("bench: udp baseline %s: %w", FormatSize(size), err)
		}
		samples[i] = time.Since(t0)
	}
	cpu := cpuPerOp(cpu0, iters)
	p50, p99 := percentiles(samples)
	return Result{Kind: Latency, Op: OpUDPPingPong, Size: size, Iters: iters, P50: p50, P99: p99, CPU: cpu}, nil
}

// tcpStream measures the goodput of one kernel TCP connection over
// loopback: iters writes of size bytes, timed from the first write until
// the receiver has read the last byte. The receiver reads into a 4 MiB
// buffer.
func tcpStream(ctx context.Context, size, iters int) (Result, error) {
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return Result{}, fmt.Errorf("bench: tcp baseline: %w", err)
	}
	defer ln.Close()
	type recvResult struct {
		n   int64
		end time.Time
		err error
	}
	recvDone := make(chan recvResult, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			recvDone <- recvResult{err: err}
			return
		}
		defer c.Close()
		buf := make([]byte, 4<<20)
		var n int64
		for {
			k, err := c.Read(buf)
			n += int64(k)
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				recvDone <- recvResult{n: n, end: time.Now(), err: err}
				return
			}
		}
	}()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp4", ln.Addr().String())
	if err != nil {
		return Result{}, fmt.Errorf("bench: tcp baseline: %w", err)
	}
	c := conn.(*net.TCPConn)
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	buf := make([]byte, size)
	t0 := time.Now()
	for range iters {
		if _, err := c.Write(buf); err != nil {
			c.Close()
			<-recvDone
			return Result{}, fmt.Errorf("bench: tcp baseline %s: %w", FormatSize(size), err)
		}
	}
	if err := c.CloseWrite(); err != nil {
		c.Close()
		<-recvDone
		return Result{}, fmt.Errorf("bench: tcp baseline: %w", err)
	}
	rr := <-recvDone
	c.Close()
	if rr.err != nil {
		return Result{}, fmt.Errorf("bench: tcp baseline %s: %w", FormatSize(size), rr.err)
	}
	if want := int64(iters) * int64(size); rr.n != want {
		return Result{}, fmt.Errorf("bench: tcp baseline %s: received %d bytes, want %d", FormatSize(size), rr.n, want)
	}
	return Result{Kind: Bandwidth, Op: OpTCPStream, Size: size, Iters: iters, Gbps: gbps(iters*size, rr.end.Sub(t0))}, nil
}
