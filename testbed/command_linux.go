package testbed

// Running ip and tc, and their errors.

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// CommandError is a failed ip or tc command.
type CommandError struct {
	Args   []string // the command line
	Input  string   // the batch it read, if any
	Output string   // what it printed
	Err    error    // how it failed (usually an *exec.ExitError)
}

func (e *CommandError) Error() string {
	msg := strings.Join(e.Args, " ")
	if e.Input != "" {
		msg += " <<" + strconv.Quote(e.Input)
	}
	if out := strings.TrimSpace(e.Output); out != "" {
		return msg + ": " + out
	}
	return fmt.Sprintf("%s: %v", msg, e.Err)
}

// Unwrap returns the cause.
func (e *CommandError) Unwrap() error { return e.Err }

// command runs name with args, and stdin as its input if not empty, and
// returns its combined output.
func command(ctx context.Context, stdin, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), &CommandError{Args: append([]string{name}, args...), Input: stdin, Output: string(out), Err: err}
	}
	return string(out), nil
}

// batch runs lines through `tool -n ns -batch -` (tool is ip or tc).
func batch(ctx context.Context, tool, ns string, lines []string) error {
	if len(lines) == 0 {
		return nil
	}
	if _, err := command(ctx, strings.Join(lines, "\n")+"\n", tool, "-n", ns, "-batch", "-"); err != nil {
		return fmt.Errorf("testbed: %w", err)
	}
	return nil
}
