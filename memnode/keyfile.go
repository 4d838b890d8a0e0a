package memnode

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/ndma/ndma/wire"
)

// KeySpec is one region a memory node exposes, as read from a key file.
type KeySpec struct {
	Key  uint64 // region key, never zero
	Size int64  // in bytes, 1 to MaxRegionSize
	Perm wire.Perm
}

// KeyFileError is the error LoadKeyFile returns for a bad line. It wraps
// the cause (for example ErrBadPerm, ErrBadSize or ErrKeyInUse).
type KeyFileError struct {
	Line int // 1-based line number
	Err  error
}

func (e *KeyFileError) Error() string {
	return fmt.Sprintf("memnode: key file line %d: %v", e.Line, e.Err)
}

func (e *KeyFileError) Unwrap() error { return e.Err }

// ErrZeroKey is the cause of a KeyFileError for a line whose key is zero,
// which Register would read as "draw a random key".
var ErrZeroKey = errors.New("memnode: region key 0 is reserved")

// LoadKeyFile reads the regions a memory node exposes. Each line is
//
//	<key> <size> <perm>
//
// separated by blanks: key in hexadecimal, with or without a 0x prefix,
// non-zero and unique in the file; size as ParseSize accepts it, 1 to
// MaxRegionSize bytes; perm as ParsePerm accepts it. A '#' starts a
// comment that runs to the end of the line; empty lines are skipped. For
// example:
//
//	# key              size    perm
//	0x5eed00000000001  64MiB   rwav
//	a11ce              4096    r---
//
// A bad line is reported as a *KeyFileError naming the line; LoadKeyFile
// returns no specs then. An empty file yields no specs and no error.
func LoadKeyFile(r io.Reader) ([]KeySpec, error) {
	var specs []KeySpec
	seen := make(map[uint64]int) // key -> line
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		f := strings.Fields(text)
		if len(f) == 0 {
			continue
		}
		spec, err := parseKeyLine(f)
		if err == nil {
			if prev, dup := seen[spec.Key]; dup {
				err = fmt.Errorf("%w: the key of line %d again", ErrKeyInUse, prev)
			}
		}
		if err != nil {
			return nil, &KeyFileError{Line: line, Err: err}
		}
		seen[spec.Key] = line
		specs = append(specs, spec)
	}
	if err := sc.Err(); err != nil {
		return nil, &KeyFileError{Line: line + 1, Err: err}
	}
	return specs, nil
}

func parseKeyLine(f []string) (KeySpec, error) {
	if len(f) != 3 {
		return KeySpec{}, fmt.Errorf("want 3 fields (<hex key> <size> <perm>), have %d", len(f))
	}
	hex := f[0]
	if len(hex) > 2 && (hex[:2] == "0x" || hex[:2] == "0X") {
		hex = hex[2:]
	}
	key, err := strconv.ParseUint(hex, 16, 64)
	if err != nil {
		return KeySpec{}, fmt.Errorf("key %q: %w", f[0], err)
	}
	if key == 0 {
		return KeySpec{}, ErrZeroKey
	}
	size, err := ParseSize(f[1])
	if err != nil {
		return KeySpec{}, err
	}
	if size <= 0 || size > MaxRegionSize {
		return KeySpec{}, fmt.Errorf("%w: %q (want 1 to %d bytes)", ErrBadSize, f[1], int64(MaxRegionSize))
	}
	perm, err := wire.ParsePerm(f[2])
	if err != nil {
		return KeySpec{}, err
	}
	return KeySpec{Key: key, Size: size, Perm: perm}, nil
}

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	// Longest suffixes first, so "KiB" is not read as "...B".
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"B", 1},
}

// ParseSize parses a byte count: a non-negative decimal integer, optionally
// followed (without a space) by a unit — B (bytes), the binary KiB, MiB,
// GiB and TiB (powers of 1024) or the decimal KB, MB, GB and TB (powers of
// 1000, as in SI). Units are matched without regard to case. Examples:
// "4096", "64KiB" (65536), "1MiB", "1GB" (10^9), "1TiB" (2^40). A count
// beyond 2^63-1 bytes (8 EiB, more than any address space holds) is
// refused. Errors wrap ErrBadSize.
func ParseSize(s string) (int64, error) {
	num, mult := s, int64(1)
	for _, u := range sizeUnits {
		if len(s) >= len(u.suffix) && strings.EqualFold(s[len(s)-len(u.suffix):], u.suffix) {
			num, mult = s[:len(s)-len(u.suffix)], u.mult
			break
		}
	}
	if num == "" || num[0] < '0' || num[0] > '9' {
		// Also refuses signs, which ParseInt would take.
		return 0, fmt.Errorf("%w: %q: want a number of bytes like 4096, 64KiB, 1GiB or 1TiB", ErrBadSize, s)
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if errors.Is(err, strconv.ErrRange) || err == nil && n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%w: %q is more than 2^63-1 bytes (8 EiB), beyond any address space", ErrBadSize, s)
	}
	if err != nil {
		return 0, fmt.Errorf("%w: %q: want a number of bytes like 4096, 64KiB, 1GiB or 1TiB", ErrBadSize, s)
	}
	return n * mult, nil
}
