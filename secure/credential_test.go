package secure

import (
	"errors"
	"testing"
)

// TestCredentials: a credential proves its own role and name only; a
// proof over another challenge, or checked under another fabric secret,
// fails; bad inputs are refused.
func TestCredentials(t *testing.T) {
	secret := []byte("the fabric secret, 32 bytes long")
	node, err := Issue(secret, RoleMemoryNode, "mem-1")
	if err != nil {
		t.Fatal(err)
	}
	cli, err := Issue(secret, RoleClient, "mem-1")
	if err != nil {
		t.Fatal(err)
	}
	if node.Secret == cli.Secret {
		t.Fatal("a client's credential equals a memory node's of the same name")
	}
	ch := []byte("nonce of the switch")
	p := node.Proof(ch)
	if !VerifyProof(secret, RoleMemoryNode, "mem-1", ch, p) {
		t.Fatal("a memory node's proof refused")
	}
	for _, c := range []struct {
		what   string
		secret []byte
		role   Role
		name   string
		ch     []byte
	}{
		{"as a client", secret, RoleClient, "mem-1", ch},
		{"as the switch", secret, RoleSwitch, "mem-1", ch},
		{"as another node", secret, RoleMemoryNode, "mem-2", ch},
		{"over another challenge", secret, RoleMemoryNode, "mem-1", []byte("another nonce")},
		{"under another fabric secret", []byte("another fabric secret of 32 b..."), RoleMemoryNode, "mem-1", ch},
	} {
		if VerifyProof(c.secret, c.role, c.name, c.ch, p) {
			t.Errorf("a memory node's proof accepted %s", c.what)
		}
	}
	if cp := cli.Proof(ch); VerifyProof(secret, RoleMemoryNode, "mem-1", ch, cp) {
		t.Error("a client's proof accepted for a memory node")
	}
	for _, bad := range []struct {
		secret []byte
		role   Role
		name   string
	}{
		{[]byte("short"), RoleClient, "x"},
		{secret, 0, "x"},
		{secret, 5, "x"},
		{secret, RoleClient, ""},
		{secret, RoleClient, string(make([]byte, MaxNameLen+1))},
	} {
		if _, err := Issue(bad.secret, bad.role, bad.name); !errors.Is(err, ErrCredential) {
			t.Errorf("Issue(%d-byte secret, %v, %d-byte name): %v, want ErrCredential", len(bad.secret), bad.role, len(bad.name), err)
		}
	}
}
