package bench

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
)

// startPoolProcs starts `ndma switch` and cfg.Nodes `ndma memd --switch`
// (unsealed, --insecure under cfg.Token, as the in-process pool runs)
// from cfg.Binary on loopback, each its own process, as deployed, and
// waits until the switch has every node. It returns the switch's address,
// the first node's address and the key of its region outside the pool
// (the direct READ baseline), and
// a function that stops the processes.
func startPoolProcs(ctx context.Context, cfg *PoolConfig) (stop func(), sw, node string, key uint64, err error) {
	g, err := newProcGroup("ndma-bench-pool")
	if err != nil {
		return nil, "", "", 0, err
	}
	fail := func(err error) (func(), string, string, uint64, error) {
		g.stop()
		return nil, "", "", 0, err
	}
	tokenFile := filepath.Join(g.dir, "token")
	if err := os.WriteFile(tokenFile, append(cfg.Token, '\n'), 0o600); err != nil {
		return fail(err)
	}
	swPort, err := freeUDPPort()
	if err != nil {
		return fail(err)
	}
	sw = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), swPort).String()
	mtu := strconv.Itoa(cfg.MTU)
	if err := g.start("switch", cfg.Binary, "switch", "--listen", sw, "--insecure", "--token-file", tokenFile, "--mtu", mtu); err != nil {
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
		keys := filepath.Join(g.dir, fmt.Sprintf("m%d.keys", i))
		// The first region is lent to the pool; the second, outside it,
		// takes the direct READs.
		if err := os.WriteFile(keys, fmt.Appendf(nil, "%#x %d rwav\n%#x %d r\n", lentKey+uint64(i), cfg.NodeSize, directKey+uint64(i), max(cfg.Size, 64)), 0o600); err != nil {
			return fail(err)
		}
		if err := g.start(fmt.Sprintf("memd%d", i), cfg.Binary, "memd", "--listen", addr, "--key-file", keys, "--mtu", mtu,
			"--switch", sw, "--insecure", "--token-file", tokenFile); err != nil {
			return fail(err)
		}
		if i == 0 {
			node = addr
		}
	}
	if err := waitPoolNodes(ctx, sw, cfg.Nodes, cfg.MTU, cfg.fabric(), g.dir); err != nil {
		return fail(err)
	}
	return g.stop, sw, node, directKey, nil
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
