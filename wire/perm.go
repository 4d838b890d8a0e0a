package wire

import (
	"errors"
	"fmt"
	"strings"
)

// Perm is the set of operations a region allows. Each opcode needs exactly
// its own bit: a region may, for example, accept vector accumulation
// (PermVector) while refusing plain writes.
type Perm uint8

// Permission bits.
const (
	PermRead   Perm = 1 << iota // OpRead
	PermWrite                   // OpWrite
	PermAtomic                  // OpCAS, OpFetchAdd
	PermVector                  // OpVector (element-wise ALU ops into memory)

	// PermAll allows every operation.
	PermAll = PermRead | PermWrite | PermAtomic | PermVector
)

const permLetters = "rwav" // one letter per bit, in bit order

// String writes p as four positional letters, "rwav", with '-' for a
// missing permission: "r---" is read-only, "----" allows nothing. A value
// with bits outside PermAll is written as "perm(0x..)".
func (p Perm) String() string {
	if p&^PermAll != 0 {
		return fmt.Sprintf("perm(%#02x)", uint8(p))
	}
	var b [len(permLetters)]byte
	for i := range b {
		if p&(1<<i) != 0 {
			b[i] = permLetters[i]
		} else {
			b[i] = '-'
		}
	}
	return string(b[:])
}

// ErrBadPerm is returned (wrapped) by ParsePerm for a malformed permission
// string and by Register and Alloc for a Perm with unknown bits.
var ErrBadPerm = errors.New("memnode: bad permission")

// ParsePerm parses a permission string: the letters r (read), w (write),
// a (atomic) and v (vector), each at most once and in any order, with '-'
// allowed as a placeholder. It accepts what Perm.String writes ("rw-v") as
// well as the short form ("rw"). "----" or "-" is the empty set; the empty
// string is an error.
func ParsePerm(s string) (Perm, error) {
	if s == "" {
		return 0, fmt.Errorf("%w: empty string", ErrBadPerm)
	}
	var p Perm
	for _, c := range s {
		if c == '-' {
			continue
		}
		i := strings.IndexRune(permLetters, c)
		if i < 0 {
			return 0, fmt.Errorf("%w: %q: unknown letter %q (want r, w, a, v or -)", ErrBadPerm, s, c)
		}
		bit := Perm(1) << i
		if p&bit != 0 {
			return 0, fmt.Errorf("%w: %q: letter %q repeated", ErrBadPerm, s, c)
		}
		p |= bit
	}
	return p, nil
}
