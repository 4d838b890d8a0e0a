package secure

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestRevocationListRoundTrip: a list the authority signs names the keys
// revoked, comes back from its file as it was, and says of every
// certificate whether it is revoked; the list that follows keeps the
// earlier keys and adds the new ones once.
func TestRevocationListRoundTrip(t *testing.T) {
	a := authority(t, "revocation list test secret")
	alice, bob, carol := issue(t, a, RoleClient, "alice", 1), issue(t, a, RoleClient, "bob", 2), issue(t, a, RoleMemoryNode, "mem0", 3)
	rl1, err := a.Revoke(nil, t0, HashKey(alice.Cert.Key))
	if err != nil {
		t.Fatal(err)
	}
	rl2, err := a.Revoke(rl1, t0.Add(time.Hour), HashKey(bob.Cert.Key), HashKey(alice.Cert.Key))
	if err != nil {
		t.Fatal(err)
	}
	if rl1.Number != 1 || rl2.Number != 2 || rl1.Len() != 1 || rl2.Len() != 2 {
		t.Fatalf("numbers %d, %d; keys %d, %d", rl1.Number, rl2.Number, rl1.Len(), rl2.Len())
	}
	b := rl2.Encode()
	if !bytes.Contains(b, []byte("revoked: "+Fingerprint(bob.Cert.Key)+"\n")) || !bytes.Contains(b, []byte("issued: 2027-01-15T09:00:00Z\n")) {
		t.Fatalf("file:\n%s", b)
	}
	got, err := ParseRevocations(b)
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if err := got.Verify(a.Public()); err != nil {
		t.Fatal(err)
	}
	if got.Number != 2 || !got.Issued.Equal(t0.Add(time.Hour)) || !bytes.Equal(got.Encode(), b) {
		t.Fatalf("parsed number %d issued %v:\n%s", got.Number, got.Issued, got.Encode())
	}
	for _, c := range []struct {
		id      *Identity
		revoked bool
	}{{alice, true}, {bob, true}, {carol, false}} {
		if got.Revoked(&c.id.Cert) != c.revoked {
			t.Errorf("%s: revoked %v, want %v", c.id, !c.revoked, c.revoked)
		}
	}
	// A fingerprint reads back to the key's hash, in either form.
	h := HashKey(carol.Cert.Key)
	for _, s := range []string{Fingerprint(carol.Cert.Key), hex.EncodeToString(h[:])} {
		if g, err := ParseKeyHash(s); err != nil || g != h {
			t.Errorf("%s: %v, %v", s, g, err)
		}
	}
	for _, s := range []string{"", "SHA256:", Fingerprint(carol.Cert.Key)[:20], "SHA256:" + hex.EncodeToString(h[:]), "zz" + hex.EncodeToString(h[1:])} {
		if _, err := ParseKeyHash(s); !errors.Is(err, ErrRevocations) {
			t.Errorf("%q: %v", s, err)
		}
	}
}

// TestRevocationListRefusals: a list of another authority, a tampered
// list (a key dropped or added, its number or time moved) and every
// malformed file are refused with ErrRevocations.
func TestRevocationListRefusals(t *testing.T) {
	a := authority(t, "revocation list test secret")
	other := authority(t, "another fabric's secret")
	alice, bob := issue(t, a, RoleClient, "alice", 1), issue(t, a, RoleClient, "bob", 2)
	rl, err := a.Revoke(nil, t0, HashKey(alice.Cert.Key), HashKey(bob.Cert.Key))
	if err != nil {
		t.Fatal(err)
	}
	good := string(rl.Encode())
	foreign, _ := other.Revoke(nil, t0, HashKey(alice.Cert.Key))
	if err := foreign.Verify(a.Public()); !errors.Is(err, ErrRevocations) {
		t.Errorf("another authority's list: %v", err)
	}
	if _, err := a.Revoke(foreign, t0); !errors.Is(err, ErrRevocations) {
		t.Errorf("a list following another authority's: %v", err)
	}
	drop := "revoked: " + Fingerprint(alice.Cert.Key) + "\n"
	for _, c := range []struct {
		name, file, want string
	}{
		{"key dropped", strings.Replace(good, drop, "", 1), "not signed"},
		{"key added", strings.Replace(good, drop, drop+"revoked: "+Fingerprint(issue(t, a, RoleClient, "carol", 3).Cert.Key)+"\n", 1), "not signed"},
		{"number moved", strings.Replace(good, "number: 1\n", "number: 9\n", 1), "not signed"},
		{"time moved", strings.Replace(good, "issued: 2027", "issued: 2028", 1), "not signed"},
		{"authority replaced", strings.Replace(good, "authority: ", "authority: "+base64.StdEncoding.EncodeToString(other.Public())+"\n#", 1), "not signed"},
		{"key twice", strings.Replace(good, drop, drop+drop, 1), "revoked twice"},
		{"number zero", strings.Replace(good, "number: 1\n", "number: 0\n", 1), "numbers begin at 1"},
		{"number not a number", strings.Replace(good, "number: 1\n", "number: one\n", 1), "want a decimal number"},
		{"bad fingerprint", strings.Replace(good, drop, "revoked: SHA256:xyz\n", 1), "revoked: not a key fingerprint"},
		{"no signature", good[:strings.Index(good, "signature:")], "no signature field"},
		{"repeated field", good + "number: 2\n", "number given again"},
		{"unknown field", good + "expires: never\n", "unknown field"},
		{"other format", "NDMA CREDENTIAL v2\n", "not an NDMA revocation list"},
		{"empty", "", "not an NDMA revocation list"},
	} {
		_, err := ParseRevocations([]byte(c.file))
		if !errors.Is(err, ErrRevocations) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want it to say %q", c.name, err, c.want)
		}
	}
}

// TestPolicy: Check refuses an expired, a not yet valid and a revoked
// certificate, each with its own error naming the role and name, and
// takes the others; Load refuses a list of another authority, an older
// list and another list of the same number, and keeps the one it holds.
func TestPolicy(t *testing.T) {
	a := authority(t, "revocation list test secret")
	other := authority(t, "another fabric's secret")
	issueAt := func(name string, nb, na time.Time, seed byte) *Cert {
		id, err := a.IssueBetween(RoleClient, name, nb, na, newRng(seed))
		if err != nil {
			t.Fatal(err)
		}
		return &id.Cert
	}
	day := 24 * time.Hour
	alice := issueAt("alice", t0.Add(-day), t0.Add(day), 1)
	bob := issueAt("bob", t0.Add(-day), t0.Add(day), 2)
	old := issueAt("old", t0.Add(-10*day), t0.Add(-day), 3)
	p := NewPolicy(a.Public())
	if err := p.Check(t0, alice); err != nil || p.Revocations() != nil {
		t.Fatalf("no list: %v", err)
	}
	if err := p.Check(t0, old); !errors.Is(err, ErrExpired) {
		t.Fatalf("expired: %v", err)
	}
	if err := p.Check(t0.Add(-5*day), alice); !errors.Is(err, ErrNotYetValid) {
		t.Fatalf("not yet valid: %v", err)
	}
	rl1, _ := a.Revoke(nil, t0, HashKey(alice.Key))
	rl2, _ := a.Revoke(rl1, t0.Add(time.Minute), HashKey(bob.Key))
	rl2b, _ := a.Revoke(rl1, t0.Add(2*time.Minute), HashKey(old.Key))
	foreign, _ := other.Revoke(nil, t0)
	if err := p.Load(foreign); !errors.Is(err, ErrRevocations) || p.Revocations() != nil {
		t.Fatalf("another authority's list: %v", err)
	}
	if err := p.Load(rl1); err != nil {
		t.Fatal(err)
	}
	err := p.Check(t0, alice)
	if !errors.Is(err, ErrRevoked) || !errors.Is(err, ErrIdentity) || !strings.Contains(err.Error(), `client "alice" (key `+Fingerprint(alice.Key)+") by revocation list number 1") {
		t.Fatalf("revoked: %v", err)
	}
	if err := p.Check(t0, bob); err != nil {
		t.Fatalf("bob under list 1: %v", err)
	}
	if err := p.Load(rl2); err != nil || p.Check(t0, bob) == nil || p.Check(t0, alice) == nil {
		t.Fatalf("list 2: %v", err)
	}
	if err := p.Load(rl1); !errors.Is(err, ErrRollback) || p.Revocations() != rl2 {
		t.Fatalf("list 1 after list 2: %v", err)
	}
	if err := p.Load(rl2b); !errors.Is(err, ErrRollback) || p.Revocations() != rl2 {
		t.Fatalf("another list 2: %v", err)
	}
	again, err := ParseRevocations(rl2.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Load(again); err != nil || p.Revocations() != rl2 {
		t.Fatalf("list 2 again: %v", err)
	}
}

// TestAuthoritySecretFile: an authority secret file gives the same
// authority each time it is read and is told from a fabric token; a token,
// an empty file or a short secret are refused with ErrNotAuthoritySecret,
// and no error shows the file's text.
func TestAuthoritySecretFile(t *testing.T) {
	b, err := NewAuthoritySecret(newRng(1))
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	if !IsAuthoritySecret(line) || len(line) != len(AuthoritySecretPrefix)+64 {
		t.Fatalf("first line %q", line)
	}
	a1, err := ParseAuthoritySecret(b)
	if err != nil {
		t.Fatal(err)
	}
	a2, err := ParseAuthoritySecret(bytes.ReplaceAll(b, []byte("\n"), []byte("\r\n")))
	if err != nil || !a1.Public().Equal(a2.Public()) {
		t.Fatalf("read again: %v", err)
	}
	if b2, _ := NewAuthoritySecret(newRng(2)); bytes.Equal(b, b2) {
		t.Fatal("two secrets alike")
	}
	token := []byte("3f9a0c3b8e6d1f2a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f901234\n")
	for _, c := range []struct{ name, file string }{
		{"token", string(token)},
		{"empty", ""},
		{"short", AuthoritySecretPrefix + "abc\n"},
		{"secret on a later line", "# x\n" + string(b)},
	} {
		_, err := ParseAuthoritySecret([]byte(c.file))
		if !errors.Is(err, ErrNotAuthoritySecret) || !errors.Is(err, ErrIdentity) {
			t.Errorf("%s: %v", c.name, err)
		} else if strings.Contains(err.Error(), string(token[:8])) || strings.Contains(err.Error(), string(line[len(AuthoritySecretPrefix):][:8])) {
			t.Errorf("%s: the error shows the file: %v", c.name, err)
		}
	}
	if IsAuthoritySecret(token) {
		t.Fatal("a token taken for an authority secret")
	}
}

// FuzzParseRevocations: ParseRevocations never panics, and what it
// accepts encodes back to the same file.
func FuzzParseRevocations(f *testing.F) {
	a := authority(f, "revocation list fuzz secret")
	rl, err := a.Revoke(nil, t0, HashKey(issue(f, a, RoleClient, "alice", 1).Cert.Key), HashKey(issue(f, a, RoleClient, "bob", 2).Cert.Key))
	if err != nil {
		f.Fatal(err)
	}
	b := rl.Encode()
	f.Add(b)
	f.Add(b[:len(b)/2])
	f.Add([]byte(revHeader + "\nnumber: 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		rl, err := ParseRevocations(b)
		if err != nil {
			return
		}
		again, err := ParseRevocations(rl.Encode())
		if err != nil || again.Number != rl.Number || !again.Issued.Equal(rl.Issued) || again.Len() != rl.Len() {
			t.Fatalf("round trip: %v", err)
		}
	})
}
