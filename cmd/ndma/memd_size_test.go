package main

import (
	"strings"
	"testing"
)

// TestMemdSizeErrors: sizes in TiB parse, and a size memd cannot serve is
// refused with a message naming --size and the limit, before anything is
// allocated.
func TestMemdSizeErrors(t *testing.T) {
	for _, tc := range []struct {
		size string
		want []string
	}{
		{"2TiB", []string{"--size", "2.0 TiB", "1.0 TiB"}},
		{"1100GB", []string{"--size", "1.0 TiB"}},
		{"9000000TiB", []string{"--size", "8 EiB"}},
		{"12XB", []string{"--size", "1TiB"}},
	} {
		_, err := execute(t, "memd", "--listen", "127.0.0.1:0", "--insecure", "--size", tc.size)
		if err == nil {
			t.Fatalf("memd --size %s: no error", tc.size)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("memd --size %s: %q does not say %q", tc.size, err, w)
			}
		}
	}
}
