package secure

import (
	"crypto/rand"
	"errors"
	"strings"
	"testing"
)

// TestParseName: the credential names of each role, taken apart, and the
// names refused with the reason.
func TestParseName(t *testing.T) {
	ok := []struct {
		role Role
		name string
		want Name
	}{
		{RoleMember, "train-42/0", Name{Scope: "train-42", Rank: 0}},
		{RoleMember, "train-42/17", Name{Scope: "train-42", Rank: 17}},
		{RoleMember, "j/65535", Name{Scope: "j", Rank: MaxRank}},
		{RoleMember, "stor/s0", Name{Scope: "stor", Rank: -1, Instance: "s0"}},
		{RoleMember, "kv/node_a-1", Name{Scope: "kv", Rank: -1, Instance: "node_a-1"}},
		{RoleMember, "kv", Name{Scope: "kv", Rank: -1}},
		{RoleMember, "0x", Name{Scope: "0x", Rank: -1}},
		{RoleClient, "alice", Name{Scope: "alice", Rank: -1}},
		{RoleMemoryNode, "mem-0", Name{Scope: "mem-0", Rank: -1}},
		{RoleSwitch, "SW_1", Name{Scope: "SW_1", Rank: -1}},
		{RoleClient, strings.Repeat("c", MaxNameLen), Name{Scope: strings.Repeat("c", MaxNameLen), Rank: -1}},
	}
	for _, c := range ok {
		got, err := ParseName(c.role, c.name)
		if err != nil || got != c.want {
			t.Errorf("ParseName(%v, %q) = %+v, %v; want %+v", c.role, c.name, got, err, c.want)
		}
		if err := CheckName(c.role, c.name); err != nil {
			t.Errorf("CheckName(%v, %q): %v", c.role, c.name, err)
		}
	}
	bad := []struct {
		role Role
		name string
		why  string
	}{
		{RoleMember, "train-42/01", "leading zeros"},
		{RoleMember, "train-42/0/x", "after the '/'"},
		{RoleMember, "train-42/+1", "after the '/'"},
		{RoleMember, "train-42/65536", "leading zeros"},
		{RoleMember, "train-42/99999999999999999999", "leading zeros"},
		{RoleMember, "train-42.v2/1", "before the '/'"},
		{RoleMember, "train-42.v2", `"."`},
		{RoleMember, "/0", "before the '/'"},
		{RoleMember, "train/", "after the '/'"},
		{RoleMember, "train/-a", "after the '/'"},
		{RoleMember, "stor@x/s0", "before the '/'"},
		{RoleMember, "a:b", `":"`},
		{RoleMember, "-a", `"-"`},
		{RoleMember, "rank 3", `" "`},
		{RoleMember, "", "0 bytes"},
		{RoleClient, "evil/0", "only a member's"},
		{RoleMemoryNode, "mem/0", "only a member's"},
		{RoleSwitch, "sw.0", `"."`},
		{RoleClient, "mem\xff", `"\xff"`},
		{RoleClient, strings.Repeat("c", MaxNameLen+1), "65 bytes"},
	}
	for _, c := range bad {
		_, err := ParseName(c.role, c.name)
		if !errors.Is(err, ErrIdentity) || !strings.Contains(err.Error(), c.why) {
			t.Errorf("ParseName(%v, %q): %v; want ErrIdentity saying %s", c.role, c.name, err, c.why)
		}
		if err := CheckName(c.role, c.name); !errors.Is(err, ErrIdentity) {
			t.Errorf("CheckName(%v, %q): %v", c.role, c.name, err)
		}
	}
}

// TestIssueChecksName: the authority issues no credential whose name is
// outside its role's grammar, so none binds nothing or something else
// than it reads.
func TestIssueChecksName(t *testing.T) {
	a := authority(t, "fabric secret of the name tests")
	for _, c := range []struct {
		role Role
		name string
	}{{RoleMember, "train-42/01"}, {RoleMember, "train-42/0/x"}, {RoleMember, "train-42.v2/1"}, {RoleClient, "evil/0"}, {RoleMember, "x:y"}} {
		if id, err := a.Issue(c.role, c.name, rand.Reader); !errors.Is(err, ErrIdentity) {
			t.Errorf("Issue(%v, %q) = %v, %v; want ErrIdentity", c.role, c.name, id, err)
		}
	}
	id, err := a.Issue(RoleMember, "train-42/1", rand.Reader)
	if err != nil || id.Cert.Name != "train-42/1" {
		t.Fatalf("Issue(member, train-42/1): %v", err)
	}
}

// TestNameScopes: the owner and guest of job and service names.
func TestNameScopes(t *testing.T) {
	for _, c := range []struct{ n, owner, guest string }{
		{"train", "train", ""},
		{"train.0/s1/c2", "train", ""},
		{"train.v2", "train", ""},
		{"train-42", "train-42", ""},
		{"train.stor.w00ff@stor", "train", "stor"},
		{"train@stor", "train", "stor"},
		{"a.b@c.d", "a", ""},
		{"a.b@", "a", ""},
		{"a.b@x@y", "a", "y"},
		{"@stor", "", "stor"},
		{".x", "", ""},
	} {
		if o, g := NameScopes(c.n); o != c.owner || g != c.guest {
			t.Errorf("NameScopes(%q) = %q, %q; want %q, %q", c.n, o, g, c.owner, c.guest)
		}
	}
}
