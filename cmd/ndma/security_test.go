package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ndma/ndma/daemon/memd"
	"github.com/ndma/ndma/secure"
)

// executeBoth runs the ndma command line args as execute does and
// returns what it wrote on standard output and on standard error.
func executeBoth(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	rootCmd.SetErr(&errb)
	defer rootCmd.SetErr(nil)
	err = executeContext(t, context.Background(), &out, args...)
	return out.String(), errb.String(), err
}

// TestKeygen: keygen writes a random token of secure.TokenBytes bytes in
// hex to a new file of mode 0600 (whatever the umask), keeps an existing
// file unless --force, writes to standard output with -o -, and the file
// it writes is one the switch accepts as --token-file.
func TestKeygen(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "fabric.key")
	if _, err := execute(t, "keygen"); err == nil || !strings.Contains(err.Error(), "-o: give the file") {
		t.Errorf("keygen without -o: %v", err)
	}
	_, stderr, err := executeBoth(t, "keygen", "-o", file)
	if err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	checkToken := func(what string, b []byte) {
		t.Helper()
		line := strings.TrimSuffix(string(b), "\n")
		if raw, err := hex.DecodeString(line); err != nil || len(raw) != secure.TokenBytes || !strings.HasSuffix(string(b), "\n") || strings.Count(string(b), "\n") != 1 {
			t.Errorf("%s: %q, want %d bytes in hex and a newline", what, b, secure.TokenBytes)
		}
	}
	checkToken("file", first)
	checkMode := func() {
		t.Helper()
		if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("mode %v, %v; want 0600", fi.Mode(), err)
		}
	}
	checkMode()
	if strings.Contains(stderr, strings.TrimSpace(string(first))) || !strings.Contains(stderr, "--token-file "+file) {
		t.Errorf("keygen's message %q shows the token or does not say how to use it", stderr)
	}

	if _, err := execute(t, "keygen", "-o", file); err == nil || !strings.Contains(err.Error(), "exists: keeping it (--force replaces it)") {
		t.Errorf("keygen over an existing file: %v", err)
	}
	if b, _ := os.ReadFile(file); !bytes.Equal(b, first) {
		t.Error("keygen without --force changed the existing file")
	}
	// --force replaces it, and a file that had lost its privacy gets 0600.
	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := executeBoth(t, "keygen", "-o", file, "--force"); err != nil {
		t.Fatal(err)
	}
	second, _ := os.ReadFile(file)
	checkToken("forced file", second)
	checkMode()
	if bytes.Equal(first, second) {
		t.Error("keygen --force wrote the same token again")
	}
	out, err := execute(t, "keygen", "-o", "-")
	if err != nil {
		t.Fatal(err)
	}
	checkToken("stdout", []byte(out))

	// The switch takes it.
	t.Setenv(tokenEnv, "")
	if out, err := executeCanceled(t, "switch", "--listen", "127.0.0.1:0", "--insecure", "--token-file", file); err != nil || strings.Contains(out, strings.TrimSpace(string(second))) {
		t.Errorf("switch --token-file from keygen: %v, output %q", err, out)
	}
}

// TestSecureByDefault: without a credential and without --insecure every
// daemon and client refuses to start, saying how to make credentials
// (ndma fabric init) and naming --insecure; a credential needs the token
// too; --insecure with a credential is an error; --insecure runs them,
// with a warning saying what anyone on the network can do (and that
// nothing is authenticated without a token); --token on the command line
// is warned of; a token file others may read is refused.
func TestSecureByDefault(t *testing.T) {
	t.Setenv(tokenEnv, string(testToken))
	t.Setenv(credentialEnv, "")
	addr := tokenSwitch(t, string(testToken))
	dir := t.TempDir()
	daemons := [][]string{
		{"switch", "--listen", "127.0.0.1:0"},
		{"memd", "--listen", "127.0.0.1:0", "--size", "64KiB", "--switch", addr},
		{"memd", "--listen", "127.0.0.1:0", "--size", "64KiB"},
		{"stord", "--listen", "127.0.0.1:0", "--dir", filepath.Join(dir, "s0"), "--switch", addr},
		{"storgw", "--listen", "127.0.0.1:0", "--switch", addr},
	}
	clients := [][]string{
		{"stat", "--switch", addr, "--interval", "0"},
		{"pool", "ls", "--switch", addr},
		{"pool", "create", "--switch", addr, "--size", "4KiB"},
		{"vol", "ls", "--switch", addr},
		{"vol", "create", "v", "--size", "4MiB", "--switch", addr},
		{"bench", "pool", "--switch", addr},
		{"bench", "vol", "--switch", addr},
		{"bench", "rw", "--server", addr, "--key", "0x1"},
	}
	for _, args := range append(slices.Clone(daemons), clients...) {
		_, err := executeCanceled(t, args...)
		if !errors.Is(err, errNoCredential) || !strings.Contains(err.Error(), "ndma fabric init DIR") || !strings.Contains(err.Error(), "--insecure") {
			t.Errorf("%q without a credential: %v, want errNoCredential saying how to make one and naming --insecure", args, err)
		}
	}

	// A credential, but no token.
	secret := fabricSecret(t)
	swCred := issueCredential(t, secret, "switch", "sw0")
	t.Setenv(tokenEnv, "")
	if _, err := executeCanceled(t, "switch", "--listen", "127.0.0.1:0", "--credential", swCred); !errors.Is(err, errNoToken) {
		t.Errorf("switch with a credential and no token: %v, want errNoToken", err)
	}
	// A credential issued under the token as authority secret (which
	// every process holding the token could then do).
	tokenAuth, err := secure.NewAuthority(testToken)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := tokenAuth.Issue(secure.RoleSwitch, "sw0", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := forged.Encode()
	if err != nil {
		t.Fatal(err)
	}
	forgedCred := filepath.Join(dir, "under-token.cred")
	if err := os.WriteFile(forgedCred, fb, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(tokenEnv, string(testToken))
	if _, err := executeCanceled(t, "switch", "--listen", "127.0.0.1:0", "--credential", forgedCred); err == nil || !strings.Contains(err.Error(), "issued under the fabric token") {
		t.Errorf("switch with a credential issued under the token: %v, want it refused", err)
	}
	t.Setenv(tokenEnv, "")
	// --insecure and a credential.
	if _, err := executeCanceled(t, "switch", "--listen", "127.0.0.1:0", "--insecure", "--credential", swCred); err == nil || !strings.Contains(err.Error(), "--insecure and --credential") {
		t.Errorf("switch --insecure --credential: %v, want an error", err)
	}
	t.Setenv(credentialEnv, swCred)
	if _, err := executeCanceled(t, "switch", "--listen", "127.0.0.1:0", "--insecure"); err == nil || !strings.Contains(err.Error(), "$"+credentialEnv) {
		t.Errorf("switch --insecure with $%s: %v, want an error", credentialEnv, err)
	}
	t.Setenv(credentialEnv, "")

	// --insecure: a loud warning, which says whether control messages are
	// still authenticated.
	const unsealed = "insecure (--insecure): datagrams are not sealed: anyone who can capture this fabric's traffic reads region keys and data"
	out, err := executeCanceled(t, "switch", "--listen", "127.0.0.1:0", "--insecure")
	if err != nil || !strings.Contains(out, "level=WARN msg=\"switchd: "+unsealed) || !strings.Contains(out, "nothing is authenticated") ||
		!strings.Contains(out, "switchd: running without authentication: anyone who can send to 127.0.0.1:") {
		t.Errorf("switch --insecure: %v, output %q; want the warnings", err, out)
	}
	out, err = executeCanceled(t, "memd", "--listen", "127.0.0.1:0", "--size", "64KiB", "--insecure")
	if err != nil || !strings.Contains(out, "level=WARN msg=\"memd: "+unsealed) {
		t.Errorf("memd --insecure without --switch: %v, output %q; want it to run, with the warning", err, out)
	}
	t.Setenv(tokenEnv, string(testToken))
	out, err = executeCanceled(t, "memd", "--listen", "127.0.0.1:0", "--size", "64KiB", "--switch", addr, "--insecure")
	if err != nil || !strings.Contains(out, "memd: "+unsealed) || !strings.Contains(out, "still authenticated with the fabric token") || strings.Contains(out, "nothing is authenticated") {
		t.Errorf("memd --insecure with a token: %v, output %q; want the warning, control messages authenticated", err, out)
	}
	stdout, stderr, err := executeBoth(t, "pool", "ls", "--switch", addr, "--insecure", "--json")
	if err != nil || !strings.Contains(stderr, "ndma: warning: "+unsealed) {
		t.Errorf("pool ls --insecure: %v, stdout %q, stderr %q; want a warning", err, stdout, stderr)
	}
	if _, err := execute(t, "bench", "pool", "--insecure"); err == nil || !strings.Contains(err.Error(), "--insecure: only with --switch") {
		t.Errorf("bench pool --insecure without --switch: %v", err)
	}
	if _, err := executeCanceled(t, "memd", "--listen", "127.0.0.1:0", "--size", "64KiB", "--insecure", "--token", "x"); err == nil || !strings.Contains(err.Error(), "only with --switch") {
		t.Errorf("memd --token without --switch: %v", err)
	}

	// A token on the command line is visible in the process list.
	t.Setenv(tokenEnv, "")
	_, stderr, err = executeBoth(t, "pool", "ls", "--switch", addr, "--insecure", "--token", string(testToken), "--json")
	if err != nil || !strings.Contains(stderr, "ndma: warning: --token: the fabric token is on the command line") || !strings.Contains(stderr, "--token-file") || strings.Contains(stderr, string(testToken)) {
		t.Errorf("pool ls --token: %v, stderr %q; want a warning naming --token-file, without the token", err, stderr)
	}
	out, err = executeCanceled(t, "switch", "--listen", "127.0.0.1:0", "--insecure", "--token", string(testToken))
	if err != nil || !strings.Contains(out, "process list") {
		t.Errorf("switch --token: %v, output %q; want a warning", err, out)
	}

	// A token file others can read is refused by every reader.
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, append(testToken, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("token file %s is readable by others (mode 0644): chmod 600 %s", file, file)
	if _, err := executeCanceled(t, "switch", "--listen", "127.0.0.1:0", "--credential", swCred, "--token-file", file); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("switch with a 0644 token file: %v, want %q", err, want)
	}
	if _, err := execute(t, "pool", "ls", "--switch", addr, "--insecure", "--token-file", file); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("pool ls with a 0644 token file: %v, want %q", err, want)
	}
}

// TestNoSecretsInOutput: the daemons, run with a token file and a key
// file, and the pool commands write neither the fabric token nor a memory
// node's region key anywhere (stdout, logs, errors), and a region's key
// only where the user asked for it (pool create); no --help shows the
// token, even with $NDMA_TOKEN set.
func TestNoSecretsInOutput(t *testing.T) {
	const token = "n0-l0gs-t0ken-7f3a"
	const nodeKey = 0x6b3e9a17c2d45f08
	t.Setenv(tokenEnv, "")
	addr := tokenSwitch(t, token)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	keyFile := filepath.Join(dir, "keys")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, []byte(memd.FormatKey(nodeKey)+" 1MiB rwav\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	secrets := []string{token, fmt.Sprintf("%x", uint64(nodeKey)), fmt.Sprint(uint64(nodeKey))}
	check := func(what, out string, extra ...string) {
		t.Helper()
		for _, s := range append(secrets, extra...) {
			if strings.Contains(strings.ToLower(out), s) {
				t.Errorf("%s: %q in the output:\n%s", what, s, out)
			}
		}
	}
	out, err := executeCanceled(t, "switch", "--listen", "127.0.0.1:0", "--insecure", "--token-file", tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	check("switch", out)
	for _, logs := range []string{"--json-logs", "--log-level=debug"} {
		out, err = executeCanceled(t, "memd", "--listen", "127.0.0.1:0", "--key-file", keyFile, "--switch", addr, "--insecure", "--token-file", tokenFile, logs)
		if err != nil || !strings.Contains(out, "lending to the pool") || !strings.Contains(out, "region   key (in "+keyFile+")") {
			t.Fatalf("memd %s: %v, output:\n%s", logs, err, out)
		}
		check("memd "+logs, out)
	}
	// A node that keeps lending the same region (the memd commands above
	// stopped at once): pool commands, with the node's region.
	node, err := memd.Start(memd.Config{Listen: "127.0.0.1:0", KeyFile: keyFile, Switch: addr, Token: []byte(token)})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	waitAliveToken(t, addr, token, 1)
	stdout, stderr, err := executeBoth(t, "pool", "create", "--switch", addr, "--insecure", "--token-file", tokenFile, "--size", "64KiB", "--json")
	if err != nil || !strings.Contains(stdout, `"key"`) {
		t.Fatalf("pool create: %v, stdout %q", err, stdout)
	}
	check("pool create", stdout+stderr)
	var region struct {
		Region uint32 `json:"region"`
		Key    string `json:"key"`
	}
	if err := json.Unmarshal([]byte(stdout), &region); err != nil || region.Key == "" {
		t.Fatalf("pool create: %v: %q", err, stdout)
	}
	regionKey := strings.TrimPrefix(region.Key, "0x")
	for _, args := range [][]string{
		{"pool", "ls", "--json"},
		{"pool", "stat"},
		{"stat", "--interval", "0"},
		{"pool", "rm", fmt.Sprint(region.Region), "--key", memd.FormatKey(nodeKey)}, // a wrong key: refused
		{"pool", "rm", fmt.Sprint(region.Region), "--key", region.Key},
	} {
		stdout, stderr, err := executeBoth(t, append(args, "--switch", addr, "--insecure", "--token-file", tokenFile)...)
		check(strings.Join(args[:2], " "), fmt.Sprint(stdout, stderr, err), regionKey)
	}

	// No help shows the token, even as $NDMA_TOKEN's value.
	t.Setenv(tokenEnv, token)
	for _, path := range append(switchTalkers, []string{"keygen"}) {
		out, err := execute(t, append(path, "--help")...)
		if err != nil {
			t.Fatal(err)
		}
		check(strings.Join(path, " ")+" --help", out)
	}
}

// waitAliveToken waits until the pool at addr, which requires token and
// does not seal, counts n memory nodes alive.
func waitAliveToken(t *testing.T, addr, token string, n int) {
	t.Helper()
	t.Setenv(tokenEnv, token)
	defer t.Setenv(tokenEnv, "")
	waitAlive(t, addr, n, "--insecure")
}

// TestBenchRWSealed: ndma bench rw against a memory node that seals runs
// with a client credential, every datagram sealed.
func TestBenchRWSealed(t *testing.T) {
	secret := fabricSecret(t)
	memCred := issueCredential(t, secret, "memory-node", "mem0")
	cliCred := issueCredential(t, secret, "client", "bench")
	id, err := readCredential(memCred)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := memd.Start(memd.Config{Listen: "127.0.0.1:0", Size: 1 << 20, Security: id, SecurityOptions: sealOptions})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	key := fmt.Sprintf("%#x", srv.Regions()[0].Key)
	out, err := execute(t, "bench", "rw", "--server", srv.Addr().String(), "--key", key, "--region-size", "1M",
		"--credential", cliCred, "--tests", "latency", "--sizes", "8", "--iters", "20", "--json")
	if err != nil || !strings.Contains(out, `"op":"read"`) || !strings.Contains(out, `"op":"write"`) {
		t.Fatalf("bench rw with a credential: %v\n%s", err, out)
	}
	if st := srv.Stats().Security; st.Handshakes == 0 || st.Opened == 0 {
		t.Fatalf("the memory node opened nothing sealed: %+v", st)
	}
}
