package wire

import (
	"errors"
	"testing"
)

func TestPermString(t *testing.T) {
	for _, tc := range []struct {
		p    Perm
		want string
	}{
		{0, "----"},
		{PermRead, "r---"},
		{PermWrite, "-w--"},
		{PermAtomic, "--a-"},
		{PermVector, "---v"},
		{PermRead | PermWrite, "rw--"},
		{PermAll, "rwav"},
		{PermAll | 0x10, "perm(0x1f)"},
	} {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("Perm(%#x).String() = %q, want %q", uint8(tc.p), got, tc.want)
		}
	}
}

func TestParsePerm(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Perm
	}{
		{"rwav", PermAll},
		{"r---", PermRead},
		{"-w--", PermWrite},
		{"rw-v", PermRead | PermWrite | PermVector},
		{"rw", PermRead | PermWrite},
		{"var", PermRead | PermAtomic | PermVector},
		{"a", PermAtomic},
		{"----", 0},
		{"-", 0},
	} {
		got, err := ParsePerm(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParsePerm(%q) = %v, %v; want %v, nil", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "rwx", "rr", "R", "rwav ", "all", "rwavr", "r\x00"} {
		if p, err := ParsePerm(in); !errors.Is(err, ErrBadPerm) {
			t.Errorf("ParsePerm(%q) = %v, %v; want ErrBadPerm", in, p, err)
		}
	}
	// Round trip.
	for p := Perm(0); p <= PermAll; p++ {
		got, err := ParsePerm(p.String())
		if err != nil || got != p {
			t.Errorf("ParsePerm(%q) = %v, %v; want %v", p.String(), got, err, p)
		}
	}
}
