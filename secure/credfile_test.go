package secure

import (
	"bytes"
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestCredentialFileRoundTrip: every role, and a name with spaces,
// quotes and bytes that are not UTF-8, comes back from Encode and
// ParseIdentity as it was, and the file never shows the key other than on
// its private-key line.
func TestCredentialFileRoundTrip(t *testing.T) {
	a := authority(t, "credential file test secret")
	for i, c := range []struct {
		role Role
		name string
	}{
		{RoleClient, "alice"},
		{RoleMember, "train/3"},
		{RoleMemoryNode, "mem-node_0"},
		{RoleSwitch, strings.Repeat("s", MaxNameLen)},
	} {
		id := issue(t, a, c.role, c.name, byte(i+1))
		b, err := id.Encode()
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseIdentity(b)
		if err != nil {
			t.Fatalf("%v %q: %v\n%s", c.role, c.name, err, b)
		}
		if got.Cert.Role != c.role || got.Cert.Name != c.name || !bytes.Equal(got.Cert.Key, id.Cert.Key) ||
			!bytes.Equal(got.Cert.Sig, id.Cert.Sig) || !got.Key.Equal(id.Key) || !got.Authority.Equal(a.Public()) {
			t.Fatalf("%v %q: parsed %v", c.role, c.name, got)
		}
		// The text the file gives the seed occurs once, and String
		// shows no part of it.
		seed := base64.StdEncoding.EncodeToString(id.Key.Seed())
		if strings.Count(string(b), seed) != 1 || strings.Contains(got.String(), seed) || !strings.Contains(got.String(), Fingerprint(id.Cert.Key)) {
			t.Fatalf("the private key shows where it should not: %s", got)
		}
	}
	// CRLF line endings and extra comments are read too.
	id := issue(t, a, RoleClient, "crlf", 9)
	b, _ := id.Encode()
	b = append([]byte("# a comment\r\n\r\n"), bytes.ReplaceAll(b, []byte("\n"), []byte("\r\n"))...)
	if _, err := ParseIdentity(b); err != nil {
		t.Fatal(err)
	}
}

// replaceField returns the credential file b with field's value set to v.
func replaceField(t *testing.T, b []byte, field, v string) []byte {
	t.Helper()
	var out []string
	found := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, field+": ") {
			line = field + ": " + v
			found = true
		}
		out = append(out, line)
	}
	if !found {
		t.Fatalf("no field %s", field)
	}
	return []byte(strings.Join(out, "\n"))
}

// TestCredentialFileRefusals: a tampered certificate, another authority,
// a private key that is not the certificate's, a truncated file, bad
// base64 and every other malformed file are refused with ErrCredentialFile
// (and ErrIdentity where the certificate does not verify), and no error
// shows the private key.
func TestCredentialFileRefusals(t *testing.T) {
	a := authority(t, "credential file test secret")
	other := authority(t, "another fabric's secret")
	id := issue(t, a, RoleMemoryNode, "mem0", 1)
	stranger := issue(t, a, RoleMemoryNode, "mem0", 2)
	good, err := id.Encode()
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString
	seed := b64(id.Key.Seed())
	cases := []struct {
		name     string
		file     []byte
		want     string
		identity bool // the error matches ErrIdentity too
	}{
		{"role changed", replaceField(t, good, fieldRole, "switch"), "not signed by this fabric's authority", true},
		{"name changed", replaceField(t, good, fieldName, `"mem1"`), "not signed by this fabric's authority", true},
		{"key of another", replaceField(t, good, fieldKey, b64(stranger.Cert.Key)), "not signed", true},
		{"signature flipped", replaceField(t, good, fieldSig, b64(append([]byte{id.Cert.Sig[0] ^ 1}, id.Cert.Sig[1:]...))), "not signed", true},
		{"other authority", replaceField(t, good, fieldAuthority, b64(other.Public())), "not signed", true},
		{"private key of another", replaceField(t, good, fieldPrivate, b64(stranger.Key.Seed())), "private key is not the one the certificate names", false},
		{"truncated", good[:len(good)-len(seed)-20], "no private-key field", false},
		{"truncated mid-value", good[:len(good)-10], "private-key: bad base64", false},
		{"bad base64", replaceField(t, good, fieldSig, "!!!!"), "signature: bad base64", false},
		{"unpadded base64", replaceField(t, good, fieldAuthority, strings.TrimRight(b64(a.Public()), "=")), "authority: bad base64", false},
		{"short key", replaceField(t, good, fieldKey, b64(id.Cert.Key[:31])), "key: 31 bytes, want 32", false},
		{"empty", nil, "not an NDMA credential", false},
		{"other format", []byte("-----BEGIN PRIVATE KEY-----\n"), "not an NDMA credential", false},
		{"unknown role", replaceField(t, good, fieldRole, "admin"), "role: not a role", false},
		{"unquoted name", replaceField(t, good, fieldName, "mem0"), "double-quoted", false},
		{"unknown field", append(bytes.Clone(good), "expires: never\n"...), "unknown field (want one of role, name", false},
		{"validity changed", replaceField(t, good, fieldNotAfter, "2030-01-01T00:00:00Z"), "not signed by this fabric's authority", true},
		{"validity not a time", replaceField(t, good, fieldNotBefore, "yesterday"), "not-before: want an RFC 3339 time", false},
		{"validity in fractions", replaceField(t, good, fieldNotAfter, "2030-01-02T03:04:05.5Z"), "not-after: want an RFC 3339 time in whole seconds", false},
		{"no validity", bytes.ReplaceAll(good, []byte("not-after: "), []byte("# ")), "no not-after field", false},
		{"repeated field", append(bytes.Clone(good), "name: \"mem0\"\n"...), "name given again", false},
		{"no colon", append(bytes.Clone(good), "garbage\n"...), `want "field: value"`, false},
	}
	for _, c := range cases {
		_, err := ParseIdentity(c.file)
		switch {
		case err == nil:
			t.Errorf("%s: accepted", c.name)
		case !errors.Is(err, ErrCredentialFile) || errors.Is(err, ErrIdentity) != c.identity:
			t.Errorf("%s: %v: ErrCredentialFile %v, ErrIdentity %v (want %v)", c.name, err, errors.Is(err, ErrCredentialFile), errors.Is(err, ErrIdentity), c.identity)
		case !strings.Contains(err.Error(), c.want):
			t.Errorf("%s: %v, want it to say %q", c.name, err, c.want)
		case strings.Contains(err.Error(), seed) || strings.Contains(err.Error(), seed[:12]):
			t.Errorf("%s: the error shows the private key: %v", c.name, err)
		}
	}
	// Encode refuses an identity ParseIdentity would refuse.
	bad := *id
	bad.Authority = other.Public()
	if _, err := bad.Encode(); !errors.Is(err, ErrIdentity) {
		t.Fatalf("Encode of a certificate another authority signed: %v", err)
	}
	bad = *id
	bad.Key = stranger.Key
	if _, err := bad.Encode(); !errors.Is(err, ErrCredentialFile) {
		t.Fatalf("Encode of another private key: %v", err)
	}
}

// TestParseRole: every role's name parses back to it.
func TestParseRole(t *testing.T) {
	for r := RoleClient; r <= RoleSwitch; r++ {
		if got, err := ParseRole(RoleName(r)); err != nil || got != r {
			t.Fatalf("%v: %v, %v", r, got, err)
		}
	}
	if _, err := ParseRole("memory node"); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseRole("root"); !errors.Is(err, ErrIdentity) {
		t.Fatal(err)
	}
}

// FuzzParseIdentity: ParseIdentity never panics, and what it accepts
// encodes back to a file that parses to the same identity.
func FuzzParseIdentity(f *testing.F) {
	a := authority(f, "credential file fuzz secret")
	for i, r := range []Role{RoleClient, RoleSwitch} {
		b, err := issue(f, a, r, "fuzz", byte(i)).Encode()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte(credHeader + "\nrole: client\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, err := ParseIdentity(b)
		if err != nil {
			return
		}
		again, err := id.Encode()
		if err != nil {
			t.Fatalf("an accepted identity does not encode: %v", err)
		}
		id2, err := ParseIdentity(again)
		if err != nil || id2.Cert.Name != id.Cert.Name || id2.Cert.Role != id.Cert.Role || !id2.Key.Equal(id.Key) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

// TestCredentialFileValidity: the period of validity comes back from the
// file as issued, and a file of the version before it is refused with
// ErrCredentialVersion, which tells its holder to have a new one issued.
func TestCredentialFileValidity(t *testing.T) {
	a := authority(t, "credential file test secret")
	nb, na := time.Unix(1_800_000_000, 0), time.Unix(1_800_000_000+90*86400, 0)
	id, err := a.IssueBetween(RoleClient, "alice", nb, na, newRng(3))
	if err != nil {
		t.Fatal(err)
	}
	b, err := id.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte("\nnot-before: 2027-01-15T08:00:00Z\nnot-after: 2027-04-15T08:00:00Z\n")) {
		t.Fatalf("the file does not show the period of validity:\n%s", b)
	}
	got, err := ParseIdentity(b)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Cert.NotBefore.Equal(nb) || !got.Cert.NotAfter.Equal(na) {
		t.Fatalf("parsed %v to %v, issued %v to %v", got.Cert.NotBefore, got.Cert.NotAfter, nb, na)
	}
	v1 := bytes.Replace(b, []byte(credHeader), []byte("NDMA CREDENTIAL v1"), 1)
	_, err = ParseIdentity(v1)
	if !errors.Is(err, ErrCredentialVersion) || !errors.Is(err, ErrCredentialFile) || !strings.Contains(err.Error(), "issue a new one") {
		t.Fatalf("a version 1 file: %v", err)
	}
}

// TestCredentialFileErrorsShowNoKey: whatever is done to a credential
// file — lines swapped, values moved to other fields or before the colon,
// lines joined, cut or stripped of their field name — no error shows 8 or
// more characters in a row of any key field's value (the private key's,
// the public key's, the signature's or the authority's).
func TestCredentialFileErrorsShowNoKey(t *testing.T) {
	a := authority(t, "credential file test secret")
	id := issue(t, a, RoleMemoryNode, "mem0", 4)
	good, err := id.Encode()
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString
	secrets := []string{b64(id.Key.Seed()), b64(id.Cert.Key), b64(id.Cert.Sig), b64(a.Public())}
	lines := strings.Split(strings.TrimSuffix(string(good), "\n"), "\n")
	var mangled [][]byte
	add := func(ls []string) { mangled = append(mangled, []byte(strings.Join(ls, "\n")+"\n")) }
	for i := range lines {
		for j := range lines {
			if i == j {
				continue
			}
			ls := slices.Clone(lines)
			ls[i], ls[j] = ls[j], ls[i]
			add(ls) // two lines swapped
			ls = slices.Clone(lines)
			ls[i] = ls[i] + ls[j]
			add(ls) // two lines joined
			fi, _, _ := strings.Cut(lines[i], ": ")
			_, vj, _ := strings.Cut(lines[j], ": ")
			ls = slices.Clone(lines)
			ls[i] = fi + ": " + vj
			add(ls) // a value under another field
			ls = slices.Clone(lines)
			ls[i] = vj + ": " + fi
			add(ls) // the value before the colon
			ls = slices.Clone(lines)
			ls[i] = vj + ":"
			add(ls)
			ls = slices.Clone(lines)
			ls[i] = `"` + vj + `"`
			add(ls)
		}
		ls := slices.Clone(lines)
		ls[i] = strings.Replace(ls[i], ": ", "", 1)
		add(ls) // the colon lost
		ls = slices.Clone(lines)
		ls[i] = ls[i][:len(ls[i])*2/3]
		add(ls) // a line cut short
		ls = slices.Clone(lines)
		ls[i] = strings.ToLower(ls[i])
		add(ls)
		ls = slices.Clone(lines)
		ls[i] = strings.Replace(ls[i], ": ", ": x", 1)
		add(ls)
	}
	refused := 0
	for _, b := range mangled {
		_, err := ParseIdentity(b)
		if err == nil {
			continue // a swap of two lines in any order is the same file
		}
		refused++
		msg := err.Error()
		for _, sec := range secrets {
			for k := 0; k+8 <= len(sec); k++ {
				if strings.Contains(msg, sec[k:k+8]) {
					t.Fatalf("the error shows %q of a key:\n%v\nfile:\n%s", sec[k:k+8], err, b)
				}
			}
		}
	}
	if refused < len(mangled)/2 {
		t.Fatalf("only %d of %d mangled files refused", refused, len(mangled))
	}
}
