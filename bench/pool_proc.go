package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/transport"
)

// startPoolProcs starts `ndma switch` and cfg.Nodes `ndma memd --switch`
// (unsealed, --insecure under cfg.Token, as the in-process pool runs)
// from cfg.Binary on loopback, each its own process, as deployed, and
// waits until the switch has every node. It returns the switch's address,
// the first node's address and the key of its region outside the pool
// (the direct READ baseline), and
// a function that stops the processes.
func startPoolProcs(ctx context.Context, cfg *PoolConfig) (stop func(), sw, node string, key uint64, err error) {
	dir, err := os.MkdirTemp("", "ndma-bench-pool")
	if err != nil {
		return nil, "", "", 0, err
	}
	var procs []*exec.Cmd
	stop = func() {
		for _, p := range procs {
			_ = p.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range procs {
			done := make(chan struct{})
			go func() { _ = p.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				_ = p.Process.Kill()
				<-done
			}
		}
		os.RemoveAll(dir)
	}
	fail := func(err error) (func(), string, string, uint64, error) {
		stop()
		return nil, "", "", 0, err
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, append(cfg.Token, '\n'), 0o600); err != nil {
		return fail(err)
	}
	start := func(name string, args ...string) error {
		log, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			return err
		}
		defer log.Close()
		c := exec.Command(cfg.Binary, args...)
		c.Stdout, c.Stderr = log, log
		if err := c.Start(); err != nil {
			return fmt.Errorf("bench: starting %s: %w", name, err)
		}
		procs = append(procs, c)
		return nil
	}
	swPort, err := freeUDPPort()
	if err != nil {
		return fail(err)
	}
	sw = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), swPort).String()
	mtu := strconv.Itoa(cfg.MTU)
	if err := start("switch", "switch", "--listen", sw, "--insecure", "--token-file", tokenFile, "--mtu", mtu); err != nil {
		return fail(err)
	}
	// memd lends its region with the lowest key.
	const lentKey, directKey = 0x6e646d61706f6f6c, 0x6e646d6178000000
	for i := range cfg.Nodes {
		port, err := freeUDPPort()
		if err != nil {
			return fail(err)
		}
		addr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port).String()
		keys := filepath.Join(dir, fmt.Sprintf("m%d.keys", i))
		// The first region is lent to the pool; the second, outside it,
		// takes the direct READs.
		if err := os.WriteFile(keys, fmt.Appendf(nil, "%#x %d rwav\n%#x %d r\n", lentKey+uint64(i), cfg.NodeSize, directKey+uint64(i), max(cfg.Size, 64)), 0o600); err != nil {
			return fail(err)
		}
		if err := start(fmt.Sprintf("memd%d", i), "memd", "--listen", addr, "--key-file", keys, "--mtu", mtu,
			"--switch", sw, "--insecure", "--token-file", tokenFile); err != nil {
			return fail(err)
		}
		if i == 0 {
			node = addr
		}
	}
	// Wait for every node to lend its memory.
	ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{Transport: transport.Config{MTU: cfg.MTU}}, endpoint.Options{})
	if err != nil {
		return fail(err)
	}
	defer ep.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := ep.PoolStat(sctx, sw, cfg.fabric())
		cancel()
		alive := 0
		for _, n := range st.Nodes {
			if n.Alive {
				alive++
			}
		}
		if err == nil && alive == cfg.Nodes {
			return stop, sw, node, directKey, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fail(errors.Join(fmt.Errorf("bench: %d of %d memory node processes joined the pool (logs in %s)", alive, cfg.Nodes, dir), err, ctx.Err()))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freeUDPPort returns a UDP port on 127.0.0.1 that was free a moment ago.
func freeUDPPort() (uint16, error) {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return uint16(c.LocalAddr().(*net.UDPAddr).Port), nil
}
