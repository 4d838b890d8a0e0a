package main

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ndma/ndma/secure"
)

// writeCredentialBetween issues a credential of role and name valid from
// nb to na under the authority secret in secret, writes it next to it
// (mode 0600) and returns its path.
func writeCredentialBetween(t *testing.T, secret, role, name string, nb, na time.Time) string {
	t.Helper()
	a, err := authorityOf(secret)
	if err != nil {
		t.Fatal(err)
	}
	r, err := secure.ParseRole(role)
	if err != nil {
		t.Fatal(err)
	}
	id, err := a.IssueBetween(r, name, time.Unix(nb.Unix(), 0), time.Unix(na.Unix(), 0), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b, err := id.Encode()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(filepath.Dir(secret), name+".cred")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestCredentialValidity: issue makes credentials valid from now for 90
// days, or for --valid-for (in days or as a duration), and refuses a
// period that is not positive or longer than two years; show prints the
// period and says EXPIRED or NOT YET VALID (and fails) for a credential
// outside it; a daemon will not start with such a credential, nor with a
// credential file of the format before periods of validity, and says to
// have a new one issued.
func TestCredentialValidity(t *testing.T) {
	secret := fabricSecret(t)
	dir := filepath.Dir(secret)
	for _, c := range []struct {
		args []string
		want time.Duration
	}{
		{nil, 90 * 24 * time.Hour},
		{[]string{"--valid-for", "30d"}, 30 * 24 * time.Hour},
		{[]string{"--valid-for", "12h"}, 12 * time.Hour},
		{[]string{"--valid-for", "730d"}, 730 * 24 * time.Hour},
	} {
		file := filepath.Join(dir, "v.cred")
		before := time.Now().Truncate(time.Second)
		args := append([]string{"credential", "issue", "--secret-file", secret, "--role", "client", "--name", "alice", "-o", file, "--force", "--json"}, c.args...)
		out, err := execute(t, args...)
		after := time.Now()
		var got credentialJSON
		if err != nil || json.Unmarshal([]byte(out), &got) != nil {
			t.Fatalf("%q: %v %q", args, err, out)
		}
		if got.Status != statusValid || got.NotBefore.Before(before) || got.NotBefore.After(after) || got.NotAfter.Sub(got.NotBefore) != c.want {
			t.Errorf("%q: valid %v to %v (%s), want %v from now", c.args, got.NotBefore, got.NotAfter, got.Status, c.want)
		}
		out, err = execute(t, "credential", "show", file)
		if err != nil || !strings.Contains(out, "valid      "+got.NotBefore.Format(time.RFC3339)+" to "+got.NotAfter.Format(time.RFC3339)+" (valid)") {
			t.Errorf("show: %v\n%s", err, out)
		}
	}
	for _, v := range []string{"0s", "-1h", "30s", "731d", "100000h", "ninety", "d", "-3d"} {
		_, err := execute(t, "credential", "issue", "--secret-file", secret, "--role", "client", "--name", "x", "-o", filepath.Join(dir, "bad.cred"), "--valid-for", v)
		if err == nil || !strings.Contains(err.Error(), "valid-for") {
			t.Errorf("--valid-for %s: %v", v, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "bad.cred")); err == nil {
			t.Fatalf("--valid-for %s: a credential was written", v)
		}
	}

	now := time.Now()
	expired := writeCredentialBetween(t, secret, "memory-node", "old", now.Add(-48*time.Hour), now.Add(-time.Hour))
	future := writeCredentialBetween(t, secret, "memory-node", "early", now.Add(time.Hour), now.Add(48*time.Hour))
	for _, c := range []struct {
		file, status string
		want         error
	}{{expired, statusExpired, secure.ErrExpired}, {future, statusNotYet, secure.ErrNotYetValid}} {
		out, err := execute(t, "credential", "show", c.file)
		if !errors.Is(err, c.want) || !strings.Contains(out, "("+c.status+")") {
			t.Errorf("show %s: %v\n%s", c.file, err, out)
		}
		out, _ = execute(t, "credential", "show", c.file, "--json")
		var got credentialJSON
		if json.Unmarshal([]byte(out), &got) != nil || got.Status != c.status {
			t.Errorf("show --json %s: %q", c.file, out)
		}
		_, err = executeCanceled(t, "memd", "--listen", "127.0.0.1:0", "--size", "64KiB", "--credential", c.file)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), "--credential: "+c.file) || !strings.Contains(err.Error(), "have a new one issued") {
			t.Errorf("memd with %s: %v", c.file, err)
		}
	}

	// A credential file of the format before periods of validity.
	b, err := os.ReadFile(future)
	if err != nil {
		t.Fatal(err)
	}
	v1 := filepath.Join(dir, "v1.cred")
	b = bytes.Replace(b, []byte("NDMA CREDENTIAL v2"), []byte("NDMA CREDENTIAL v1"), 1)
	if err := os.WriteFile(v1, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"credential", "show", v1}, {"memd", "--listen", "127.0.0.1:0", "--size", "64KiB", "--credential", v1}} {
		_, err := executeCanceled(t, args...)
		if !errors.Is(err, secure.ErrCredentialVersion) || !strings.Contains(err.Error(), "issue a new one (ndma credential issue)") {
			t.Errorf("%q: %v", args, err)
		}
	}
}

// TestAuthoritySecretAndToken: keygen --authority writes an authority
// secret (mode 0600) and says what it is for, not to give it as a token;
// credential issue and revoke refuse a fabric token as the authority
// secret, and --token-file refuses an authority secret, each saying which
// file is which without showing either.
func TestAuthoritySecretAndToken(t *testing.T) {
	dir := t.TempDir()
	auth, token := filepath.Join(dir, "authority.key"), filepath.Join(dir, "fabric.token")
	_, stderr, err := executeBoth(t, "keygen", "--authority", "-o", auth)
	if err != nil {
		t.Fatal(err)
	}
	ab, _ := os.ReadFile(auth)
	line, _, _ := strings.Cut(string(ab), "\n")
	if fi, err := os.Stat(auth); err != nil || fi.Mode().Perm() != 0o600 || !strings.HasPrefix(line, secure.AuthoritySecretPrefix) {
		t.Fatalf("authority secret file: %v, %q", err, line)
	}
	secretText := strings.TrimPrefix(line, secure.AuthoritySecretPrefix)
	if !strings.Contains(stderr, "--secret-file "+auth) || strings.Contains(stderr, "--token-file") || strings.Contains(stderr, secretText[:8]) {
		t.Errorf("keygen --authority says %q", stderr)
	}
	if _, stderr, err = executeBoth(t, "keygen", "-o", token); err != nil || !strings.Contains(stderr, "--token-file "+token) {
		t.Fatalf("keygen: %v %q", err, stderr)
	}
	tb, _ := os.ReadFile(token)
	tokenText := strings.TrimSpace(string(tb))

	cred := filepath.Join(dir, "x.cred")
	good := issueCredential(t, auth, "client", "alice")
	for _, args := range [][]string{
		{"credential", "issue", "--secret-file", token, "--role", "switch", "--name", "sw0", "-o", cred},
		{"credential", "revoke", "--secret-file", token, "--list", filepath.Join(dir, "list"), "SHA256:" + strings.Repeat("A", 43)},
		{"credential", "show", good, "--secret-file", token},
	} {
		_, err := execute(t, args...)
		if !errors.Is(err, secure.ErrNotAuthoritySecret) || !strings.Contains(err.Error(), "never under the fabric token") ||
			strings.Contains(err.Error(), tokenText[:8]) {
			t.Errorf("%q: %v", args[:2], err)
		}
	}
	if _, err := os.Stat(cred); err == nil {
		t.Fatal("a credential was issued under the fabric token")
	}
	_, err = executeCanceled(t, "pool", "ls", "--switch", "127.0.0.1:9", "--token-file", auth)
	if err == nil || !strings.Contains(err.Error(), "holds the authority secret") || !strings.Contains(err.Error(), "not the fabric token") ||
		strings.Contains(err.Error(), secretText[:8]) {
		t.Errorf("--token-file with the authority secret: %v", err)
	}
}

// TestCredentialRevoke: revoke creates a signed list (mode 0644) of the
// keys of the credentials and fingerprints named, and each later revoke
// extends it under the next number; revocations prints it (and as JSON);
// show --revocations says REVOKED (and fails) for a revoked credential
// only; a list or credential of another fabric, a tampered list and an
// argument that names no key are refused, the list left as it was.
func TestCredentialRevoke(t *testing.T) {
	secret := fabricSecret(t)
	dir := filepath.Dir(secret)
	alice, bob, carol := issueCredential(t, secret, "client", "alice"), issueCredential(t, secret, "client", "bob"), issueCredential(t, secret, "memory-node", "carol")
	fp := func(file string) string {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		id, err := secure.ParseIdentity(b)
		if err != nil {
			t.Fatal(err)
		}
		return secure.Fingerprint(id.Cert.Key)
	}
	list := filepath.Join(dir, "revoked.list")
	out, err := execute(t, "credential", "revoke", "--secret-file", secret, "--list", list, alice)
	if err != nil || !strings.Contains(out, `revoked client "alice" (key `+fp(alice)+")") {
		t.Fatalf("revoke alice: %v %q", err, out)
	}
	if fi, err := os.Stat(list); err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("list mode: %v %v", fi, err)
	}
	if _, err := execute(t, "credential", "revoke", "--secret-file", secret, "--list", list, fp(bob)); err != nil {
		t.Fatal(err)
	}
	out, err = execute(t, "credential", "revocations", list, "--json", "--secret-file", secret)
	var got revocationsJSON
	if err != nil || json.Unmarshal([]byte(out), &got) != nil || got.Number != 2 || len(got.Revoked) != 2 ||
		!strings.Contains(out, fp(alice)) || !strings.Contains(out, fp(bob)) || strings.Contains(out, fp(carol)) {
		t.Fatalf("revocations --json: %v %q", err, out)
	}
	if out, err := execute(t, "credential", "revocations", list); err != nil || !strings.Contains(out, "number     2\n") || !strings.Contains(out, "revoked    2 keys\n  ") {
		t.Errorf("revocations: %v\n%s", err, out)
	}
	for _, c := range []struct {
		file    string
		revoked bool
	}{{alice, true}, {bob, true}, {carol, false}} {
		out, err := execute(t, "credential", "show", c.file, "--revocations", list)
		if c.revoked != errors.Is(err, secure.ErrRevoked) || c.revoked != strings.Contains(out, "REVOKED") || (!c.revoked && err != nil) {
			t.Errorf("show %s --revocations: %v\n%s", c.file, err, out)
		}
	}

	// Refusals leave the list as it is.
	before, _ := os.ReadFile(list)
	other := fabricSecret(t)
	stranger := issueCredential(t, other, "client", "stranger")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--secret-file", other, "--list", list, stranger}, "another authority"},
		{[]string{"--secret-file", secret, "--list", list, stranger}, "a credential of another fabric"},
		{[]string{"--secret-file", secret, "--list", list, filepath.Join(dir, "nothing")}, "neither a key fingerprint"},
		{[]string{"--secret-file", secret, "--list", list, "SHA256:short"}, "neither a key fingerprint"},
	} {
		_, err := execute(t, append([]string{"credential", "revoke"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("revoke %q: %v, want %q", c.args, err, c.want)
		}
	}
	if after, _ := os.ReadFile(list); !bytes.Equal(after, before) {
		t.Fatal("a refused revoke changed the list")
	}
	tampered := filepath.Join(dir, "tampered.list")
	if err := os.WriteFile(tampered, bytes.Replace(before, []byte("revoked: "+fp(alice)+"\n"), nil, 1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := execute(t, "credential", "revocations", tampered); !errors.Is(err, secure.ErrRevocations) {
		t.Errorf("revocations of a tampered list: %v", err)
	}
	if _, err := execute(t, "credential", "revoke", "--secret-file", secret, "--list", tampered, carol); !errors.Is(err, secure.ErrRevocations) {
		t.Errorf("revoke into a tampered list: %v", err)
	}
	if _, err := execute(t, "credential", "revocations", list, "--secret-file", other); !errors.Is(err, secure.ErrRevocations) {
		t.Errorf("revocations checked against another fabric: %v", err)
	}
}
