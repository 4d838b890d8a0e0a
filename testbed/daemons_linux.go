package testbed

// Starting the testbed's daemons (switch, memory nodes, storage nodes,
// gateway) in their namespaces and waiting until each has bound its port.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// startDaemons starts `ndma switch` in the switch namespace and `ndma
// memd` in each memory-node namespace, and waits until each has bound its
// port.
func startDaemons(ctx context.Context, cfg *Config, st *State) error {
	token := randomHex(16)
	st.Token = token
	tokenFile := filepath.Join(st.Dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		return fmt.Errorf("testbed: token file: %w", err)
	}
	if !cfg.NoCredentials {
		if err := issueCredentials(st); err != nil {
			return err
		}
	}
	// credential is the --credential flag of a daemon of node n, or
	// --insecure in a testbed without credentials.
	credential := func(n *Node) []string {
		if n.Credential == "" {
			return []string{"--insecure"}
		}
		return []string{"--credential", n.Credential}
	}
	mtu := strconv.Itoa(st.DatagramMTU)
	type started struct {
		exited <-chan error
		port   int
	}
	var waits []started
	start := func(role, ns, log string, port int, args ...string) error {
		d, exited, err := startDaemon(cfg.Binary, role, ns, filepath.Join(st.Dir, log), st.GoMaxProcs, args)
		if err != nil {
			return err
		}
		st.Daemons = append(st.Daemons, d)
		waits = append(waits, started{exited, port})
		// Saved at once, so that a crash of Up leaves the pid to Down.
		if err := st.save(); err != nil {
			return fmt.Errorf("testbed: state file: %w", err)
		}
		return nil
	}
	root := append([]string{"switch", "--listen", st.SwitchAddr, "--token-file", tokenFile, "--mtu", mtu}, credential(&st.Switch)...)
	for _, l := range st.LeafAddrs {
		root = append(root, "--child", l)
	}
	if err := start("switch", st.Switch.NS, "switch.log", SwitchPort, root...); err != nil {
		return err
	}
	// The leaves of a tree (Config.Leaves), below the root, each in its
	// namespace.
	for i, l := range st.Leaves {
		if err := start("switch", l.NS, fmt.Sprintf("leaf-%d.log", i), SwitchPort,
			append([]string{"switch", "--listen", l.Service, "--token-file", tokenFile, "--mtu", mtu, "--parent", st.SwitchAddr}, credential(&st.Switch)...)...); err != nil {
			return err
		}
	}
	// More switch processes (Config.Switches), each a switch of its own
	// under the same credential, token and namespace: a sharded job's
	// stripes.
	for i, addr := range st.SwitchAddrs[min(1, len(st.SwitchAddrs)):] {
		if err := start("switch", st.Switch.NS, fmt.Sprintf("switch-%d.log", i+1), switchPort(i+1),
			append([]string{"switch", "--listen", addr, "--token-file", tokenFile, "--mtu", mtu}, credential(&st.Switch)...)...); err != nil {
			return err
		}
	}
	for i := range st.MemNodes {
		m := &st.MemNodes[i]
		// The node's region key stays in its key file (mode 0600): the
		// region is lent to the pool and reachable only through it, so
		// no client needs the key, and nothing prints it.
		keyFile := filepath.Join(st.Dir, m.Name+".keys")
		line := fmt.Sprintf("0x%016x %d rwav\n", randomKey(), cfg.MemSize)
		if err := os.WriteFile(keyFile, []byte(line), 0o600); err != nil {
			return fmt.Errorf("testbed: key file: %w", err)
		}
		if err := start("memd", m.NS, m.Name+".log", MemdPort,
			append([]string{"memd", "--listen", m.Service, "--key-file", keyFile, "--mtu", mtu,
				"--switch", st.SwitchAddr, "--token-file", tokenFile}, credential(m)...)...); err != nil {
			return err
		}
	}
	for i := range st.StorNodes {
		sn := &st.StorNodes[i]
		if err := start("stord", sn.NS, sn.Name+".log", StordPort,
			append([]string{"stord", "--listen", sn.Service, "--dir", filepath.Join(st.Dir, sn.Name+".d"), "--id", strconv.Itoa(i), "--mtu", mtu,
				"--switch", st.SwitchAddr, "--token-file", tokenFile}, credential(sn)...)...); err != nil {
			return err
		}
	}
	for i := range st.Gateways {
		g := &st.Gateways[i]
		if err := start("storgw", g.NS, g.Name+".log", StorgwPort,
			append([]string{"storgw", "--listen", g.Service, "--mtu", mtu, "--switch", st.SwitchAddr, "--token-file", tokenFile}, credential(g)...)...); err != nil {
			return err
		}
	}
	for i, w := range waits {
		if err := waitReady(ctx, st.Daemons[i], w.exited, w.port); err != nil {
			return err
		}
	}
	return st.save()
}

// startDaemon starts binary with args in namespace ns, in a process group
// of its own (so that the terminal's Ctrl-C does not reach it), with stdout
// and stderr going to logPath and GOMAXPROCS=gomaxprocs when that is not 0.
// The channel receives its exit.
//
// It stays in the caller's session, with the ranks `testbed run` starts
// from it: with the kernel's autogroup scheduling (sched_autogroup_enabled,
// the default) a session of its own (setsid) puts a daemon in a scheduling
// group of its own, and the switch then preempted the ranks at every
// packet it received instead of taking them in batches: on 8 hosts and 2
// vCPUs it used 0.81-1.01 s of CPU per 16 MiB in-network Bcast instead of
// 0.50-0.68 s, and the Bcast took 1.47-1.76 s instead of 1.42-1.63 s
// (State.SchedulingApart tells when Run's caller is in another group).
func startDaemon(binary, role, ns, logPath string, gomaxprocs int, args []string) (Daemon, <-chan error, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return Daemon{}, nil, fmt.Errorf("testbed: %s log: %w", role, err)
	}
	defer logf.Close()
	argv := append([]string{"netns", "exec", ns, binary}, args...)
	cmd := exec.Command("ip", argv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if gomaxprocs > 0 {
		cmd.Env = append(os.Environ(), "GOMAXPROCS="+strconv.Itoa(gomaxprocs))
	}
	if err := cmd.Start(); err != nil {
		return Daemon{}, nil, fmt.Errorf("testbed: starting %s in %s: %w", role, ns, err)
	}
	// `ip netns exec` execs the binary: the pid and start time are the
	// daemon's.
	d := Daemon{Role: role, NS: ns, PID: cmd.Process.Pid, Args: append([]string{binary}, args...), Log: logPath, Start: processStart(cmd.Process.Pid)}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return d, exited, nil
}

// waitReady waits until d has bound its UDP port, d exits, readyTimeout
// passes, or ctx ends.
func waitReady(ctx context.Context, d Daemon, exited <-chan error, port int) error {
	deadline := time.NewTimer(readyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		if udpBound(d.PID, port) {
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("testbed: %s in %s exited while starting (%v): %s", d.Role, d.NS, err, logTail(d.Log))
		case <-deadline.C:
			return fmt.Errorf("testbed: %s in %s did not bind UDP port %d within %v: %s", d.Role, d.NS, port, readyTimeout, logTail(d.Log))
		case <-ctx.Done():
			return fmt.Errorf("testbed: waiting for %s in %s: %w", d.Role, d.NS, ctx.Err())
		case <-tick.C:
		}
	}
}

// logTail describes the end of a daemon's log for an error message.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("log %s: %v", path, err)
	}
	b = bytes.TrimSpace(b)
	if len(b) > 1000 {
		b = b[len(b)-1000:]
	}
	if len(b) == 0 {
		return fmt.Sprintf("log %s is empty", path)
	}
	return fmt.Sprintf("log %s ends:\n%s", path, b)
}
