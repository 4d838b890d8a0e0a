package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// hookWriter is a command's standard output that calls hook with all
// written so far after every write: a test acts at the moment the command
// has printed something (as a user pressing Ctrl-C would).
type hookWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	hook func(out string)
}

func (w *hookWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if w.hook != nil {
		w.hook(w.buf.String())
	}
	return len(p), nil
}

// writeTestFile writes n bytes of a pattern to dir/name and returns its
// path and the bytes.
func writeTestFile(t *testing.T, dir, name string, n int) (string, []byte) {
	t.Helper()
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i*7 + 1)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p, data
}

// poolRegions returns the ids of the regions pool ls lists.
func poolRegions(t *testing.T, addr string) []uint32 {
	t.Helper()
	out, err := execute(t, "pool", "ls", "--switch", addr, "--json")
	var rows []struct {
		Region uint32 `json:"region"`
	}
	if err != nil || json.Unmarshal([]byte(out), &rows) != nil {
		t.Fatalf("pool ls: %v %q", err, out)
	}
	var ids []uint32
	for _, r := range rows {
		ids = append(ids, r.Region)
	}
	return ids
}

// TestPoolPutInterrupted cancels pool put's context (what Ctrl-C does) the
// moment it has printed the new region's key, before any data moved: the
// id and key were printed and written to --id-file by then, and put frees
// the region it created (it is gone from pool ls, its key opens nothing)
// and removes the id file.
func TestPoolPutInterrupted(t *testing.T) {
	addr, _, _ := startPool(t, 2, 1<<20)
	dir := t.TempDir()
	in, _ := writeTestFile(t, dir, "in.bin", 100<<10)
	idFile := filepath.Join(dir, "region")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var announced, idLine string
	out := &hookWriter{hook: func(s string) {
		if announced == "" && strings.Contains(s, "key ") {
			announced = s
			b, _ := os.ReadFile(idFile)
			idLine = string(b)
			cancel()
		}
	}}
	err := executeContext(t, ctx, out, "pool", "put", in, "--switch", addr, "--id-file", idFile)
	if !errors.Is(err, errInterrupted) || !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted put: %v (want interrupted, context canceled)", err)
	}
	var id uint32
	var key string
	if _, err := fmt.Sscanf(idLine, "%d %s\n", &id, &key); err != nil || id == 0 || !strings.HasPrefix(key, "0x") {
		t.Fatalf("--id-file held %q when the key was printed (%v)", idLine, err)
	}
	if !strings.Contains(announced, fmt.Sprintf("region  %d\n", id)) || !strings.Contains(announced, "key     "+key+"\n") {
		t.Fatalf("printed before the transfer: %q, id file %q", announced, idLine)
	}
	if want := fmt.Sprintf("region %d, created by this put, is freed", id); !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
	if strings.Contains(out.buf.String(), "Mbit/s") {
		t.Fatalf("interrupted put reported a transfer: %q", out.buf.String())
	}
	if ids := poolRegions(t, addr); len(ids) != 0 {
		t.Fatalf("pool ls after the interrupted put: regions %v, want none", ids)
	}
	if _, err := execute(t, "pool", "get", strconv.Itoa(int(id)), "--switch", addr, "--key", key, "--length", "1"); err == nil {
		t.Fatal("the freed region still opens with its key")
	}
	if _, err := os.Stat(idFile); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("--id-file of the freed region: %v, want removed", err)
	}
}

// TestPoolPutInterruptedDuringCreate runs pool put with its context
// already canceled, as when Ctrl-C comes while the switch is creating the
// region: the create is not abandoned (the switch may have made the
// region, and only its answer carries the key), the region is printed and
// then freed.
func TestPoolPutInterruptedDuringCreate(t *testing.T) {
	addr, _, _ := startPool(t, 1, 1<<20)
	in, _ := writeTestFile(t, t.TempDir(), "in.bin", 10<<10)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out hookWriter
	err := executeContext(t, ctx, &out, "pool", "put", in, "--switch", addr)
	if !errors.Is(err, errInterrupted) || !strings.Contains(err.Error(), "region 1, created by this put, is freed") {
		t.Fatalf("put interrupted during the create: %v", err)
	}
	if !strings.Contains(out.buf.String(), "region  1\nkey     0x") {
		t.Fatalf("put interrupted during the create printed %q, want the region and key", out.buf.String())
	}
	if ids := poolRegions(t, addr); len(ids) != 0 {
		t.Fatalf("pool ls after the interrupted put: regions %v, want none", ids)
	}
}

// TestPoolPutInterruptedSwitchGone interrupts pool put --json after its
// first line (the new region) while the switch is gone, so the region
// cannot be freed: the error names the region and key that remain and the
// command that removes them, and --id-file keeps them.
func TestPoolPutInterruptedSwitchGone(t *testing.T) {
	addr, srv, _ := startPool(t, 1, 1<<20)
	dir := t.TempDir()
	in, _ := writeTestFile(t, dir, "in.bin", 50<<10)
	idFile := filepath.Join(dir, "region")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var first string
	out := &hookWriter{hook: func(s string) {
		if first == "" && strings.Contains(s, "\n") {
			first = s
			srv.Close()
			cancel()
		}
	}}
	err := executeContext(t, ctx, out, "pool", "put", in, "--switch", addr, "--id-file", idFile, "--json", "--timeout", "2s")
	var region struct {
		Region uint32 `json:"region"`
		Key    string `json:"key"`
		Size   int    `json:"size"`
	}
	if jerr := json.Unmarshal([]byte(first), &region); jerr != nil || region.Region == 0 || region.Key == "" || region.Size != 50<<10 {
		t.Fatalf("first line %q (%v): want the new region with its key; put: %v", first, jerr, err)
	}
	if !errors.Is(err, errInterrupted) || !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted put: %v", err)
	}
	for _, want := range []string{
		fmt.Sprintf("region %d (key %s), created by this put, could not be freed", region.Region, region.Key),
		fmt.Sprintf("ndma pool rm %d --key %s --switch %s", region.Region, region.Key, addr),
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if b, err := os.ReadFile(idFile); err != nil || string(b) != fmt.Sprintf("%d %s\n", region.Region, region.Key) {
		t.Fatalf("--id-file of the region left: %q (%v)", b, err)
	}
}

// TestPoolFailedTransfers makes transfers fail half-way (a memory node of a
// single-copy region is dead, so the switch refuses its stripes): pool get
// -o leaves an existing file as it was and creates no missing one, with no
// temporary file left behind; pool put into an existing region never frees
// it.
func TestPoolFailedTransfers(t *testing.T) {
	addr, _, nodes := startPool(t, 2, 1<<20)
	dir := t.TempDir()
	in, data := writeTestFile(t, dir, "in.bin", 256<<10)
	out, err := execute(t, "pool", "put", in, "--switch", addr, "--stripe", "4KiB", "--json")
	var put struct {
		Region uint32 `json:"region"`
		Key    string `json:"key"`
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil || json.Unmarshal([]byte(lines[len(lines)-1]), &put) != nil || put.Region == 0 {
		t.Fatalf("put: %v %q", err, out)
	}
	id := strconv.Itoa(int(put.Region))
	existing := filepath.Join(dir, "existing.bin")
	if err := os.WriteFile(existing, []byte("keep me"), 0o640); err != nil {
		t.Fatal(err)
	}
	// While both nodes are alive, get -o replaces the file whole and
	// keeps its mode.
	if _, err := execute(t, "pool", "get", id, "--switch", addr, "--key", put.Key, "-o", existing); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(existing); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("get -o over a file: other bytes (%v)", err)
	}
	if fi, err := os.Stat(existing); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("get -o over a 0640 file: %v %v", fi.Mode(), err)
	}
	if err := os.WriteFile(existing, []byte("keep me"), 0o640); err != nil {
		t.Fatal(err)
	}

	nodes[1].Close()
	waitAlive(t, addr, 1)
	if _, err := execute(t, "pool", "get", id, "--switch", addr, "--key", put.Key, "-o", existing); err == nil || !strings.Contains(err.Error(), "left as it was") || errors.Is(err, errInterrupted) {
		t.Fatalf("get with a dead node: %v", err)
	}
	if got, err := os.ReadFile(existing); err != nil || string(got) != "keep me" {
		t.Fatalf("failed get -o changed the existing file to %q (%v)", got, err)
	}
	missing := filepath.Join(dir, "missing.bin")
	if _, err := execute(t, "pool", "get", id, "--switch", addr, "--key", put.Key, "-o", missing); err == nil {
		t.Fatal("get with a dead node: no error")
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("failed get -o created %s: %v", missing, err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if want := []string{"existing.bin", "in.bin"}; !slices.Equal(names, want) {
		t.Fatalf("directory after failed gets: %v, want %v (no temporary files)", names, want)
	}

	if _, err := execute(t, "pool", "put", in, "--switch", addr, "--region", id, "--key", put.Key); err == nil || !strings.Contains(err.Error(), "stopped after") || errors.Is(err, errInterrupted) {
		t.Fatalf("put into a region with a dead node: %v", err)
	}
	if ids := poolRegions(t, addr); !slices.Equal(ids, []uint32{put.Region}) {
		t.Fatalf("pool ls after a failed put into region %d: %v (a put into an existing region never frees it)", put.Region, ids)
	}
}
