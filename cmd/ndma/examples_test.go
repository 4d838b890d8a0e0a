package main

import (
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// fabricCommands are the commands that talk on the fabric: each seals
// under a credential unless given --insecure.
var fabricCommands = map[string]bool{"switch": true, "memd": true, "stord": true, "storgw": true, "pool": true, "stat": true, "vol": true, "mq": true}

// checkExample checks one command line of an example: it parses as an
// ndma command line, and one that talks on the fabric seals
// (--credential, or NDMA_CREDENTIAL in its block env) or says
// --insecure. A client without --switch, which takes the switch, token
// and credential from the environment, is left alone.
func checkExample(t *testing.T, where, line string, env bool) {
	t.Helper()
	line, _, _ = strings.Cut(line, " #")
	args, ok := commandArgs(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(line), "&")))
	if !ok || len(args) == 0 || !fabricCommands[args[0]] || strings.Contains(line, "testbed run") {
		return
	}
	if args[0] != "switch" && args[0] != "memd" && !strings.Contains(line, "--switch") {
		return // a client that takes the switch, token and credential from the environment
	}
	if !env && !strings.Contains(line, "--credential") && !strings.Contains(line, "--insecure") && !strings.Contains(line, "NDMA_CREDENTIAL=") {
		t.Errorf("%s: %q talks on the fabric without a credential or --insecure", where, line)
	}
	if strings.Contains(line, "$(") || strings.Contains(line, "$i") {
		return // the shell expands it first
	}
	cmd, rest, err := rootCmd.Find(args)
	if err != nil {
		t.Errorf("%s: %q: %v", where, line, err)
		return
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Errorf("%s: %q: %v", where, line, err)
	}
}

// joinContinued joins the lines of text that end with a backslash to the
// next.
func joinContinued(text string) []string {
	return strings.Split(strings.ReplaceAll(text, "\\\n", " "), "\n")
}

// TestExamplesSeal: every --help example and README command line that
// starts a daemon or client of the fabric gives it a credential or says
// --insecure, and parses.
func TestExamplesSeal(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, line := range joinContinued(c.Example) {
			checkExample(t, "ndma "+c.CommandPath()+" --help", line, false)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(rootCmd)
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range strings.Split(string(b), "```sh")[1:] {
		block, _, _ = strings.Cut(block, "```")
		env := strings.Contains(block, "export ") && strings.Contains(block, "NDMA_CREDENTIAL=")
		for _, line := range joinContinued(block) {
			checkExample(t, "README", line, env)
		}
	}
}
