package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/wire"
)

// TestStartWaiting: a storage daemon started while the switch does not
// answer (down, restarting) waits for it, warning once, and comes up when
// it answers; a refusal ends it at once with the error; a stop while it
// waits ends it without one.
func TestStartWaiting(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	tries := 0
	start := func(context.Context) error {
		tries++
		if tries < 3 {
			return fmt.Errorf("register: %w", endpoint.ErrNoSwitch)
		}
		return nil
	}
	if err := startWaiting(t.Context(), log, "stord", "127.0.0.1:1", nil, start); err != nil || tries != 3 {
		t.Fatalf("after two tries with no switch: %v, %d tries", err, tries)
	}
	if n := strings.Count(logs.String(), "no switch answers yet"); n != 1 || !strings.Contains(logs.String(), "the switch answers: registered") {
		t.Errorf("logs:\n%s", logs.String())
	}
	refused := func(context.Context) error { return fmt.Errorf("register: %w", wire.StatusAuth) }
	if err := startWaiting(t.Context(), log, "stord", "127.0.0.1:1", nil, refused); !errors.Is(err, wire.StatusAuth) {
		t.Errorf("a refusal: %v, want it returned", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	never := func(context.Context) error { return endpoint.ErrNoSwitch }
	if err := startWaiting(ctx, log, "stord", "127.0.0.1:1", nil, never); err != nil || ctx.Err() == nil {
		t.Errorf("stopped while waiting: %v (context %v)", err, ctx.Err())
	}
}
