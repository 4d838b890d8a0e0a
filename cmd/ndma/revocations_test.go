package main

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ndma/ndma/secure"
)

// TestWatchRevocations: a daemon's revocation list is loaded at start,
// a new list written over the file is loaded within the reload period,
// an older one (a rollback) or a corrupt one is refused and the list held
// stays; the watcher ends with its context.
func TestWatchRevocations(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	old := revocationsReload
	revocationsReload = 20 * time.Millisecond
	defer func() { revocationsReload = old }()

	a, err := secure.NewAuthority([]byte("fabric secret of the revocation watch test"))
	if err != nil {
		t.Fatal(err)
	}
	id, err := a.Issue(secure.RoleSwitch, "sw0", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	alice, err := a.Issue(secure.RoleClient, "alice", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "revoked")
	first, err := a.Revoke(nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, first.Encode(), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := watchRevocations(ctx, id, path, log); err != nil {
		t.Fatal(err)
	}
	if id.Policy == nil || id.Policy.Check(time.Now(), &alice.Cert) != nil {
		t.Fatal("the first list was not loaded, or revokes alice")
	}
	second, err := a.Revoke(first, time.Now(), secure.HashKey(alice.Cert.Key))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, second.Encode(), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !errors.Is(id.Policy.Check(time.Now(), &alice.Cert), secure.ErrRevoked) {
		if time.Now().After(deadline) {
			t.Fatal("the new list was not loaded")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, b := range [][]byte{first.Encode(), []byte("not a list")} {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		if !errors.Is(id.Policy.Check(time.Now(), &alice.Cert), secure.ErrRevoked) {
			t.Fatal("an older or corrupt list replaced the one held")
		}
	}
	cancel()
	// A list of another fabric is refused at start.
	other, _ := secure.NewAuthority([]byte("another fabric's secret, not this one"))
	foreign, _ := other.Revoke(nil, time.Now())
	if err := os.WriteFile(path, foreign.Encode(), 0o644); err != nil {
		t.Fatal(err)
	}
	id2, _ := a.Issue(secure.RoleSwitch, "sw1", rand.Reader)
	if err := watchRevocations(t.Context(), id2, path, log); err == nil {
		t.Fatal("a list of another fabric was taken")
	}
}
