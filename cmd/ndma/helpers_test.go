package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// testToken is the fabric token of the tests' switches and memory nodes,
// and $NDMA_TOKEN for every command the tests run that is given no other
// (tests of the token's sources set their own).
var testToken = []byte("cmd/ndma test token")

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main() // ndma, for a test that runs it as a process (startDaemon)
		os.Exit(0)
	}
	os.Setenv(tokenEnv, string(testToken))
	os.Exit(m.Run())
}

// execute runs the ndma command line args with every flag of every
// command back at its default first (cobra keeps flag values and their
// Changed marks from one Execute to the next), and returns what it wrote
// on standard output.
func execute(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := executeContext(t, context.Background(), &out, args...)
	return out.String(), err
}

// executeContext is execute with the command's context ctx (canceling it
// is what Ctrl-C does) and standard output going to out.
func executeContext(t *testing.T, ctx context.Context, out io.Writer, args ...string) error {
	t.Helper()
	var reset func(c *cobra.Command)
	reset = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) { resetFlag(t, f) })
		}
		c.SetContext(ctx) // cobra keeps a subcommand's context from one Execute to the next
		for _, sub := range c.Commands() {
			reset(sub)
		}
	}
	reset(rootCmd)
	rootCmd.SetOut(out)
	rootCmd.SetArgs(args)
	defer func() {
		rootCmd.SetOut(nil)
		rootCmd.SetArgs(nil)
	}()
	return rootCmd.ExecuteContext(ctx)
}

// resetFlag puts flag f back to its default, as if never given.
func resetFlag(t *testing.T, f *pflag.Flag) {
	t.Helper()
	set := func() error { return f.Value.Set(f.DefValue) }
	if sv, ok := f.Value.(pflag.SliceValue); ok && f.DefValue == "[]" {
		// Set appends to a slice (or takes "[]" for an element): empty
		// it instead.
		set = func() error { return sv.Replace(nil) }
	}
	if err := set(); err != nil {
		t.Fatalf("reset --%s: %v", f.Name, err)
	}
	f.Changed = false
}
