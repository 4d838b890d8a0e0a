package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestMqServeKcat runs ndma mq serve on a sealed fabric and kcat, the
// librdkafka command-line client, against it: kcat -P produces lines to
// a partition, kcat -C reads them back with their offsets (growing),
// and ndma mq consume reads the same records from the pool; mq serve
// refuses a non-loopback address without --expose.
func TestMqServeKcat(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a switch, a memory node and mq serve")
	}
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat is not installed (Debian package kcat)")
	}
	addr, _, _, _ := startPoolAuthority(t, 1, 8<<20)
	catalog := filepath.Join(t.TempDir(), "mq.catalog")
	mqc := func(args ...string) (string, error) {
		return execute(t, append(append([]string{"mq"}, args...), "--switch", addr, "--catalog", catalog)...)
	}
	if _, err := mqc("init", "--out", catalog, "--slots", "4", "--no-mirror"); err != nil { // one memory node
		t.Fatal(err)
	}
	if _, err := mqc("topic", "create", "orders", "--partitions", "2", "--segment", "64KiB", "--segments", "4", "--max-batch", "16KiB"); err != nil {
		t.Fatal(err)
	}
	if _, err := mqc("serve", "--kafka", "0.0.0.0:9092"); err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Fatalf("mq serve on 0.0.0.0: %v", err)
	}
	d := startDaemon(t, "mq", "serve", "--switch", addr, "--catalog", catalog, "--kafka", "127.0.0.1:0")
	var want []string
	for i := range 150 {
		want = append(want, fmt.Sprint("line ", i))
	}
	produce := exec.Command(kcat, "-b", d.addr, "-P", "-t", "orders", "-p", "1")
	produce.Stdin = strings.NewReader(strings.Join(want, "\n") + "\n")
	if out, err := produce.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v\n%s\n%s", err, out, d.logs())
	}
	out, err := exec.Command(kcat, "-b", d.addr, "-C", "-t", "orders", "-p", "1", "-o", "beginning", "-e", "-q", "-f", "%o %s\n").CombinedOutput()
	if err != nil {
		t.Fatalf("kcat -C: %v\n%s\n%s", err, out, d.logs())
	}
	var got []string
	last := int64(-1)
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		off, v, _ := strings.Cut(l, " ")
		o, err := strconv.ParseInt(off, 10, 64)
		if err != nil || o <= last {
			t.Fatalf("kcat -C: offset %q after %d", off, last)
		}
		last = o
		got = append(got, v)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("kcat -C read %d records:\n%s", len(got), out)
	}
	if out, err := mqc("consume", "orders", "--partition", "1"); err != nil || out != strings.Join(want, "\n")+"\n" {
		t.Fatalf("mq consume: %q %v", out, err)
	}
}

// TestServeRefusesJSON: the serve commands print no results, so the
// pool commands' --json, which they inherit, is refused, not ignored.
func TestServeRefusesJSON(t *testing.T) {
	for _, args := range [][]string{
		{"mq", "serve", "--kafka", "127.0.0.1:0", "--json"},
		{"kv", "serve", "--space", "s", "--redis", "127.0.0.1:0", "--json"},
	} {
		_, err := execute(t, args...)
		if err == nil || !strings.Contains(err.Error(), "--json") {
			t.Errorf("%v: %v, want --json refused", args, err)
		}
	}
}
