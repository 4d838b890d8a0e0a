package memd

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ndma/ndma/internal/secretfile"
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire"
)

// chmod sets the mode of the file at p and returns p.
func chmod(t *testing.T, p string, mode os.FileMode) string {
	t.Helper()
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func writeKeyFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestKeyFile starts a node from a key file and uses its regions with the
// file's keys and permissions.
func TestKeyFile(t *testing.T) {
	const rwKey, roKey = 0x5eed000000000001, 0xa11ce
	srv := start(t, Config{KeyFile: writeKeyFile(t, `
# key              size    perm
0x5eed000000000001 1MiB    rwav
a11ce              4096    r---   # read-only
`)})
	want := []memnode.RegionInfo{
		{Key: roKey, Size: 4096, Perm: wire.PermRead},
		{Key: rwKey, Size: 1 << 20, Perm: wire.PermAll},
	}
	got := srv.Regions()
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("Regions() = %+v, want %+v", got, want)
	}
	if srv.RegionBytes() != 4096+1<<20 {
		t.Errorf("RegionBytes() = %d", srv.RegionBytes())
	}
	ctx := testCtx(t)
	r := dial(t, ctx, srv)
	msg := []byte("written with the key from the file")
	if err := r.Write(ctx, rwKey, 1<<20-uint64(len(msg)), msg); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, len(msg))
	if err := r.Read(ctx, rwKey, 1<<20-uint64(len(msg)), back); err != nil || string(back) != string(msg) {
		t.Fatalf("read back %q, %v", back, err)
	}
	if err := r.Read(ctx, roKey, 4096-8, back[:8]); err != nil {
		t.Errorf("read from the read-only region: %v", err)
	}
	if err := r.Write(ctx, roKey, 0, msg); !errors.Is(err, wire.StatusPermission) {
		t.Errorf("write to the read-only region: %v, want %v", err, wire.StatusPermission)
	}
}

// TestStartErrors checks that bad configurations and key files fail Start
// with a *FieldError naming the field, wrapping the right cause.
func TestStartErrors(t *testing.T) {
	busy, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyTCP, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busyTCP.Close()

	for _, tc := range []struct {
		name  string
		cfg   Config
		field string
		cause error // errors.Is target, or nil
		line  int   // expected KeyFileError line, or 0
	}{
		{"listen without port", Config{Listen: "127.0.0.1"}, "Listen", ErrConfig, 0},
		{"listen in use", Config{Listen: busy.LocalAddr().String()}, "Listen", nil, 0},
		{"metrics without port", Config{MetricsAddr: "localhost"}, "MetricsAddr", ErrConfig, 0},
		{"metrics in use", Config{MetricsAddr: busyTCP.Addr().String()}, "MetricsAddr", nil, 0},
		{"loopback listen, remote switch", Config{Listen: "127.0.0.1:0", Switch: "192.0.2.1:7471"}, "Listen", ErrConfig, 0},
		{"localhost listen, remote switch", Config{Listen: "localhost:0", Switch: "[2001:db8::1]:7471"}, "Listen", ErrConfig, 0},
		{"negative size", Config{Size: -1}, "Size", ErrConfig, 0},
		{"huge size", Config{Size: memnode.MaxRegionSize + 1}, "Size", ErrConfig, 0},
		{"unknown perm bits", Config{Perm: 0x80}, "Perm", ErrConfig, 0},
		{"small MTU", Config{MTU: 100}, "MTU", ErrConfig, 0},
		{"huge MTU", Config{MTU: 70000}, "MTU", ErrConfig, 0},
		{"negative busy poll", Config{BusyPoll: -1}, "BusyPoll", ErrConfig, 0},
		{"long busy poll", Config{BusyPoll: time.Second}, "BusyPoll", ErrConfig, 0},
		{"size with key file", Config{Size: 4096, KeyFile: "keys"}, "Size", ErrConfig, 0},
		{"perm with key file", Config{Perm: wire.PermRead, KeyFile: "keys"}, "Perm", ErrConfig, 0},
		{"missing key file", Config{KeyFile: filepath.Join(t.TempDir(), "none")}, "KeyFile", fs.ErrNotExist, 0},
		{"empty key file", Config{KeyFile: writeKeyFile(t, "# nothing\n")}, "KeyFile", ErrNoRegions, 0},
		{"bad perm in key file", Config{KeyFile: writeKeyFile(t, "1 4096 rw\n2 4096 rwx\n")}, "KeyFile", wire.ErrBadPerm, 2},
		{"zero key in key file", Config{KeyFile: writeKeyFile(t, "0 4096 rw\n")}, "KeyFile", memnode.ErrZeroKey, 1},
		{"duplicate key in key file", Config{KeyFile: writeKeyFile(t, "ab 4096 r\n\n0xAB 8 w\n")}, "KeyFile", memnode.ErrKeyInUse, 3},
		{"bad size in key file", Config{KeyFile: writeKeyFile(t, "ab 0 r\n")}, "KeyFile", memnode.ErrBadSize, 1},
		{"short line in key file", Config{KeyFile: writeKeyFile(t, "ab 4096\n")}, "KeyFile", nil, 1},
		{"key file readable by others", Config{KeyFile: chmod(t, writeKeyFile(t, "ab 4096 r\n"), 0o644)}, "KeyFile", secretfile.ErrExposed, 0},
		{"key file writable by others", Config{KeyFile: chmod(t, writeKeyFile(t, "ab 4096 r\n"), 0o620)}, "KeyFile", secretfile.ErrExposed, 0},
		{"switch without token", Config{Listen: "127.0.0.1:0", Switch: "127.0.0.1:7471"}, "Token", secure.ErrNoToken, 0},
		{"switch with token and insecure", Config{Listen: "127.0.0.1:0", Switch: "127.0.0.1:7471", Token: []byte("t"), Insecure: true}, "Token", ErrConfig, 0},
		{"token without switch", Config{Token: []byte("t")}, "Token", ErrConfig, 0},
		{"insecure without switch", Config{Insecure: true}, "Token", ErrConfig, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cfg.Listen == "" {
				tc.cfg.Listen = "127.0.0.1:0"
			}
			srv, err := Start(tc.cfg)
			if err == nil {
				srv.Close()
				t.Fatal("Start succeeded")
			}
			t.Log(err)
			fe, ok := errors.AsType[*FieldError](err)
			if !ok {
				t.Fatalf("%T is not a *FieldError", err)
			}
			if fe.Field != tc.field {
				t.Errorf("Field %q, want %q", fe.Field, tc.field)
			}
			if tc.cause != nil && !errors.Is(err, tc.cause) {
				t.Errorf("error does not wrap %v", tc.cause)
			}
			// The key files' key 0xab is a capability: never in an error.
			if msg := strings.ToLower(err.Error()); strings.Contains(msg, "0xab") || strings.Contains(msg, "00ab") || strings.Contains(msg, " ab ") {
				t.Errorf("error %q shows a region key", err)
			}
			if tc.line != 0 {
				kfe, ok := errors.AsType[*memnode.KeyFileError](err)
				if !ok || kfe.Line != tc.line {
					t.Errorf("want a *memnode.KeyFileError for line %d", tc.line)
				}
			}
		})
	}
}

// TestDefaults checks the zero Config's defaults that a test can see
// without binding DefaultPort.
func TestDefaults(t *testing.T) {
	srv := start(t, Config{})
	regs := srv.Regions()
	if len(regs) != 1 || regs[0].Size != DefaultSize || regs[0].Perm != wire.PermAll || regs[0].Key == 0 {
		t.Errorf("Regions() = %+v, want one %d-byte rwav region with a random key", regs, DefaultSize)
	}
	if srv.MTU() != 9000 {
		t.Errorf("MTU() = %d, want 9000", srv.MTU())
	}
	other := start(t, Config{})
	if other.Regions()[0].Key == regs[0].Key {
		t.Error("two nodes drew the same random key")
	}
	c := Config{}
	if err := c.validate(); err != nil || c.Listen != DefaultListen {
		t.Errorf("validate: %v, Listen %q, want %q", err, c.Listen, DefaultListen)
	}
}

// TestRunAndClose checks that Run returns when its context ends, leaving
// the server closed, and that Close is idempotent.
func TestRunAndClose(t *testing.T) {
	srv, err := Start(Config{Listen: "127.0.0.1:0", Size: 4096, MetricsAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	scrape(t, srv)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := net.Dial("tcp", srv.MetricsAddr()); err == nil {
		t.Error("metrics listener still accepts after Close")
	}
	// The UDP port is free again.
	again, err := Start(Config{Listen: srv.Addr().String(), Size: 4096})
	if err != nil {
		t.Fatalf("restart on %v: %v", srv.Addr(), err)
	}
	again.Close()
}
