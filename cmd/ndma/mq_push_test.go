package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ndma/ndma/secure"
)

// TestMqPushAndTimeCommands runs produce --push and consume --push with
// member credentials of scope mq on a sealed fabric, consume
// --from-time, and topic expire.
func TestMqPushAndTimeCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a switch and a memory node")
	}
	addr, _, _, a := startPoolAuthority(t, 1, 4<<20)
	dir := t.TempDir()
	catalog := filepath.Join(dir, "mq.catalog")
	member := func(name string) string {
		b, err := issueIdentity(t, a, secure.RoleMember, name).Encode()
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, strings.ReplaceAll(name, "/", "-")+".cred")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	prodCred, subCred := member("mq/producer"), member("mq/subscriber")
	mqc := func(args ...string) (string, error) {
		return execute(t, append(append([]string{"mq"}, args...), "--switch", addr, "--catalog", catalog)...)
	}
	if _, err := mqc("init", "--out", catalog, "--slots", "2", "--no-mirror"); err != nil { // one memory node
		t.Fatal(err)
	}
	if _, err := mqc("topic", "create", "events", "--partitions", "1", "--segment", "4KiB", "--segments", "8", "--max-batch", "1KiB"); err != nil {
		t.Fatal(err)
	}
	write := func(name string, lines ...string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	if out, err := mqc("produce", "events", "--file", write("old", "a", "b"), "--batch", "1", "--push", "--credential", prodCred); err != nil || out != "2 records in 2 batches\n" {
		t.Fatalf("produce --push: %q %v", out, err)
	}
	time.Sleep(20 * time.Millisecond)
	between := time.Now()
	time.Sleep(20 * time.Millisecond)
	if _, err := mqc("produce", "events", "--file", write("new", "c", "d"), "--batch", "1"); err != nil {
		t.Fatal(err)
	}
	if out, err := mqc("consume", "events", "--from-time", between.Format(time.RFC3339Nano)); err != nil || out != "c\nd\n" {
		t.Fatalf("consume --from-time: %q %v", out, err)
	}
	if out, err := mqc("consume", "events", "--from-time", "1h"); err != nil || out != "a\nb\nc\nd\n" {
		t.Fatalf("consume --from-time 1h: %q %v", out, err)
	}
	if _, err := mqc("consume", "events", "--from-time", "yesterday"); err == nil || !strings.Contains(err.Error(), "RFC 3339") {
		t.Fatalf("consume --from-time yesterday: %v", err)
	}
	// A subscriber with nothing pushed to it reads the log.
	if out, err := mqc("consume", "events", "--push", "--count", "3", "--wait", "5s", "--credential", subCred); err != nil || out != "a\nb\nc\n" {
		t.Fatalf("consume --push: %q %v", out, err)
	}
	// Expiry: nothing is an hour old; everything is older than a
	// moment from now, but the segment the log ends in stays.
	out, err := mqc("topic", "expire", "events", "--older-than", "1h", "--json")
	var exp struct {
		Starts []uint64 `json:"starts"`
	}
	if err != nil || json.Unmarshal([]byte(out), &exp) != nil || len(exp.Starts) != 1 || exp.Starts[0] != 0 {
		t.Fatalf("expire --older-than 1h: %q %v", out, err)
	}
	if _, err := mqc("topic", "expire", "events", "--older-than", "0s"); err == nil {
		t.Fatal("expire --older-than 0s was taken")
	}
	var lines []string
	for i := range 60 {
		lines = append(lines, fmt.Sprint(strings.Repeat("x", 200), i))
	}
	if _, err := mqc("produce", "events", "--file", write("many", lines...), "--batch", "1"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if out, err := mqc("topic", "expire", "events", "--older-than", "1ms"); err != nil || out == "partition 0: starts at 0\n" {
		t.Fatalf("expire --older-than 1ms: %q %v", out, err)
	}
	if out, err := mqc("consume", "events", "--from-time", "1h", "--count", "1"); err != nil || out == "a\n" {
		t.Fatalf("consume after the expiry: %q %v", out, err)
	}
	// Records' own times, out of order in one batch: consume --json
	// prints them, and --from-time finds their batch by its newest.
	late, early := "2030-01-02T03:04:05.123456789Z", "2029-01-02T03:04:05Z"
	if _, err := mqc("produce", "events", "--file", write("timed", late+" late", early+" early"), "--timestamps"); err != nil {
		t.Fatal(err)
	}
	out, err = mqc("consume", "events", "--from-time", "2029-06-01T00:00:00Z", "--json")
	var got []string
	for line := range strings.Lines(out) {
		var r struct{ Value, Timestamp string }
		if json.Unmarshal([]byte(line), &r) != nil {
			t.Fatalf("consume --json: %q", line)
		}
		got = append(got, r.Timestamp+" "+r.Value)
	}
	if err != nil || strings.Join(got, ",") != late+" late,"+early+" early" {
		t.Fatalf("consume --from-time --json: %q %v", out, err)
	}
	if _, err := mqc("produce", "events", "--file", write("bad", "yesterday x"), "--timestamps"); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("produce --timestamps with no time: %v", err)
	}
}
