package testbed

// Removing a testbed: its daemons, namespaces and state directory.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
)

// Down removes the testbed with this prefix whose state is in
// DefaultStateDir(); see DownAt.
func Down(ctx context.Context, prefix string) error {
	return DownAt(ctx, DefaultStateDir(), prefix)
}

// DownAt removes the testbed with this prefix whose state lives under
// root (Config.StateDir): it ends the daemons the state file lists (by pid,
// checking their start time) and every process in a namespace named with
// the prefix (`ip netns pids`), with SIGTERM and, after a grace period,
// SIGKILL; it deletes every such namespace (`ip netns list`), which takes
// the bridge and veth pairs with it, and removes the state directory. So
// it cleans up after a crash and without the state file, and touches
// nothing whose name lacks the prefix. It is idempotent: with nothing to
// remove it does nothing and returns nil.
func DownAt(ctx context.Context, root, prefix string) error {
	if err := ValidatePrefix(prefix); err != nil {
		return fmt.Errorf("testbed: prefix: %w", err)
	}
	if err := checkTools(); err != nil {
		return err
	}
	var errs []error
	pids := make(map[int]uint64)
	st, err := loadState(root, prefix)
	switch {
	case err == nil:
		for _, d := range st.Daemons {
			pids[d.PID] = d.Start
		}
	case !errors.Is(err, fs.ErrNotExist):
		// A damaged state file: the scan below still finds the
		// namespaces and the processes in them.
		errs = append(errs, fmt.Errorf("testbed: state file: %w", err))
	}
	names, err := listNamespaces(ctx, prefix)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, ns := range names {
		nsPids, err := netnsPids(ctx, ns)
		if err != nil {
			errs = append(errs, err)
		}
		for _, pid := range nsPids {
			if _, ok := pids[pid]; !ok {
				pids[pid] = 0
			}
		}
	}
	if err := killProcesses(ctx, pids); err != nil {
		errs = append(errs, fmt.Errorf("testbed: %w", err))
	}
	// Hosts first, the switch last: a half-removed testbed still has its
	// switch namespace, which Up treats as "in use".
	slices.SortFunc(names, func(a, b string) int {
		return boolCmp(strings.HasSuffix(a, "-sw"), strings.HasSuffix(b, "-sw"))
	})
	for _, ns := range names {
		if _, err := command(ctx, "", "ip", "netns", "del", ns); err != nil {
			if still, lerr := listNamespaces(ctx, prefix); lerr != nil || slices.Contains(still, ns) {
				errs = append(errs, fmt.Errorf("testbed: %w", err))
			}
		}
	}
	if len(errs) == 0 {
		// Kept when something failed: the state file names what is
		// left for the next Down.
		if err := os.RemoveAll(stateDir(root, prefix)); err != nil {
			errs = append(errs, fmt.Errorf("testbed: state directory: %w", err))
		}
	}
	return errors.Join(errs...)
}

// boolCmp orders false before true.
func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	default:
		return -1
	}
}
