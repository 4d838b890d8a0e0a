package volfs

import (
	"log/slog"
	"sync"
	"time"
)

// errLogEvery is how often an errLog logs a line at most.
const errLogEvery = time.Second

// errLog logs the failures of one kind of I/O (read, write, fsync) at
// level WARN, at most one line per errLogEvery: a dead volume fails every
// request the loop device sends, thousands a second. A line counts the
// failures left out since the previous one ("more").
type errLog struct {
	log  *slog.Logger
	kind string
	now  func() time.Time // time.Now; tests set it

	mu     sync.Mutex
	last   time.Time // when the last line was logged (under mu)
	missed int       // failures since then not logged (under mu)
	err    error     // the last of them (under mu)
}

func newErrLog(l *slog.Logger, kind string) *errLog {
	return &errLog{log: l, kind: kind, now: time.Now}
}

// failed records a failed request of n bytes at off (both 0 for fsync).
func (l *errLog) failed(off int64, n int, err error) {
	now := l.now()
	l.mu.Lock()
	if !l.last.IsZero() && now.Sub(l.last) < errLogEvery {
		l.missed++
		l.err = err
		l.mu.Unlock()
		return
	}
	l.last = now
	more := l.missed
	l.missed, l.err = 0, nil
	l.mu.Unlock()
	attrs := []any{}
	if l.kind != "fsync" {
		attrs = append(attrs, "offset", off, "length", n)
	}
	attrs = append(attrs, "err", err)
	if more > 0 {
		attrs = append(attrs, "more", more)
	}
	l.log.Warn("volume "+l.kind+" failed", attrs...)
}

// flush logs the failures left out since the last line, if any.
func (l *errLog) flush() {
	l.mu.Lock()
	more, err := l.missed, l.err
	l.missed, l.err = 0, nil
	l.mu.Unlock()
	if more > 0 {
		l.log.Warn("volume "+l.kind+" failed", "err", err, "more", more)
	}
}
