package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ndma/ndma/mq"
)

// TestMqCommands runs the message queue from the command line on a
// sealed fabric: mq init writes the catalog file, topic create, ls,
// describe and rm manage a topic, produce appends a file's lines and
// consume prints them back (whole, from an offset, and through a group
// that commits where it stopped), topic rebuild rebuilds the counters
// from the log; a command without a credential refuses to run.
func TestMqCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a switch and a memory node")
	}
	addr, _, _, _ := startPoolAuthority(t, 2, 4<<20)
	dir := t.TempDir()
	catalog := filepath.Join(dir, "mq.catalog")
	mqc := func(args ...string) (string, error) {
		return execute(t, append(append([]string{"mq"}, args...), "--switch", addr, "--catalog", catalog)...)
	}
	out, err := mqc("init", "--out", catalog, "--slots", "4", "--json")
	var created struct {
		Region uint32 `json:"region"`
		Mirror uint32 `json:"mirror"`
		Slots  int    `json:"slots"`
	}
	if err != nil || json.Unmarshal([]byte(out), &created) != nil || created.Region == 0 || created.Mirror == 0 || created.Slots != 4 {
		t.Fatalf("init: %q %v", out, err)
	}
	plain := filepath.Join(filepath.Dir(catalog), "plain.catalog")
	if out, err := execute(t, "mq", "init", "--switch", addr, "--out", plain, "--slots", "4", "--no-mirror", "--json"); err != nil ||
		json.Unmarshal([]byte(out), &created) != nil || created.Mirror != 0 {
		t.Fatalf("init --no-mirror: %q %v", out, err)
	}
	if b, err := os.ReadFile(plain); err != nil || strings.Contains(string(b), "mirror") {
		t.Fatalf("the catalog file of a catalog without a mirror: %q %v", b, err)
	}
	if fi, err := os.Stat(catalog); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("catalog file: %v %v", fi, err)
	}
	if _, err := mqc("init", "--out", catalog); err == nil {
		t.Fatal("init overwrote a catalog file")
	}
	if _, err := mqc("topic", "create", "orders", "--partitions", "2", "--segment", "64KiB", "--segments", "4", "--max-batch", "4KiB"); err != nil {
		t.Fatal(err)
	}
	if _, err := mqc("topic", "create", "orders"); !errors.Is(err, mq.ErrExists) {
		t.Fatalf("a second topic named orders: %v", err)
	}
	if _, err := mqc("topic", "create", "bad", "--segments", "1"); !errors.Is(err, mq.ErrBadLayout) {
		t.Fatalf("a topic of one segment: %v", err)
	}
	if out, err := mqc("topic", "ls"); err != nil || out != "orders\n" {
		t.Fatalf("ls: %q %v", out, err)
	}
	lines := filepath.Join(dir, "lines")
	var want []string
	for i := range 10 {
		want = append(want, fmt.Sprint("line ", i))
	}
	if err := os.WriteFile(lines, []byte(strings.Join(want, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := mqc("produce", "orders", "--file", lines, "--partition", "1", "--batch", "4", "--header", "src=test"); err != nil || out != "10 records in 3 batches\n" {
		t.Fatalf("produce: %q %v", out, err)
	}
	if out, err := mqc("consume", "orders"); err != nil || out != strings.Join(want, "\n")+"\n" {
		t.Fatalf("consume: %q %v", out, err)
	}
	out, err = mqc("consume", "orders", "--partition", "1", "--json")
	type record struct {
		Partition int               `json:"partition"`
		Offset    uint64            `json:"offset"`
		Index     int               `json:"index"`
		Value     string            `json:"value"`
		Headers   map[string]string `json:"headers"`
	}
	var recs []record
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var one record
		if json.Unmarshal([]byte(l), &one) != nil {
			t.Fatalf("consume --json: %q", out)
		}
		recs = append(recs, one)
	}
	if err != nil || len(recs) != 10 || recs[4].Index != 0 || recs[4].Offset == 0 || recs[9].Value != "line 9" || recs[9].Headers["src"] != "test" || recs[9].Partition != 1 {
		t.Fatalf("consume --json: %+v %v", recs, err)
	}
	// From the second batch's offset.
	if out, err := mqc("consume", "orders", "--partition", "1", "--offset", fmt.Sprint(recs[4].Offset)); err != nil || !strings.HasPrefix(out, "line 4\n") || strings.Count(out, "\n") != 6 {
		t.Fatalf("consume --offset: %q %v", out, err)
	}
	// A group reads 3, then the rest: it commits where it stopped.
	if out, err := mqc("consume", "orders", "--group", "g", "--count", "3"); err != nil || out != "line 0\nline 1\nline 2\n" {
		t.Fatalf("consume --group --count 3: %q %v", out, err)
	}
	if out, err := mqc("consume", "orders", "--group", "g"); err != nil || !strings.HasPrefix(out, "line 0\n") || !strings.HasSuffix(out, "line 9\n") {
		t.Fatalf("consume --group, again (the batch cut in the middle is read again): %q %v", out, err)
	}
	if out, err := mqc("consume", "orders", "--group", "g"); err != nil || out != "" {
		t.Fatalf("consume --group, at the end: %q %v", out, err)
	}
	out, err = mqc("topic", "describe", "orders", "--json")
	var desc struct {
		Partitions int `json:"partitions"`
		States     []struct {
			Committed, Tail, Holes uint64
		} `json:"partition_state"`
	}
	if err != nil || json.Unmarshal([]byte(out), &desc) != nil || desc.Partitions != 2 || len(desc.States) != 2 ||
		desc.States[1].Committed == 0 || desc.States[1].Committed != desc.States[1].Tail || desc.States[0].Tail != 0 {
		t.Fatalf("describe: %q %v", out, err)
	}
	// Counters rebuilt from the log (here with nothing lost): the log
	// reads back whole, and producing goes on after it.
	out, err = mqc("topic", "rebuild", "orders", "--json")
	var rebuilt struct {
		Holes uint64 `json:"holes"`
	}
	if err != nil || json.Unmarshal([]byte(out), &rebuilt) != nil || rebuilt.Holes != 0 {
		t.Fatalf("rebuild: %q %v", out, err)
	}
	if _, err := mqc("produce", "orders", "--file", lines, "--partition", "1"); err != nil {
		t.Fatal(err)
	}
	if out, err := mqc("consume", "orders"); err != nil || out != strings.Repeat(strings.Join(want, "\n")+"\n", 2) {
		t.Fatalf("consume after the rebuild: %q %v", out, err)
	}
	cred := os.Getenv(credentialEnv)
	os.Unsetenv(credentialEnv)
	_, err = mqc("topic", "ls")
	os.Setenv(credentialEnv, cred)
	if !errors.Is(err, errNoCredential) {
		t.Fatalf("ls without a credential: %v", err)
	}
	if _, err := mqc("topic", "rm", "orders"); err != nil {
		t.Fatal(err)
	}
	if out, err := mqc("topic", "ls"); err != nil || out != "" {
		t.Fatalf("ls after rm: %q %v", out, err)
	}
	if _, err := mqc("consume", "orders"); !errors.Is(err, mq.ErrNotFound) {
		t.Fatalf("consume a removed topic: %v", err)
	}
}
