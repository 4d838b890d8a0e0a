package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

// procGroup is the processes a benchmark starts on loopback (switch,
// memory nodes, owners, peers' servers), each logging to a file in a
// temporary directory that stop removes.
type procGroup struct {
	dir   string
	procs []*exec.Cmd
	names []string
}

func newProcGroup(prefix string) (*procGroup, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, err
	}
	return &procGroup{dir: dir}, nil
}

// start runs bin with args as the process called name.
func (g *procGroup) start(name, bin string, args ...string) error {
	log, err := os.Create(filepath.Join(g.dir, name+".log"))
	if err != nil {
		return err
	}
	defer log.Close()
	c := exec.Command(bin, args...)
	c.Stdout, c.Stderr = log, log
	if err := c.Start(); err != nil {
		return fmt.Errorf("bench: starting %s: %w", name, err)
	}
	g.procs = append(g.procs, c)
	g.names = append(g.names, name)
	return nil
}

// run runs bin with args to its end (a command such as ndma kv create).
func (g *procGroup) run(ctx context.Context, name, bin string, args ...string) error {
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("bench: %s: %w: %s", name, err, bytes.TrimSpace(out))
	}
	return nil
}

// stop ends every process (SIGTERM, then SIGKILL after 5 s) and removes
// the directory.
func (g *procGroup) stop() {
	for _, p := range g.procs {
		_ = p.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range g.procs {
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = p.Process.Kill()
			<-done
		}
	}
	os.RemoveAll(g.dir)
}

// cpu returns each process's CPU time so far (user and system), by
// name; a process whose /proc entry cannot be read is left out.
func (g *procGroup) cpu() map[string]time.Duration {
	m := make(map[string]time.Duration, len(g.procs))
	for i, p := range g.procs {
		if self, _, err := procCPU(strconv.Itoa(p.Process.Pid)); err == nil {
			m[g.names[i]] = time.Duration(self * float64(time.Second))
		}
	}
	return m
}

// fabricProcs is a switch and its memory nodes started by startFabric.
type fabricProcs struct {
	sw        string // the switch's address
	tokenFile string // the fabric's token
}

// args are the flags that join a process of the ndma binary to the
// fabric.
func (f fabricProcs) args() []string {
	return []string{"--switch", f.sw, "--insecure", "--token-file", f.tokenFile}
}

// startFabric starts `ndma switch` and nodes `ndma memd` of nodeSize
// bytes each from bin as processes of g on loopback, unsealed
// (--insecure) under token, and waits until the switch has every node.
func startFabric(ctx context.Context, g *procGroup, bin string, mtu, nodes int, nodeSize uint64, token []byte) (fabricProcs, error) {
	f := fabricProcs{tokenFile: filepath.Join(g.dir, "token")}
	if err := os.WriteFile(f.tokenFile, append(token, '\n'), 0o600); err != nil {
		return f, err
	}
	port, err := freeUDPPort()
	if err != nil {
		return f, err
	}
	f.sw = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port).String()
	m := strconv.Itoa(mtu)
	if err := g.start("switch", bin, "switch", "--listen", f.sw, "--insecure", "--token-file", f.tokenFile, "--mtu", m); err != nil {
		return f, err
	}
	for i := range nodes {
		if err := g.start(fmt.Sprintf("memd%d", i), bin, append([]string{"memd", "--listen", "127.0.0.1:0",
			"--size", strconv.FormatUint(nodeSize, 10), "--mtu", m}, f.args()...)...); err != nil {
			return f, err
		}
	}
	return f, waitPoolNodes(ctx, f.sw, nodes, mtu, endpoint.FabricOptions{Token: token}, g.dir)
}

// waitPoolNodes waits until the switch sw has n live memory nodes.
func waitPoolNodes(ctx context.Context, sw string, n, mtu int, fab endpoint.FabricOptions, logs string) error {
	ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{Transport: transport.Config{MTU: mtu}}, endpoint.Options{})
	if err != nil {
		return err
	}
	defer ep.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := ep.PoolStat(sctx, sw, fab)
		cancel()
		alive := 0
		for _, nd := range st.Nodes {
			if nd.Alive {
				alive++
			}
		}
		if err == nil && alive == n {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return errors.Join(fmt.Errorf("bench: %d of %d memory node processes joined the pool (logs in %s)", alive, n, logs), err, ctx.Err())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
