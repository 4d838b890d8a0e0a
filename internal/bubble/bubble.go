// Package bubble runs a function inside a testing/synctest bubble from an
// ordinary program, so simulations on netio/simnet (ndma bench coll --sim)
// run in virtual time outside `go test`.
//
// Go offers bubbles only through synctest.Test, which needs a *testing.T,
// and a *testing.T exists only under the testing package's runner. Run
// starts that runner with testing.MainStart and a minimal set of test
// hooks (deps below) and runs one test whose body is the bubble. The
// testing package documents MainStart as not covered by the Go 1
// compatibility promise: if a Go release changes its signature, this
// package stops compiling (it does not misbehave), and
// TestRunVirtualTime pins the behaviour on the Go version in go.mod.
//
// Inside a `go test` binary the runner's flags are the test's own: a
// -test.count or -test.cpu list does not repeat f (Run guards it),
// -test.skip patterns do not skip it, and the flags naming output files
// (test log, profiles, trace, coverage) are blanked while Run's runner is
// active, so the enclosing run's files are left alone.
package bubble

import (
	"errors"
	"flag"
	"io"
	"os"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

var mu sync.Mutex // one runner at a time: the testing package is global

// ErrNotRun reports that the testing runner did not run the bubble.
var ErrNotRun = errors.New("bubble: the testing runner did not run the simulation")

// Run calls f inside a synctest bubble and returns when f and every
// goroutine it started have returned. Inside f, time is virtual: the
// clock stands still while any goroutine of the bubble can run and jumps
// to the next timer when all are blocked. f must not block on channels,
// mutexes or I/O from outside the bubble, and must stop every goroutine
// it starts; a bubble that deadlocks panics. A panic in f propagates.
//
// The runner prints PASS or FAIL lines on os.Stdout; Run sends
// os.Stdout to the null device while the runner is active, so f must
// write through an io.Writer obtained before the call.
func Run(f func()) error {
	mu.Lock()
	defer mu.Unlock()
	ran := false
	tests := []testing.InternalTest{{
		Name: "ndma_simulation",
		F: func(t *testing.T) {
			if ran { // -test.count or -test.cpu in a test binary
				return
			}
			ran = true
			synctest.Test(t, func(*testing.T) { f() })
		},
	}}
	m := testing.MainStart(deps{}, tests, nil, nil, nil)
	if !flag.Parsed() {
		// MainStart registered the runner's -test.* flags on the default
		// set; parse none of the program's own arguments (cobra has them).
		if err := flag.CommandLine.Parse(nil); err != nil {
			return err
		}
	}
	// In a test binary the runner's output flags are the enclosing test
	// run's (go test passes -test.testlogfile, and maybe profiles): the
	// inner run must not create, truncate or close those files.
	for _, name := range outputFlags {
		if fl := flag.Lookup(name); fl != nil && fl.Value.String() != "" {
			old := fl.Value.String()
			if err := fl.Value.Set(""); err != nil {
				return err
			}
			defer fl.Value.Set(old)
		}
	}
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	stdout := os.Stdout
	os.Stdout = null
	code := m.Run()
	os.Stdout = stdout
	null.Close()
	if !ran {
		return ErrNotRun
	}
	if code != 0 {
		return errors.New("bubble: the simulation failed")
	}
	return nil
}

// outputFlags are the runner's flags that name files it writes.
var outputFlags = []string{
	"test.testlogfile", "test.cpuprofile", "test.memprofile", "test.blockprofile",
	"test.mutexprofile", "test.trace", "test.coverprofile", "test.gocoverdir",
}

// deps is the testing runner's hook set (its unexported testDeps
// interface), with everything but name matching switched off.
type deps struct{}

// corpusEntry mirrors the testing package's alias of the same name.
type corpusEntry = struct {
	Parent     string
	Path       string
	Data       []byte
	Values     []any
	Generation int
	IsSeed     bool
}

var errUnsupported = errors.New("bubble: not supported")

func (deps) ImportPath() string { return "github.com/ndma/ndma/internal/bubble" }
func (deps) ModulePath() string { return "github.com/ndma/ndma" }

// MatchString matches every -test.run pattern and no -test.skip pattern:
// the runner has a single test, the bubble.
func (deps) MatchString(pat, _ string) (bool, error) {
	if s := flag.Lookup("test.skip"); s != nil && pat != "" && pat == s.Value.String() {
		return false, nil
	}
	return true, nil
}

func (deps) SetPanicOnExit0(bool)                        {}
func (deps) StartCPUProfile(io.Writer) error             { return nil }
func (deps) StopCPUProfile()                             {}
func (deps) StartTestLog(io.Writer)                      {}
func (deps) StopTestLog() error                          { return nil }
func (deps) WriteProfileTo(string, io.Writer, int) error { return nil }
func (deps) CoordinateFuzzing(time.Duration, int64, time.Duration, int64, int, []corpusEntry, []reflect.Type, string, string) error {
	return errUnsupported
}
func (deps) RunFuzzWorker(func(corpusEntry) error) error { return errUnsupported }
func (deps) ReadCorpus(string, []reflect.Type) ([]corpusEntry, error) {
	return nil, errUnsupported
}
func (deps) CheckCorpus([]any, []reflect.Type) error { return nil }
func (deps) ResetCoverage()                          {}
func (deps) SnapshotCoverage()                       {}
func (deps) InitRuntimeCoverage() (string, func(string, string) (string, error), func() float64) {
	return "", nil, nil
}

// Goroutines returns the number of goroutines in the calling goroutine's
// synctest bubble (the caller and the testing package's own included),
// or 0 when the caller is in no bubble. Unlike runtime.NumGoroutine it does not count the process's
// other goroutines (an earlier test's, the runtime's finalizer
// goroutine), so a test can compare counts exactly. It reads the
// goroutine headers of a full traceback (", synctest bubble N"), which
// costs a stop of the world: for tests, not for hot paths.
func Goroutines() int {
	self := bubbleTag(stack(false))
	if self == "" {
		return 0
	}
	n := 0
	for _, line := range strings.Split(stack(true), "\n") {
		if strings.HasPrefix(line, "goroutine ") && bubbleTag(line) == self {
			n++
		}
	}
	return n
}

// bubbleTag returns the ", synctest bubble N" part of a traceback's first
// goroutine header, or "".
func bubbleTag(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	i := strings.Index(line, ", synctest bubble ")
	if i < 0 {
		return ""
	}
	tag := line[i:]
	if j := strings.IndexAny(tag[len(", synctest bubble "):], ",]"); j >= 0 {
		tag = tag[:len(", synctest bubble ")+j]
	}
	return tag
}

// stack returns the traceback of the calling goroutine, or of all.
func stack(all bool) string {
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, all)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}
