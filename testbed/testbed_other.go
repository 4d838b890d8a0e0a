//go:build !linux

package testbed

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"runtime"
)

// errOS is what every operation returns outside Linux.
var errOS = fmt.Errorf("testbed: %w; this is %s", ErrUnsupported, runtime.GOOS)

// Check reports that a testbed needs Linux (ErrUnsupported).
func Check(ctx context.Context, prefix string) error { return errOS }

// Up reports that a testbed needs Linux (ErrUnsupported).
func Up(ctx context.Context, cfg Config) (*State, error) { return nil, errOS }

// Down reports that a testbed needs Linux (ErrUnsupported).
func Down(ctx context.Context, prefix string) error { return errOS }

// DownAt reports that a testbed needs Linux (ErrUnsupported).
func DownAt(ctx context.Context, root, prefix string) error { return errOS }

// Status reports that a testbed needs Linux (ErrUnsupported).
func Status(prefix string) (*State, error) { return nil, errOS }

// StatusAt reports that a testbed needs Linux (ErrUnsupported).
func StatusAt(root, prefix string) (*State, error) { return nil, errOS }

// Run reports that a testbed needs Linux (ErrUnsupported).
func Run(ctx context.Context, st *State, cmd []string, out io.Writer) error { return errOS }

// RunWith reports that a testbed needs Linux (ErrUnsupported).
func RunWith(ctx context.Context, st *State, cmd []string, out io.Writer, opts RunOptions) error {
	return errOS
}

// SchedulingApart reports false outside Linux, where no testbed runs.
func (st *State) SchedulingApart() (string, bool) { return "", false }

// MPICommand reports that a testbed needs Linux (ErrUnsupported).
func MPICommand(ctx context.Context, st *State, c MPIConfig) (*exec.Cmd, func(), error) {
	return nil, func() {}, errOS
}
