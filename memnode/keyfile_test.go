package memnode

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/ndma/ndma/wire"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"4096", 4096},
		{"4096B", 4096},
		{"1b", 1},
		{"64KiB", 64 << 10},
		{"64kib", 64 << 10},
		{"1MiB", 1 << 20},
		{"3GiB", 3 << 30},
		{"2KB", 2000},
		{"5MB", 5_000_000},
		{"1GB", 1_000_000_000},
		{"8589934591GiB", 8589934591 << 30},
		{"9223372036854775807", 9223372036854775807},
		{"1TiB", 1 << 40},
		{"2tib", 2 << 40},
		{"1TB", 1_000_000_000_000},
		{"8388607TiB", 8388607 << 40},
	} {
		got, err := ParseSize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{
		"", "B", "KiB", "-1", "+1", "1.5MiB", "1 MiB", " 1", "1PiB", "1KiBB",
		"1iB", "0x10", "1_000", "12abc", "8589934592GiB", "9223372036854775808",
		"8388608TiB", "9223372036854775808TB", "99999999999999999999",
	} {
		if got, err := ParseSize(in); !errors.Is(err, ErrBadSize) {
			t.Errorf("ParseSize(%q) = %d, %v; want ErrBadSize", in, got, err)
		}
	}
}

func TestLoadKeyFile(t *testing.T) {
	in := `# memory node regions
0x5eed00000000001  64MiB   rwav
a11ce              4096    r---   # read-only

  0XFF 1KB rw  
ffffffffffffffff 1 ----
`
	got, err := LoadKeyFile(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []KeySpec{
		{0x5eed00000000001, 64 << 20, wire.PermAll},
		{0xa11ce, 4096, wire.PermRead},
		{0xff, 1000, wire.PermRead | wire.PermWrite},
		{0xffffffffffffffff, 1, 0},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("LoadKeyFile = %+v, want %+v", got, want)
	}

	for _, in := range []string{"", "\n\n", "# nothing\n   # here\n"} {
		got, err := LoadKeyFile(strings.NewReader(in))
		if err != nil || len(got) != 0 {
			t.Errorf("LoadKeyFile(%q) = %v, %v; want nothing", in, got, err)
		}
	}
}

func TestLoadKeyFileErrors(t *testing.T) {
	const good = "1 4096 rwav\n"
	for _, tc := range []struct {
		name string
		line string // appended after the good line, so errors are on line 2
		is   error  // nil: only a *KeyFileError is required
	}{
		{"too few fields", "2 4096", nil},
		{"too many fields", "2 4096 rw extra", nil},
		{"bad hex", "xyz 4096 rw", strconv.ErrSyntax},
		{"key too big", "1ffffffffffffffff 4096 rw", strconv.ErrRange},
		{"bare 0x", "0x 4096 rw", strconv.ErrSyntax},
		{"zero key", "0 4096 rw", ErrZeroKey},
		{"zero key 0x", "0x0000 4096 rw", ErrZeroKey},
		{"duplicate key", "0x01 8 r", ErrKeyInUse},
		{"bad size", "2 lots rw", ErrBadSize},
		{"zero size", "2 0 rw", ErrBadSize},
		{"size over MaxRegionSize", "2 1025GiB rw", ErrBadSize},
		{"bad perm", "2 4096 rwx", wire.ErrBadPerm},
	} {
		t.Run(tc.name, func(t *testing.T) {
			specs, err := LoadKeyFile(strings.NewReader(good + tc.line + "\n" + "3 1 r\n"))
			var kfe *KeyFileError
			if !errors.As(err, &kfe) {
				t.Fatalf("err = %v (%T), want *KeyFileError", err, err)
			}
			if kfe.Line != 2 {
				t.Errorf("Line = %d, want 2 (err %v)", kfe.Line, err)
			}
			if !strings.Contains(err.Error(), "line 2") {
				t.Errorf("error %q does not name the line", err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("err = %v, want errors.Is %v", err, tc.is)
			}
			if specs != nil {
				t.Errorf("specs = %v, want nil on error", specs)
			}
		})
	}

	// A read error is reported too.
	boom := errors.New("boom")
	_, err := LoadKeyFile(iotest.ErrReader(boom))
	if !errors.Is(err, boom) {
		t.Fatalf("LoadKeyFile(failing reader): err = %v, want boom", err)
	}
}
