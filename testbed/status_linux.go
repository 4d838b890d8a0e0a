package testbed

// Reporting a testbed: its state file checked against the namespaces
// and processes that exist.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Status reports the testbed with this prefix whose state is in
// DefaultStateDir(); see StatusAt.
func Status(prefix string) (*State, error) {
	return StatusAt(DefaultStateDir(), prefix)
}

// StatusAt reports the testbed with this prefix whose state lives under
// root: its state file, with Present set on the namespaces that exist,
// Alive on the daemons that run, and Stray listing namespaces named with
// the prefix that the state does not list. A daemon whose process is
// gone but whose command line runs again in its namespace (started
// again by hand) is reported alive with that process (Restarted). Without a state file but with
// such namespaces (a crash), the State holds only Prefix, Dir and Stray.
// With neither, the error wraps ErrNotFound.
func StatusAt(root, prefix string) (*State, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return nil, fmt.Errorf("testbed: prefix: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	defer cancel()
	names, err := listNamespaces(ctx, prefix)
	if err != nil {
		return nil, err
	}
	st, err := loadState(root, prefix)
	if errors.Is(err, fs.ErrNotExist) {
		if len(names) == 0 {
			return nil, fmt.Errorf("testbed: %w: %q (no state file in %s and no namespaces named %s-…)", ErrNotFound, prefix, stateDir(root, prefix), prefix)
		}
		return &State{Prefix: prefix, Dir: stateDir(root, prefix), Stray: names}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("testbed: state file: %w", err)
	}
	exists := make(map[string]bool, len(names))
	for _, n := range names {
		exists[n] = true
	}
	known := make(map[string]bool)
	mark := func(n *Node) {
		n.Present = exists[n.NS]
		known[n.NS] = true
	}
	mark(&st.Switch)
	for i := range st.Hosts {
		mark(&st.Hosts[i])
	}
	for i := range st.MemNodes {
		mark(&st.MemNodes[i])
	}
	for i := range st.StorNodes {
		mark(&st.StorNodes[i])
	}
	for i := range st.Gateways {
		mark(&st.Gateways[i])
	}
	for i := range st.Leaves {
		mark(&st.Leaves[i])
	}
	st.Stray = nil
	for _, n := range names {
		if !known[n] {
			st.Stray = append(st.Stray, n)
		}
	}
	for i := range st.Daemons {
		d := &st.Daemons[i]
		if d.Alive = alive(d.PID, d.Start); !d.Alive {
			// Started again by hand (after a test killed it, say): the
			// same command line in the same namespace.
			if pid, start, ok := findDaemon(ctx, d); ok {
				d.PID, d.Start, d.Alive, d.Restarted = pid, start, true, true
			}
		}
	}
	return st, nil
}

// findDaemon looks in d's namespace for a running process with d's
// command line, and returns its pid and start time.
func findDaemon(ctx context.Context, d *Daemon) (int, uint64, bool) {
	if d.NS == "" || len(d.Args) == 0 {
		return 0, 0, false
	}
	pids, err := netnsPids(ctx, d.NS)
	if err != nil {
		return 0, 0, false
	}
	want := strings.Join(d.Args, "\x00") + "\x00"
	slices.Sort(pids)
	for _, pid := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err != nil || string(b) != want {
			continue
		}
		if ps, err := readProcStat(pid); err == nil && alive(pid, ps.start) {
			return pid, ps.start, true
		}
	}
	return 0, 0, false
}

// listNamespaces returns the network namespaces named with prefix
// (ownedNS), sorted.
func listNamespaces(ctx context.Context, prefix string) ([]string, error) {
	out, err := command(ctx, "", "ip", "netns", "list")
	if err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	var names []string
	for line := range strings.Lines(out) {
		// "name" or "name (id: 3)".
		f := strings.Fields(line)
		if len(f) > 0 && ownedNS(prefix, f[0]) {
			names = append(names, f[0])
		}
	}
	slices.Sort(names)
	return names, nil
}

// netnsPids returns the processes in namespace ns.
func netnsPids(ctx context.Context, ns string) ([]int, error) {
	out, err := command(ctx, "", "ip", "netns", "pids", ns)
	if err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	var pids []int
	for _, f := range strings.Fields(out) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}
