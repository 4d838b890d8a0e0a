package memd

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ndma/ndma/memnode"
)

// fakeMemory makes Start see a machine with ram bytes of memory.
func fakeMemory(t *testing.T, ram int64) {
	t.Helper()
	old := physMem
	physMem = func() (int64, bool) { return ram, true }
	t.Cleanup(func() { physMem = old })
}

// TestStartRefusesMoreThanMemory: regions larger than the machine's RAM
// are refused at Start with an error saying how much was asked and how
// much there is, before anything is allocated (the runtime would abort
// the process with "out of memory" instead).
func TestStartRefusesMoreThanMemory(t *testing.T) {
	fakeMemory(t, 3<<20)
	_, err := Start(Config{Listen: "127.0.0.1:0", Size: 4 << 20})
	fe, ok := errors.AsType[*FieldError](err)
	if !ok || fe.Field != "Size" || !errors.Is(err, ErrExceedsMemory) {
		t.Fatalf("Start(4 MiB on a 3 MiB machine): %v; want a *FieldError for Size wrapping ErrExceedsMemory", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "4.0 MiB") || !strings.Contains(msg, "3.0 MiB") {
		t.Errorf("error %q does not say what was asked and what there is", msg)
	}

	// A key file's regions count together.
	kf := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(kf, []byte("0x1 2MiB rwav\n0x2 2MiB r---\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Start(Config{Listen: "127.0.0.1:0", KeyFile: kf})
	if fe, ok := errors.AsType[*FieldError](err); !ok || fe.Field != "KeyFile" || !errors.Is(err, ErrExceedsMemory) {
		t.Fatalf("Start(key file of 4 MiB on a 3 MiB machine): %v; want a *FieldError for KeyFile wrapping ErrExceedsMemory", err)
	}

	// What fits starts.
	srv, err := Start(Config{Listen: "127.0.0.1:0", Size: 3 << 20})
	if err != nil {
		t.Fatalf("Start(3 MiB on a 3 MiB machine): %v", err)
	}
	srv.Close()
}

// TestStartLargestRegionOnThisMachine asks for the largest region
// (memnode.MaxRegionSize, 1 TiB) on the machine the test runs on: unless
// the machine has that much memory, Start refuses it with an error rather
// than the runtime aborting the process.
func TestStartLargestRegionOnThisMachine(t *testing.T) {
	ram, ok := physicalMemory()
	if !ok {
		t.Skip("this system does not report its memory")
	}
	if ram >= memnode.MaxRegionSize {
		t.Skipf("this machine has %d bytes of memory, enough for the largest region", ram)
	}
	srv, err := Start(Config{Listen: "127.0.0.1:0", Size: memnode.MaxRegionSize})
	if err == nil {
		srv.Close()
		t.Fatal("Start of a 1 TiB region succeeded")
	}
	if !errors.Is(err, ErrExceedsMemory) {
		t.Fatalf("Start: %v; want ErrExceedsMemory", err)
	}
	t.Log(err)
}

// TestStartWarnsAboveAvailable: regions within the machine's RAM but
// above the memory available now start, with a warning saying both.
func TestStartWarnsAboveAvailable(t *testing.T) {
	fakeMemory(t, 64<<20)
	old := availMem
	availMem = func() (int64, bool) { return 2 << 20, true }
	t.Cleanup(func() { availMem = old })
	var logs bytes.Buffer
	srv, err := Start(Config{Listen: "127.0.0.1:0", Size: 4 << 20, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("Start(4 MiB with 2 MiB available): %v", err)
	}
	srv.Close()
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "4.0 MiB") || !strings.Contains(logs.String(), "2.0 MiB") {
		t.Errorf("no warning naming the regions' size and the memory available:\n%s", logs.String())
	}
	if avail, ok := availableMemory(); ok && avail <= 0 {
		t.Errorf("available memory %d", avail)
	}
}
