package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ndma/ndma/internal/secretfile"
	"github.com/ndma/ndma/secure"
)

// issueCredential runs ndma credential issue for role and name under the
// secret in secretFile and returns the credential file's path.
func issueCredential(t *testing.T, secretFile, role, name string) string {
	t.Helper()
	file := filepath.Join(filepath.Dir(secretFile), name+".cred")
	if _, err := execute(t, "credential", "issue", "--secret-file", secretFile, "--role", role, "--name", name, "-o", file); err != nil {
		t.Fatalf("credential issue %s %s: %v", role, name, err)
	}
	return file
}

// fabricSecret makes an authority secret with ndma keygen --authority in
// a new directory and returns its path.
func fabricSecret(t *testing.T) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "authority.key")
	if _, err := execute(t, "keygen", "--authority", "-o", file); err != nil {
		t.Fatal(err)
	}
	return file
}

// privateKeyText returns the forms of the credential file's private key
// that must never be printed: its base64 and hex.
func privateKeyText(t *testing.T, credFile string) []string {
	t.Helper()
	b, err := os.ReadFile(credFile)
	if err != nil {
		t.Fatal(err)
	}
	id, err := secure.ParseIdentity(b)
	if err != nil {
		t.Fatal(err)
	}
	seed := id.Key.Seed()
	return []string{base64.StdEncoding.EncodeToString(seed)[:16], fmt.Sprintf("%x", seed)[:16], base64.StdEncoding.EncodeToString(id.Key)[:16]}
}

// TestCredentialIssueShow: credential issue writes a credential of mode
// 0600 that ParseIdentity accepts, keeps an existing file unless --force,
// refuses unknown roles; show prints role, name and fingerprints (JSON
// with --json), tells whether a secret is the credential's fabric's, and
// refuses a file others may read; no output shows the private key.
func TestCredentialIssueShow(t *testing.T) {
	secret := fabricSecret(t)
	file := filepath.Join(filepath.Dir(secret), "alice.cred")
	stdout, stderr, err := executeBoth(t, "credential", "issue", "--secret-file", secret, "--role", "client", "--name", "alice", "-o", file)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("credential file mode %v, %v; want 0600", fi.Mode(), err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	id, err := secure.ParseIdentity(b)
	if err != nil || id.Cert.Role != secure.RoleClient || id.Cert.Name != "alice" {
		t.Fatalf("issued %v, %v", id, err)
	}
	a, err := authorityOf(secret)
	if err != nil || !a.Public().Equal(id.Authority) {
		t.Fatalf("the credential's authority is not the secret's (%v)", err)
	}
	secrets := privateKeyText(t, file)
	check := func(what, out string) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(out, s) {
				t.Errorf("%s shows the private key:\n%s", what, out)
			}
		}
	}
	check("issue", stdout+stderr)
	if !strings.Contains(stderr, "--credential "+file) || !strings.Contains(stdout, secure.Fingerprint(id.Cert.Key)) {
		t.Errorf("issue: stdout %q, stderr %q", stdout, stderr)
	}

	if _, err := execute(t, "credential", "issue", "--secret-file", secret, "--role", "client", "--name", "bob", "-o", file); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("issue over an existing file: %v", err)
	}
	if after, _ := os.ReadFile(file); !bytes.Equal(after, b) {
		t.Error("issue without --force changed the existing file")
	}
	if _, err := execute(t, "credential", "issue", "--secret-file", secret, "--role", "admin", "--name", "x", "-o", file+"2"); err == nil || !strings.Contains(err.Error(), `--role "admin"`) {
		t.Errorf("issue --role admin: %v", err)
	}
	for _, name := range []string{"train-42/01", "train-42/0/x", "train-42.v2/1"} {
		if _, err := execute(t, "credential", "issue", "--secret-file", secret, "--role", "member", "--name", name, "-o", file+"3"); err == nil || !strings.Contains(err.Error(), "--name") {
			t.Errorf("issue --name %s: %v", name, err)
		}
		if _, err := os.Stat(file + "3"); err == nil {
			t.Errorf("issue --name %s wrote a file", name)
		}
	}

	out, err := execute(t, "credential", "show", file)
	check("show", out)
	for _, want := range []string{"role       client", `name       "alice"`, "key        " + secure.Fingerprint(id.Cert.Key), "authority  " + secure.Fingerprint(id.Authority)} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("show: %v: %q lacks %q", err, out, want)
		}
	}
	out, err = execute(t, "credential", "show", file, "--json", "--secret-file", secret)
	check("show --json", out)
	var got credentialJSON
	if err != nil || json.Unmarshal([]byte(out), &got) != nil || got.Role != "client" || got.Name != "alice" ||
		got.Key != secure.Fingerprint(id.Cert.Key) || got.SameFabric == nil || !*got.SameFabric {
		t.Errorf("show --json: %v: %q", err, out)
	}
	other := fabricSecret(t)
	if out, err := execute(t, "credential", "show", file, "--secret-file", other); err == nil || !strings.Contains(out, "NOT issued under") {
		t.Errorf("show against another fabric's secret: %v: %q", err, out)
	}

	// --force replaces the file with a new key.
	if _, err := execute(t, "credential", "issue", "--secret-file", secret, "--role", "memory-node", "--name", "mem0", "-o", file, "--force"); err != nil {
		t.Fatal(err)
	}
	if out, err := execute(t, "credential", "show", file); err != nil || !strings.Contains(out, "role       memory-node") {
		t.Errorf("show after --force: %v: %q", err, out)
	}

	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := execute(t, "credential", "show", file); !errors.Is(err, secretfile.ErrExposed) {
		t.Errorf("show of a file others may read: %v", err)
	}
}

// TestCredentialFlagOnEveryCommand: every command that talks to a switch
// takes --credential.
func TestCredentialFlagOnEveryCommand(t *testing.T) {
	for _, path := range switchTalkers {
		c := findCmd(t, path...)
		if c.Flags().Lookup("credential") == nil && c.PersistentFlags().Lookup("credential") == nil && c.InheritedFlags().Lookup("credential") == nil {
			t.Errorf("ndma %s: no --credential", strings.Join(path, " "))
		}
	}
}

// TestRekeyAfter: a daemon refuses a --rekey-after shorter than a second
// (each rekey is a handshake per peer), naming the flag.
func TestRekeyAfter(t *testing.T) {
	secret := fabricSecret(t)
	sw := issueCredential(t, secret, "switch", "sw0")
	mem := issueCredential(t, secret, "memory-node", "m0")
	for _, args := range [][]string{
		{"switch", "--listen", "127.0.0.1:0", "--token", "t", "--credential", sw, "--rekey-after", "10ms"},
		{"memd", "--listen", "127.0.0.1:0", "--size", "64KiB", "--credential", mem, "--rekey-after", "0s"},
	} {
		if _, err := executeCanceled(t, args...); err == nil || !strings.Contains(err.Error(), "--rekey-after") || !strings.Contains(err.Error(), "at least 1s") {
			t.Errorf("%q: %v, want --rekey-after refused", args, err)
		}
	}
}

// TestCredentialRoles: each daemon and client refuses a credential of
// another role, a tampered one and one others may read, naming the flag
// or $NDMA_CREDENTIAL.
func TestCredentialRoles(t *testing.T) {
	secret := fabricSecret(t)
	client := issueCredential(t, secret, "client", "c0")
	mem := issueCredential(t, secret, "memory-node", "m0")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"switch", "--listen", "127.0.0.1:0", "--credential", client}, "this command needs one of role switch"},
		{[]string{"memd", "--listen", "127.0.0.1:0", "--size", "64KiB", "--credential", client}, "this command needs one of role memory-node"},
		{[]string{"pool", "ls", "--switch", "127.0.0.1:9", "--credential", mem}, "this command needs one of role client"},
		{[]string{"stat", "--switch", "127.0.0.1:9", "--credential", mem}, "this command needs one of role client"},
	} {
		if _, err := executeCanceled(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "--credential:") {
			t.Errorf("%q: %v, want %q", c.args, err, c.want)
		}
	}
	t.Setenv(credentialEnv, client)
	if _, err := executeCanceled(t, "switch", "--listen", "127.0.0.1:0"); err == nil || !strings.Contains(err.Error(), "$"+credentialEnv+":") {
		t.Errorf("switch with $%s of a client: %v", credentialEnv, err)
	}
	b, err := os.ReadFile(mem)
	if err != nil {
		t.Fatal(err)
	}
	tampered := filepath.Join(filepath.Dir(mem), "tampered.cred")
	if err := os.WriteFile(tampered, bytes.Replace(b, []byte(`name: "m0"`), []byte(`name: "m1"`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := executeCanceled(t, "memd", "--listen", "127.0.0.1:0", "--size", "64KiB", "--credential", tampered); !errors.Is(err, secure.ErrIdentity) {
		t.Errorf("memd with a tampered credential: %v", err)
	}
	if err := os.Chmod(mem, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := executeCanceled(t, "memd", "--listen", "127.0.0.1:0", "--size", "64KiB", "--credential", mem); !errors.Is(err, secretfile.ErrExposed) {
		t.Errorf("memd with a credential others may read: %v", err)
	}
}

// runMainEnv, set in a test binary's environment, makes it run ndma's
// main instead of the tests (see TestMain): the secured fabric test runs
// the daemons as processes of their own, as deployed.
const runMainEnv = "NDMA_TEST_RUN_MAIN"

// daemon is an ndma daemon the test started as a process.
type daemon struct {
	cmd    *exec.Cmd
	addr   string
	mu     sync.Mutex
	stderr bytes.Buffer
}

func (d *daemon) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stderr.Write(p)
}

// logs returns what the daemon wrote on standard error so far.
func (d *daemon) logs() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stderr.String()
}

// startDaemon runs this test binary as `ndma args...` and returns once it
// printed its listening address; the test's cleanup stops it (SIGINT)
// and waits for it.
func startDaemon(t *testing.T, args ...string) *daemon {
	t.Helper()
	d, lines := startProcess(t, args...)
	select {
	case addr, ok := <-lines:
		if !ok {
			t.Fatalf("ndma %q exited without an address:\n%s", args, d.logs())
		}
		d.addr = addr
	case <-time.After(20 * time.Second):
		t.Fatalf("ndma %q printed no address in 20s:\n%s", args, d.logs())
	}
	return d
}

// startProcess starts ndma with args as a process of its own, stopped
// (SIGINT, then SIGKILL after 10 s) when the test ends, and returns it
// with the addresses it prints on "listen" lines of its standard output.
func startProcess(t *testing.T, args ...string) (*daemon, <-chan string) {
	t.Helper()
	d := &daemon{cmd: exec.Command(os.Args[0], args...)}
	d.cmd.Env = append(os.Environ(), runMainEnv+"=1")
	d.cmd.Stderr = d
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = d.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { d.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = d.cmd.Process.Kill()
			<-done
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "listen" {
				select {
				case lines <- f[1]:
				default:
				}
			}
		}
		close(lines)
	}()
	return d, lines
}

// TestSecuredFabric runs a secured fabric as deployed: ndma switch and
// ndma memd as processes, each with its credential, and the pool commands
// with a client credential create a region, put a file into it and get
// it back; a pool command without a credential is told that the switch
// takes sealed datagrams only, one with a credential of another fabric
// gets no answer and an error that says why that may be; nothing prints
// a private key.
func TestSecuredFabric(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	secret := fabricSecret(t)
	swCred := issueCredential(t, secret, "switch", "sw0")
	memCred := issueCredential(t, secret, "memory-node", "mem0")
	cliCred := issueCredential(t, secret, "client", "cli0")

	sw := startDaemon(t, "switch", "--listen", "127.0.0.1:0", "--credential", swCred)
	mem := startDaemon(t, "memd", "--listen", "127.0.0.1:0", "--size", "1MiB", "--switch", sw.addr, "--credential", memCred)
	for deadline := time.Now().Add(10 * time.Second); ; {
		out, err := execute(t, "pool", "stat", "--switch", sw.addr, "--credential", cliCred, "--json", "--timeout", "2s")
		if err == nil && strings.Count(out, `"Alive":true`) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the memory node did not join the sealed pool: %v %q\nswitch:\n%s\nmemd:\n%s", err, out, sw.logs(), mem.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}

	stdout, stderr, err := executeBoth(t, "pool", "create", "--switch", sw.addr, "--credential", cliCred, "--size", "256KiB", "--stripe", "4KiB", "--json")
	if err != nil {
		t.Fatalf("pool create: %v %s", err, stderr)
	}
	var region struct {
		Region uint32 `json:"region"`
		Key    string `json:"key"`
	}
	if err := json.Unmarshal([]byte(stdout), &region); err != nil || region.Key == "" {
		t.Fatalf("pool create: %v: %q", err, stdout)
	}
	dir := t.TempDir()
	data := make([]byte, 100<<10+5)
	for i := range data {
		data[i] = byte(i*13 + i>>8)
	}
	in, back := filepath.Join(dir, "in"), filepath.Join(dir, "back")
	if err := os.WriteFile(in, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := execute(t, "pool", "put", in, "--switch", sw.addr, "--credential", cliCred, "--region", fmt.Sprint(region.Region), "--key", region.Key); err != nil {
		t.Fatalf("pool put: %v %q", err, out)
	}
	t.Setenv(credentialEnv, cliCred) // the same credential from the environment
	if _, err := execute(t, "pool", "get", fmt.Sprint(region.Region), "--switch", sw.addr, "--key", region.Key, "--length", fmt.Sprint(len(data)), "-o", back); err != nil {
		t.Fatalf("pool get: %v", err)
	}
	if got, err := os.ReadFile(back); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("pool get returned other bytes (%v)", err)
	}
	t.Setenv(credentialEnv, "")
	if out, err := execute(t, "bench", "pool", "--switch", sw.addr, "--credential", cliCred, "--tests", "latency", "--iters", "20", "--json"); err != nil || !strings.Contains(out, "pool_read") {
		t.Fatalf("bench pool: %v %q", err, out)
	}

	// Unsealed (--insecure), the switch says it takes sealed datagrams
	// only, which the timeout reports; with a credential of another
	// fabric: no answer.
	otherCred := issueCredential(t, fabricSecret(t), "client", "stranger")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"pool", "ls", "--switch", sw.addr, "--timeout", "500ms", "--insecure"}, "takes only sealed datagrams"},
		{[]string{"pool", "ls", "--switch", sw.addr, "--timeout", "500ms", "--credential", otherCred}, "no switch answers"},
	} {
		_, err := execute(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "credential") {
			t.Errorf("%q against a sealed switch: %v, want %q and a word on credentials", c.args, err, c.want)
		}
	}

	// Both daemons said they seal, and no output shows a private key.
	for _, c := range []struct {
		d    *daemon
		want string
	}{{sw, "sealing every datagram (role switch, name"}, {mem, "sealing every datagram (role memory node, name"}} {
		if !strings.Contains(c.d.logs(), c.want) {
			t.Errorf("no %q in the logs:\n%s", c.want, c.d.logs())
		}
	}
	all := sw.logs() + mem.logs() + stdout + stderr
	for _, f := range []string{swCred, memCred, cliCred} {
		for _, s := range privateKeyText(t, f) {
			if strings.Contains(all, s) {
				t.Errorf("a private key of %s shows in the output", f)
			}
		}
	}
}
