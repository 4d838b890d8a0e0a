package secure

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
)

// The name grammar. A credential's name is what the switch binds its
// holder to, so the authority issues only names of this grammar (Issue
// calls CheckName) and the switch reads them with ParseName.
//
// A label is 1 or more bytes of A-Z, a-z, 0-9, '-' and '_', the first a
// letter or a digit. The bytes a label may not hold are the separators:
// '/' in a credential name, and '.' and '@' in the names of jobs and
// services at the switch.
//
// Credential names, by role:
//
//	member         JOB/RANK    rank RANK of job JOB; RANK a decimal number
//	                           in canonical form (no sign, no leading
//	                           zero) of at most MaxRank
//	               SCOPE/INST  a server of scope SCOPE, instance INST (a
//	                           label whose first byte is a letter)
//	               SCOPE       a server of scope SCOPE
//	client, memory node, switch
//	               NAME        a label
//
// A job or service name at the switch is OWNER, OWNER.SUFFIX or
// OWNER.SUFFIX@GUEST: OWNER is everything before the first '.' or '@'
// (NameScopes), SUFFIX is free, GUEST is a label. The name OWNER alone is
// the job whose ranks the credentials OWNER/RANK bind; OWNER.SUFFIX is a
// group of that job's own (a sub-communicator, a write group). Since no
// label holds a '.', no job name is another's prefix up to a '.': job
// "a" cannot reach the ranks of a job "a.b" because no credential binds
// a rank of "a.b" — it is a's group. GUEST names a second scope whose
// credentials may join the group too (a storage service in the write
// groups of a job's ranks).

// MaxRank is the largest rank a credential name binds: a member id is 16
// bits on the wire.
const MaxRank = 1<<16 - 1

// Name is a credential name taken apart by ParseName.
type Name struct {
	// Scope is the job of a rank credential, the scope of a server's
	// (SCOPE or SCOPE/INST), or the whole name of another role's.
	Scope string
	// Rank is the rank a member credential JOB/RANK binds, -1 for every
	// other name.
	Rank int
	// Instance is INST of a member credential SCOPE/INST, else "".
	Instance string
}

// ParseName checks name against the grammar of role's credential names
// and takes it apart. Its errors wrap ErrIdentity.
func ParseName(role Role, name string) (Name, error) {
	if len(name) == 0 || len(name) > MaxNameLen {
		return Name{}, fmt.Errorf("%w: name of %d bytes (want 1 to %d)", ErrIdentity, len(name), MaxNameLen)
	}
	scope, rest, slash := strings.Cut(name, "/")
	if !slash || role != RoleMember {
		if err := checkLabel(name); err != nil {
			if slash {
				return Name{}, fmt.Errorf("%w: name %q: a %v's name is a label of A-Z, a-z, 0-9, '-' and '_' (only a member's holds a '/')", ErrIdentity, name, role)
			}
			return Name{}, fmt.Errorf("%w: name %q: %s", ErrIdentity, name, err)
		}
		return Name{Scope: name, Rank: -1}, nil
	}
	if err := checkLabel(scope); err != nil {
		return Name{}, fmt.Errorf("%w: name %q: before the '/': %s", ErrIdentity, name, err)
	}
	if err := checkLabel(rest); err != nil {
		return Name{}, fmt.Errorf("%w: name %q: after the '/' (a rank or an instance): %s", ErrIdentity, name, err)
	}
	if c := rest[0]; c >= '0' && c <= '9' {
		n, err := strconv.Atoi(rest)
		if err != nil || n > MaxRank || strconv.Itoa(n) != rest {
			return Name{}, fmt.Errorf("%w: name %q: rank %q is not a decimal number from 0 to %d without leading zeros", ErrIdentity, name, rest, MaxRank)
		}
		return Name{Scope: scope, Rank: n}, nil
	}
	return Name{Scope: scope, Rank: -1, Instance: rest}, nil
}

// CheckName reports whether name is a credential name of role in the
// grammar (ParseName), with an error wrapping ErrIdentity that says why
// not.
func CheckName(role Role, name string) error {
	_, err := ParseName(role, name)
	return err
}

// NameScopes returns the owner and the guest of a job or service name n
// (OWNER, OWNER.SUFFIX or OWNER.SUFFIX@GUEST): the owner is n up to its
// first '.' or '@', the guest what follows n's last '@' when that is a
// label, else "".
func NameScopes(n string) (owner, guest string) {
	owner = n
	if i := strings.IndexAny(n, ".@"); i >= 0 {
		owner = n[:i]
	}
	if i := strings.LastIndexByte(n, '@'); i >= 0 && checkLabel(n[i+1:]) == nil {
		guest = n[i+1:]
	}
	return owner, guest
}

// ScopeTag is the 64-bit tag of scope (a label) that a sealed switch
// writes into every anycast request it relays to a service member: the
// tag of the scope of the requester's certified name (ParseName), so
// that a service can tell which scope asks without trusting the request
// (CallerTag). The tag is the first 8 bytes of SHA-256 over a domain
// label and the scope, never 0: 0 means "no certified requester".
func ScopeTag(scope string) uint64 {
	h := sha256.New()
	h.Write([]byte("ndma scope tag\x00"))
	h.Write([]byte(scope))
	var sum [sha256.Size]byte
	t := binary.BigEndian.Uint64(h.Sum(sum[:0]))
	if t == 0 {
		t = 1
	}
	return t
}

// CallerTag is the tag (ScopeTag) of the scope of the certified name of
// role a switch relays an anycast request for: a member's or a client's
// name; 0 for any other role or a name outside the grammar, which act
// for no scope.
func CallerTag(role Role, name string) uint64 {
	if role != RoleMember && role != RoleClient {
		return 0
	}
	n, err := ParseName(role, name)
	if err != nil {
		return 0
	}
	return ScopeTag(n.Scope)
}

// checkLabel says why s is not a label, or returns nil.
func checkLabel(s string) error {
	if s == "" {
		return fmt.Errorf("empty")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case (c == '-' || c == '_') && i > 0:
		default:
			return fmt.Errorf("byte %d (%q) is not one of A-Z, a-z, 0-9, '-' and '_' (the first a letter or a digit)", i, s[i:i+1])
		}
	}
	return nil
}

// SubGroupName is the name of a group of the scope of the member
// credential named name (ParseName) that a member holding it may
// join: scope.suffix, with "@guest" added when guest is not empty, which
// lets the credentials of scope guest join it too (fabric.RankMay). Without a
// credential (name ""), or with a name outside the grammar, it is suffix
// alone (suffix@guest).
func SubGroupName(name, suffix, guest string) string {
	if guest != "" {
		suffix += "@" + guest
	}
	n, err := ParseName(RoleMember, name)
	if err != nil {
		return suffix
	}
	return n.Scope + "." + suffix
}
