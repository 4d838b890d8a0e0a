package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio"
)

// switchTalkers are the commands that talk to a forwarding node's
// control plane, and so take the fabric token.
var switchTalkers = [][]string{
	{"switch"}, {"memd"}, {"stat"}, {"bench", "pool"},
	{"pool", "create"}, {"pool", "ls"}, {"pool", "rm"}, {"pool", "stat"}, {"pool", "put"}, {"pool", "get"},
}

// findCmd returns the command at path under rootCmd.
func findCmd(t *testing.T, path ...string) *cobra.Command {
	t.Helper()
	c, rest, err := rootCmd.Find(path)
	if err != nil || len(rest) != 0 || c.Name() != path[len(path)-1] {
		t.Fatalf("ndma %s: not found (%v, rest %q)", strings.Join(path, " "), err, rest)
	}
	return c
}

// TestTokenFlagsOnEveryCommand checks that every command that talks to a
// switch has --token, --token-file and --insecure, with the same help,
// which says that $NDMA_TOKEN holds the token itself.
func TestTokenFlagsOnEveryCommand(t *testing.T) {
	var ref tokenFlags
	ref.register(pflag.NewFlagSet("ref", pflag.ContinueOnError))
	for _, path := range switchTalkers {
		c := findCmd(t, path...)
		for _, name := range []string{"token", "token-file", "insecure"} {
			f := c.Flags().Lookup(name)
			if f == nil {
				f = c.PersistentFlags().Lookup(name)
			}
			if f == nil {
				f = c.InheritedFlags().Lookup(name)
			}
			if f == nil {
				t.Errorf("ndma %s: no --%s", strings.Join(path, " "), name)
				continue
			}
			if want := ref.fs.Lookup(name).Usage; f.Usage != want {
				t.Errorf("ndma %s --%s: help %q, want %q", strings.Join(path, " "), name, f.Usage, want)
			}
		}
	}
	if u := ref.fs.Lookup("token").Usage; !strings.Contains(u, "$NDMA_TOKEN, the token itself") {
		t.Errorf("--token help %q does not say $NDMA_TOKEN holds the token", u)
	}
	if u := ref.fs.Lookup("token-file").Usage; strings.Contains(u, "NDMA_TOKEN") {
		t.Errorf("--token-file help %q names $NDMA_TOKEN, which holds a token, not a file", u)
	}
}

// TestTokenResolve checks the sources of the token in order (--token,
// --token-file, $NDMA_TOKEN, none: nil) and the errors.
func TestTokenResolve(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte("from-file\r\nsecond line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\nx\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	exposed := filepath.Join(dir, "exposed")
	if err := os.WriteFile(exposed, []byte("from-exposed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(exposed, 0o644); err != nil {
		t.Fatal(err)
	}
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "NDMA_TOKEN" {
				return v
			}
			return ""
		}
	}
	for _, tc := range []struct {
		args    []string
		env     string
		want    string
		wantErr string
	}{
		{args: nil, env: ""},
		{args: nil, env: "from-env", want: "from-env"},
		{args: []string{"--token", "from-flag"}, env: "from-env", want: "from-flag"},
		{args: []string{"--token-file", file}, env: "from-env", want: "from-file"},
		{args: []string{"--insecure"}, env: "from-env", want: "from-env"},
		{args: []string{"--token", "a", "--token-file", file}, wantErr: "--token and --token-file: give one of them, not both"},
		{args: []string{"--token-file", empty}, wantErr: "is empty"},
		{args: []string{"--token-file", exposed}, wantErr: "--token-file: token file " + exposed + " is readable by others (mode 0644): chmod 600 " + exposed},
		{args: []string{"--token-file", filepath.Join(dir, "missing")}, wantErr: "--token-file: "},
		{args: []string{"--token", ""}, env: "from-env", wantErr: "--token: empty"},
	} {
		var f tokenFlags
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		f.register(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		got, err := f.resolve(env(tc.env))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q env %q: error %v, want one containing %q", tc.args, tc.env, err, tc.wantErr)
			}
			if err != nil && (strings.Contains(err.Error(), "from-") || got != nil) {
				t.Errorf("%q env %q: %q, error %v shows a token", tc.args, tc.env, got, err)
			}
			continue
		}
		if err != nil || string(got) != tc.want {
			t.Errorf("%q env %q: %q, %v; want %q", tc.args, tc.env, got, err, tc.want)
		}
	}
}

// executeCanceled runs the ndma command line args (as execute) under a
// context that has already ended, so that a daemon command starts, prints
// its address and stops at once.
func executeCanceled(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c, _, err := rootCmd.Find(args)
	if err != nil {
		t.Fatal(err)
	}
	// cobra keeps a context on the command it ran: set it here, and put
	// back one that never ends for the tests that follow.
	c.SetContext(ctx)
	defer func() {
		rootCmd.SetContext(context.Background())
		c.SetContext(context.Background())
	}()
	c.Flags().VisitAll(func(f *pflag.Flag) { resetFlag(t, f) })
	var out strings.Builder
	rootCmd.SetOut(&out)
	rootCmd.SetErr(&out)
	rootCmd.SetArgs(args)
	defer func() {
		rootCmd.SetOut(nil)
		rootCmd.SetErr(nil)
		rootCmd.SetArgs(nil)
	}()
	err = rootCmd.ExecuteContext(ctx)
	return out.String(), err
}

// tokenSwitch starts an in-process switch that requires token and
// returns its address.
func tokenSwitch(t *testing.T, token string) string {
	t.Helper()
	conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := fabric.New(fabric.Config{Token: []byte(token)})
	if err != nil {
		t.Fatal(err)
	}
	srv := fabric.NewServer(conn, sw, nil)
	t.Cleanup(func() { srv.Close() })
	return srv.Addr().String()
}

// TestTokenCommands runs commands against a switch that requires a
// token: each takes --token, --token-file and $NDMA_TOKEN, and refuses
// both flags at once.
func TestTokenCommands(t *testing.T) {
	t.Setenv("NDMA_TOKEN", "")
	const token = "s3cret"
	addr := tokenSwitch(t, token)
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stat := []string{"stat", "--switch", addr, "--insecure", "--interval", "0", "--json"}
	for _, extra := range [][]string{{"--token", token}, {"--token-file", file}} {
		if out, err := execute(t, append(stat, extra...)...); err != nil || !strings.Contains(out, `"nodes"`) {
			t.Errorf("stat %q: %v, output %q", extra, err, out)
		}
	}
	if _, err := execute(t, append(stat, "--token", token, "--token-file", file)...); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Errorf("stat with --token and --token-file: %v, want an error saying not both", err)
	}
	if _, err := execute(t, "stat", "--switch", addr, "--insecure", "--interval", "0", "--timeout", "300ms", "--token", "wrong"); err == nil {
		t.Error("stat with a wrong token succeeded")
	}
	t.Setenv("NDMA_TOKEN", token)
	if out, err := execute(t, stat...); err != nil || !strings.Contains(out, `"nodes"`) {
		t.Errorf("stat with $NDMA_TOKEN: %v, output %q", err, out)
	}
	if out, err := execute(t, "pool", "ls", "--switch", addr, "--insecure", "--json"); err != nil {
		t.Errorf("pool ls with $NDMA_TOKEN: %v, output %q", err, out)
	}
	t.Setenv("NDMA_TOKEN", "")

	// The daemons: switch and memd start with --token (and stop at once).
	out, err := executeCanceled(t, "switch", "--listen", "127.0.0.1:0", "--insecure", "--token", token)
	if err != nil || !strings.Contains(out, "listen   127.0.0.1:") {
		t.Errorf("switch --token: %v, output %q", err, out)
	}
	if _, err := executeCanceled(t, "switch", "--listen", "127.0.0.1:0", "--insecure", "--token", "a", "--token-file", file); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Errorf("switch with both token flags: %v, want an error saying not both", err)
	}
	out, err = executeCanceled(t, "memd", "--listen", "127.0.0.1:0", "--size", "64KiB", "--switch", addr, "--insecure", "--token", token)
	if err != nil || !strings.Contains(out, "listen   127.0.0.1:") {
		t.Errorf("memd --token: %v, output %q", err, out)
	}
	if _, err := executeCanceled(t, "memd", "--listen", "127.0.0.1:0", "--size", "64KiB", "--insecure", "--token", token); err == nil || !strings.Contains(err.Error(), "only with --switch") {
		t.Errorf("memd --token without --switch: %v, want an error", err)
	}
	if _, err := execute(t, "bench", "pool", "--switch", addr, "--insecure", "--token", "a", "--token-file", file); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Errorf("bench pool with both token flags: %v, want an error saying not both", err)
	}
}
