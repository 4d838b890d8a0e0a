package bench

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// ErrBadValue is wrapped by every parsing error of this file.
var ErrBadValue = errors.New("bench: bad value")

// sizeUnits are the suffixes ParseSize accepts, longest first. All are
// binary: K is 1024.
var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30},
	{"B", 1},
}

// ParseSize parses a byte count: a decimal integer optionally followed by
// K, M or G (also KB/KiB, MB/MiB, GB/GiB; all powers of 1024, case
// insensitive) or B. "64K" is 65536. The result is positive.
func ParseSize(s string) (int, error) {
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range sizeUnits {
		if len(num) > len(u.suffix) && strings.EqualFold(num[len(num)-len(u.suffix):], u.suffix) {
			num, mult = num[:len(num)-len(u.suffix)], u.mult
			break
		}
	}
	if num == "" || num[0] < '0' || num[0] > '9' {
		return 0, fmt.Errorf("%w: size %q: want a number of bytes like 4096, 64K or 1M", ErrBadValue, s)
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n > math.MaxInt32/mult {
		return 0, fmt.Errorf("%w: size %q: want a number of bytes up to 2G", ErrBadValue, s)
	}
	if n == 0 {
		return 0, fmt.Errorf("%w: size %q: must be positive", ErrBadValue, s)
	}
	return int(n * mult), nil
}

// ParseSizes parses a comma-separated list of sizes and ranges. A range
// "lo:hi" stands for the powers of two from lo up to hi, both included
// (lo itself is included even when it is not a power of two): "8:64K" is
// 8, 16, ..., 65536. The result is in the order given, without duplicates.
func ParseSizes(spec string) ([]int, error) {
	var out []int
	seen := make(map[int]bool)
	add := func(n int) {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	for item := range strings.SplitSeq(spec, ",") {
		item = strings.TrimSpace(item)
		lo, hi, isRange := strings.Cut(item, ":")
		a, err := ParseSize(lo)
		if err != nil {
			return nil, err
		}
		if !isRange {
			add(a)
			continue
		}
		b, err := ParseSize(hi)
		if err != nil {
			return nil, err
		}
		if b < a {
			return nil, fmt.Errorf("%w: size range %q: upper bound below lower bound", ErrBadValue, item)
		}
		add(a)
		// Next power of two above a.
		for p := 1 << bits.Len(uint(a)); p <= b; p <<= 1 {
			add(p)
		}
	}
	return out, nil
}

// PowersOfTwo returns lo, 2lo, 4lo, ... up to hi; lo must be positive.
func PowersOfTwo(lo, hi int) []int {
	var out []int
	for n := lo; n <= hi; n *= 2 {
		out = append(out, n)
	}
	return out
}

// FormatSize writes n bytes compactly: 512, 4K, 16M, or plain bytes when
// n is not a whole number of KiB.
func FormatSize(n int) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return strconv.Itoa(n>>30) + "G"
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "M"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "K"
	}
	return strconv.Itoa(n)
}

// ParseRate parses a link rate in bits per second: a decimal number
// optionally followed by k, m, g or t (powers of 1000), itself optionally
// followed by "bit" or "bps", case insensitive: "100mbit", "10gbit",
// "2.5G", "1e9". The result is positive and finite.
func ParseRate(s string) (float64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	for _, suf := range []string{"bit", "bps", "b"} {
		if strings.HasSuffix(t, suf) {
			t = strings.TrimSuffix(t, suf)
			break
		}
	}
	mult := 1.0
	if t != "" {
		switch t[len(t)-1] {
		case 'k':
			mult = 1e3
		case 'm':
			mult = 1e6
		case 'g':
			mult = 1e9
		case 't':
			mult = 1e12
		}
		if mult != 1 {
			t = t[:len(t)-1]
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || !(v > 0) || math.IsInf(v*mult, 0) {
		return 0, fmt.Errorf("%w: rate %q: want a positive bit rate like 100mbit or 10gbit", ErrBadValue, s)
	}
	return v * mult, nil
}

// FormatRate writes a bit rate as 100mbit, 10gbit, etc.
func FormatRate(bps float64) string {
	for _, u := range []struct {
		mult float64
		name string
	}{{1e12, "tbit"}, {1e9, "gbit"}, {1e6, "mbit"}, {1e3, "kbit"}} {
		if bps >= u.mult {
			return strconv.FormatFloat(bps/u.mult, 'g', 4, 64) + u.name
		}
	}
	return strconv.FormatFloat(bps, 'g', 4, 64) + "bit"
}

// ParseKey parses a region key in hexadecimal, with or without a 0x
// prefix. Zero is not a key.
func ParseKey(s string) (uint64, error) {
	t := strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(s), "0x"), "0X")
	k, err := strconv.ParseUint(t, 16, 64)
	if err != nil || k == 0 {
		return 0, fmt.Errorf("%w: key %q: want a non-zero hexadecimal region key", ErrBadValue, s)
	}
	return k, nil
}
