package jepsen

import (
	"fmt"
	"os"
	"sync"
	"time"
)

// Kind is what an operation does to its key.
type Kind uint8

// The kinds of operations.
const (
	Read Kind = iota
	Write
)

func (k Kind) String() string {
	switch k {
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Outcome is how an operation ended.
type Outcome uint8

// The outcomes of an operation.
const (
	// Pending: the operation never completed (the test ended first). The
	// checker treats it as Unknown.
	Pending Outcome = iota
	// OK: it took effect, once, between its invocation and its return;
	// for a read, Value is what it returned.
	OK
	// Failed: it definitely did not take effect (the service refused it
	// before doing anything). The checker drops it.
	Failed
	// Unknown: it may or may not have taken effect, now or at any later
	// time (a timeout, a connection lost with the request in flight). The
	// checker keeps a write open to the end of the history and drops a
	// read, which changes nothing.
	Unknown
)

func (o Outcome) String() string {
	switch o {
	case Pending:
		return "pending"
	case OK:
		return "ok"
	case Failed:
		return "failed"
	case Unknown:
		return "unknown"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Op is one recorded operation.
type Op struct {
	Client int // the client that ran it, from 0: one client runs one operation at a time
	Kind   Kind
	Key    string
	// Value is the value written, or for an OK read the value read.
	Value   uint64
	Outcome Outcome
	Err     error // why it failed or is unknown
	// Invoke and Return are the clock's times at the invocation and at
	// the completion (zero while Pending).
	Invoke, Return time.Time
	// invokeSeq and returnSeq order the events of the whole history as
	// they were recorded (see History).
	invokeSeq, returnSeq int64
}

func (o *Op) String() string {
	s := fmt.Sprintf("client %d %s %s", o.Client, o.Kind, o.Key)
	if o.Kind == Write || o.Outcome == OK {
		s += fmt.Sprintf(" %#x", o.Value)
	}
	s += " " + o.Outcome.String()
	if o.Err != nil {
		s += ": " + o.Err.Error()
	}
	return s
}

// FaultEvent is one fault a Nemesis injected.
type FaultEvent struct {
	Name, Kind  string
	Start, Stop time.Time // Stop is zero while the fault is active
	// Err is what Start or Stop returned.
	Err               error
	startSeq, stopSeq int64
	stopped           bool
}

// History records the operations of concurrent clients and the faults
// injected meanwhile. It is safe for concurrent use.
//
// Besides the clock's times, each invocation and completion gets the next
// number of one sequence, taken under the history's lock: an operation
// whose completion was recorded before another's invocation really
// completed before the other began, so the checker orders operations by
// these numbers. Inside a synctest bubble many events share one virtual
// instant; the sequence still tells them apart.
type History struct {
	clock func() time.Time

	mu     sync.Mutex
	start  time.Time
	seq    int64
	ops    []*Op
	faults []*FaultEvent
}

// NewHistory returns an empty history whose times come from clock (nil:
// time.Now, which is virtual inside a synctest bubble).
func NewHistory(clock func() time.Time) *History {
	if clock == nil {
		clock = time.Now
	}
	return &History{clock: clock, start: clock()}
}

// Start is the clock's time when the history was made.
func (h *History) Start() time.Time { return h.start }

// Since is how long after the history's start t is.
func (h *History) Since(t time.Time) time.Duration { return t.Sub(h.start) }

// Call is an operation in flight; complete it with OK, Fail or Unknown.
// Only the first completion counts.
type Call struct {
	h  *History
	op *Op
}

// Invoke records that client begins an operation of kind on key; value is
// the value a write writes (ignored for a read).
func (h *History) Invoke(client int, kind Kind, key string, value uint64) *Call {
	op := &Op{Client: client, Kind: kind, Key: key}
	if kind == Write {
		op.Value = value
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	op.invokeSeq = h.seq
	op.Invoke = h.clock()
	h.ops = append(h.ops, op)
	return &Call{h: h, op: op}
}

// OK records that the operation took effect; value is what a read
// returned (ignored for a write).
func (c *Call) OK(value uint64) { c.end(OK, value, nil) }

// Fail records that the operation definitely did not take effect.
func (c *Call) Fail(err error) { c.end(Failed, 0, err) }

// Unknown records that the operation may or may not have taken effect.
func (c *Call) Unknown(err error) { c.end(Unknown, 0, err) }

func (c *Call) end(out Outcome, value uint64, err error) {
	h := c.h
	h.mu.Lock()
	defer h.mu.Unlock()
	op := c.op
	if op.Outcome != Pending {
		return
	}
	h.seq++
	op.returnSeq = h.seq
	op.Return = h.clock()
	op.Outcome, op.Err = out, err
	if op.Kind == Read && out == OK {
		op.Value = value
	}
}

// faultStart records that a fault starts and returns its event.
func (h *History) faultStart(name, kind string) *FaultEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	f := &FaultEvent{Name: name, Kind: kind, Start: h.clock(), startSeq: h.seq}
	h.faults = append(h.faults, f)
	return f
}

// faultStop records that fault f ended.
func (h *History) faultStop(f *FaultEvent, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	f.Stop, f.stopSeq, f.stopped = h.clock(), h.seq, true
	if f.Err == nil {
		f.Err = err
	}
}

// faultErr records an error of fault f's start.
func (h *History) faultErr(f *FaultEvent, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if f.Err == nil {
		f.Err = err
	}
}

// Ops returns a copy of the operations recorded so far, in order of
// invocation.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Op, len(h.ops))
	for i, op := range h.ops {
		out[i] = *op
	}
	return out
}

// Faults returns a copy of the faults recorded so far, in order of start.
func (h *History) Faults() []FaultEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]FaultEvent, len(h.faults))
	for i, f := range h.faults {
		out[i] = *f
	}
	return out
}

// snapshot returns copies of the operations and the faults, and the
// sequence number of the last event, at one instant.
func (h *History) snapshot() ([]Op, []FaultEvent, int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ops := make([]Op, len(h.ops))
	for i, op := range h.ops {
		ops[i] = *op
	}
	fs := make([]FaultEvent, len(h.faults))
	for i, f := range h.faults {
		fs[i] = *f
	}
	return ops, fs, h.seq
}

// SeedsFromEnv reads the seeds a test is asked to run from the
// environment variable env, "FIRST-LAST" (inclusive); unset, it is def
// alone.
func SeedsFromEnv(env string, def int64) ([]int64, error) {
	v := os.Getenv(env)
	if v == "" {
		return []int64{def}, nil
	}
	var lo, hi int64
	if _, err := fmt.Sscanf(v, "%d-%d", &lo, &hi); err != nil || hi < lo {
		return nil, fmt.Errorf("%s=%q: want FIRST-LAST", env, v)
	}
	var seeds []int64
	for s := lo; s <= hi; s++ {
		seeds = append(seeds, s)
	}
	return seeds, nil
}
