package volfs

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestErrLog checks the rate limit: one line per second of failures, the
// next line counting those left out, flush the rest.
func TestErrLog(t *testing.T) {
	var logs logBuf
	l := newErrLog(slog.New(slog.NewTextHandler(&logs, nil)), "write")
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	boom := errors.New("boom")
	lines := func() int { return strings.Count(logs.String(), "\n") }
	for range 1000 {
		l.failed(4096, 512, boom)
		now = now.Add(time.Millisecond / 2)
	}
	if lines() != 1 {
		t.Fatalf("%d lines for a burst of half a second, want 1:\n%s", lines(), logs.String())
	}
	now = now.Add(time.Second)
	l.failed(0, 4096, boom)
	if lines() != 2 || !strings.Contains(logs.String(), `offset=0 length=4096 err=boom more=999`) {
		t.Fatalf("a second later, want a line counting 999 more:\n%s", logs.String())
	}
	l.flush()
	if lines() != 2 {
		t.Fatalf("flush with nothing left out logged:\n%s", logs.String())
	}
	l.failed(0, 4096, boom)
	l.failed(0, 4096, boom)
	l.flush()
	if lines() != 3 || !strings.Contains(logs.String(), `msg="volume write failed" err=boom more=2`) {
		t.Fatalf("flush of 2 left out:\n%s", logs.String())
	}
}
