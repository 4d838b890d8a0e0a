package jepsen

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// CheckOptions configure Check.
type CheckOptions struct {
	// Init is every key's value before any write (say, the Digest of a
	// block of zeros).
	Init uint64
	// Timeout bounds the search for one key's linearization; a key not
	// decided in time is listed in Report.Undecided. Zero means one
	// minute. Porcupine times the search with time.After, so Check should
	// run outside a synctest bubble, where time passes.
	Timeout time.Duration
	// Describe names a value in the report and the visualization (say,
	// the write that wrote it). Nil: hexadecimal.
	Describe func(v uint64) string
	// Regular checks each key as a regular register (Lamport) instead of
	// an atomic (linearizable) one: a read returns the value of the last
	// write that completed before it began, or of a write concurrent with
	// it, so two reads concurrent with one write may see its value and
	// then the older one. It is what a disk promises for reads that
	// overlap a write in flight; a stale read (older than a write
	// completed before the read began), a lost acknowledged write and a
	// value never written all still fail.
	Regular bool
}

// Counts are operations by outcome; a pending operation counts as
// unknown.
type Counts struct{ OK, Failed, Unknown int }

func (c Counts) String() string {
	return fmt.Sprintf("%d ok, %d failed, %d unknown", c.OK, c.Failed, c.Unknown)
}

// Anomaly is one thing a key's history shows that no linearization
// allows.
type Anomaly struct {
	Key  string
	What string
}

// Report is what Check found.
type Report struct {
	Reads, Writes Counts
	// Faults counts the faults started, by kind; FaultEvents lists them.
	Faults      map[string]int
	FaultEvents []FaultEvent
	// Keys is the number of keys operated on. Illegal lists the keys
	// whose history is not linearizable, Undecided those the checker
	// gave up on within CheckOptions.Timeout, both in order.
	Keys      int
	Illegal   []string
	Undecided []string
	// Anomalies explain the illegal keys where a simple pattern does (a
	// stale read, a read of a value never written); a key may have none
	// and still be illegal (see WriteVisualization).
	Anomalies []Anomaly
	// Divergent lists the keys whose replicas differ at the end, as the
	// caller found with CompareReplicas.
	Divergent []Divergence

	model    porcupine.Model
	ops      []porcupine.Operation
	start    time.Time
	lastSeq  int64
	timeout  time.Duration
	describe func(uint64) string
	regular  bool
}

// OK reports whether nothing is wrong: every key linearizable and no
// replicas differing. An undecided key is not OK either: nothing was
// shown about it.
func (r *Report) OK() bool {
	return len(r.Illegal) == 0 && len(r.Undecided) == 0 && len(r.Divergent) == 0
}

// String is the report in a few lines.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "operations: reads %v; writes %v\n", r.Reads, r.Writes)
	kinds := make([]string, 0, len(r.Faults))
	for k := range r.Faults {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	fmt.Fprintf(&b, "faults: %d:", len(r.FaultEvents))
	for _, k := range kinds {
		fmt.Fprintf(&b, " %s %d", k, r.Faults[k])
	}
	for _, f := range r.FaultEvents {
		if f.Err != nil {
			fmt.Fprintf(&b, "\nfault %s at %v: %v", f.Name, f.Start.Sub(r.start), f.Err)
		}
	}
	fmt.Fprintf(&b, "\nkeys: %d, not linearizable: %d %v, undecided: %d %v", r.Keys, len(r.Illegal), r.Illegal, len(r.Undecided), r.Undecided)
	for _, a := range r.Anomalies {
		fmt.Fprintf(&b, "\nanomaly: %s: %s", a.Key, a.What)
	}
	for _, d := range r.Divergent {
		fmt.Fprintf(&b, "\nreplicas differ: %v", d)
	}
	return b.String()
}

// Check decides for each key whether its operations in h are
// linearizable as a register (a read returns the value of the last write
// before it, opts.Init before any): OK operations took effect between
// their invocation and return, unknown (and pending) writes at any time
// after their invocation or never, failed operations and reads not OK not
// at all.
func Check(h *History, opts CheckOptions) *Report {
	if opts.Timeout <= 0 {
		opts.Timeout = time.Minute
	}
	if opts.Describe == nil {
		opts.Describe = func(v uint64) string { return fmt.Sprintf("%#x", v) }
	}
	ops, faults, last := h.snapshot()
	model := registerModel(opts.Init, opts.Describe)
	if opts.Regular {
		model = regularModel(opts.Init, opts.Describe)
	}
	r := &Report{Faults: map[string]int{}, FaultEvents: faults, model: model, regular: opts.Regular,
		start: h.start, lastSeq: last, timeout: opts.Timeout, describe: opts.Describe}
	for _, f := range faults {
		r.Faults[f.Kind]++
	}
	byKey := map[string][]Op{}
	for _, op := range ops {
		c := &r.Reads
		if op.Kind == Write {
			c = &r.Writes
		}
		switch op.Outcome {
		case OK:
			c.OK++
		case Failed:
			c.Failed++
		default:
			c.Unknown++
		}
		byKey[op.Key] = append(byKey[op.Key], op)
		r.ops = append(r.ops, r.operation(op)...)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	r.Keys = len(keys)

	// One key at a time through porcupine, GOMAXPROCS keys at once.
	parts := partitionByKey(r.ops)
	results := make([]porcupine.CheckResult, len(parts))
	single := r.model
	single.Partition = nil
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, p := range parts {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			results[i] = porcupine.CheckOperationsTimeout(single, p, opts.Timeout)
			<-sem
		}()
	}
	wg.Wait()
	for i, p := range parts {
		key := p[0].Input.(regInput).key
		switch results[i] {
		case porcupine.Illegal:
			r.Illegal = append(r.Illegal, key)
			ex := explain
			if opts.Regular {
				ex = explainRegular
			}
			for _, what := range ex(byKey[key], opts.Init, r.describeOp) {
				r.Anomalies = append(r.Anomalies, Anomaly{Key: key, What: what})
			}
		case porcupine.Unknown:
			r.Undecided = append(r.Undecided, key)
		}
	}
	return r
}

// Times in the operations porcupine checks are the history's sequence
// numbers times seqScale, which leaves room between two events for the
// two halves of a write in a regular register.
const seqScale = 8

// operation is op as porcupine checks it: nothing if it is not checked at
// all, two operations (its start and its end) for a write to a regular
// register.
func (r *Report) operation(op Op) []porcupine.Operation {
	in := regInput{kind: op.Kind, key: op.Key, value: op.Value}
	p := porcupine.Operation{ClientId: op.Client, Input: in, Call: seqScale * op.invokeSeq, Output: op.Value, Return: seqScale * op.returnSeq}
	if op.Kind == Write {
		p.Output = uint64(0)
	}
	switch {
	case op.Outcome == OK && op.Kind == Write && r.regular:
		// It begins (its value may be read from then on) at its
		// invocation, takes effect (becomes the value) at some point
		// of its interval, and ends (only a value that took effect
		// since may be read) at its return.
		begin, effect, end := p, p, p
		begin.Input = regInput{kind: op.Kind, key: op.Key, value: op.Value, phase: phaseBegin}
		begin.Return = begin.Call + 1
		effect.Input = regInput{kind: op.Kind, key: op.Key, value: op.Value, phase: phaseWhole}
		effect.Call, effect.Return = p.Call+2, p.Return-2
		end.Input = regInput{kind: op.Kind, key: op.Key, value: op.Value, phase: phaseEnd}
		end.Call = end.Return - 1
		return []porcupine.Operation{begin, effect, end}
	case op.Outcome == OK:
		return []porcupine.Operation{p}
	case op.Kind == Write && op.Outcome != Failed:
		// It may take effect at any time after its invocation: it
		// returns after every other event (in a regular register, it
		// starts and never ends: readable from then on, or not).
		if r.regular {
			p.Input = regInput{kind: op.Kind, key: op.Key, value: op.Value, phase: phaseBegin}
			p.Return = p.Call + 1
			return []porcupine.Operation{p}
		}
		p.Return = seqScale * (r.lastSeq + 1)
		return []porcupine.Operation{p}
	}
	return nil
}

// describeOp is op in an anomaly's words.
func (r *Report) describeOp(op *Op) string {
	s := fmt.Sprintf("client %d %s", op.Client, op.Kind)
	if op.Kind == Write || op.Outcome == OK {
		s += " " + r.describe(op.Value)
	}
	s += fmt.Sprintf(" [%v", op.Invoke.Sub(r.start))
	if op.Outcome == OK || op.Outcome == Failed || op.Outcome == Unknown {
		s += fmt.Sprintf(", %v", op.Return.Sub(r.start))
	}
	s += "] " + op.Outcome.String()
	return s
}

// maxExplained bounds the anomalies explained per key.
const maxExplained = 3

// explain finds, in the operations of one key, reads that no
// linearization allows for a reason that is simple to state: a value
// never written (or whose write failed), or a value that a later write
// had replaced before the read began, the later write seen to take effect
// by its completion or by an earlier read returning its value.
// explainRegular finds the reads of one key that a regular register
// forbids: a read of a value no write (begun before the read ended, not
// failed) wrote, or of a value that a write completed after it, and
// before the read began, had replaced.
func explainRegular(ops []Op, init uint64, desc func(*Op) string) []string {
	var out []string
	for i := range ops {
		r := &ops[i]
		if r.Kind != Read || r.Outcome != OK {
			continue
		}
		// The writes completed before r began, and the last of them to
		// begin after every other one ended: what r must see at least.
		var done []*Op
		for j := range ops {
			w := &ops[j]
			if w.Kind == Write && w.Outcome == OK && w.returnSeq < r.invokeSeq {
				done = append(done, w)
			}
		}
		legal := len(done) == 0 && r.Value == init
		var src *Op
		for j := range ops {
			w := &ops[j]
			if w.Kind != Write || w.Outcome == Failed || w.Value != r.Value || w.invokeSeq > r.returnSeq {
				continue
			}
			src = w
			superseded := slices.ContainsFunc(done, func(d *Op) bool { return d != w && d.invokeSeq > w.returnSeq && w.Outcome == OK })
			if !superseded {
				legal = true
			}
		}
		switch {
		case legal:
		case src == nil && r.Value != init:
			out = append(out, fmt.Sprintf("%s returned a value never written", desc(r)))
		default:
			var by *Op
			for _, d := range done {
				if src == nil || d.invokeSeq > src.returnSeq {
					by = d
				}
			}
			if by != nil {
				out = append(out, fmt.Sprintf("stale read: %s, but %s had replaced that value and completed before the read began", desc(r), desc(by)))
			} else {
				out = append(out, fmt.Sprintf("stale read: %s", desc(r)))
			}
		}
		if len(out) >= 3 {
			break
		}
	}
	return out
}

func explain(ops []Op, init uint64, desc func(*Op) string) []string {
	const never = int64(1) << 62
	end := func(op *Op) int64 {
		if op.Outcome == OK {
			return op.returnSeq
		}
		return never
	}
	var writes, reads []*Op
	for i := range ops {
		op := &ops[i]
		switch {
		case op.Kind == Write:
			writes = append(writes, op)
		case op.Outcome == OK:
			reads = append(reads, op)
		}
	}
	// sources are the writes a read of v may have seen (nil and true
	// for the initial value).
	sources := func(r *Op) ([]*Op, bool) {
		var src []*Op
		for _, w := range writes {
			if w.Outcome != Failed && w.Value == r.Value && w.invokeSeq < r.returnSeq {
				src = append(src, w)
			}
		}
		return src, r.Value == init
	}
	// took reports a write w2 that took effect, and was seen to, before
	// seq: its completion, or a read of its value (its only source).
	took := func(seq int64) []*Op {
		var out []*Op
		for _, w := range writes {
			if w.Outcome == OK && w.returnSeq < seq {
				out = append(out, w)
			}
		}
		for _, r := range reads {
			if r.returnSeq >= seq {
				continue
			}
			if src, isInit := sources(r); len(src) == 1 && !isInit {
				out = append(out, src[0])
			}
		}
		return out
	}
	var out []string
	for _, r := range reads {
		if len(out) == maxExplained {
			break
		}
		src, isInit := sources(r)
		if len(src) == 0 && !isInit {
			what := "read of a value never written"
			for _, w := range writes {
				if w.Value == r.Value {
					what = fmt.Sprintf("read of the value of a write that failed or began later (%s)", desc(w))
					break
				}
			}
			out = append(out, fmt.Sprintf("%s: %s", what, desc(r)))
			continue
		}
		// Stale: every write of the value read (and the initial value)
		// ended before a later write was seen to take effect, and that
		// before the read began.
	later:
		for _, w2 := range took(r.invokeSeq) {
			if w2.Value == r.Value {
				continue
			}
			for _, w := range src {
				if end(w) >= w2.invokeSeq {
					continue later
				}
			}
			seen := "completed"
			if w2.Outcome != OK || w2.returnSeq >= r.invokeSeq {
				seen = "was read"
			}
			out = append(out, fmt.Sprintf("stale read: %s, but %s had replaced that value and %s before the read began", desc(r), desc(w2), seen))
			break
		}
	}
	return out
}

// WriteVisualization writes porcupine's HTML view of the keys that are
// not linearizable (or undecided), with the faults as annotations, to a
// new file in dir (empty: the system's temporary directory, kept after
// the test) and returns its path. With nothing illegal or undecided it
// writes nothing and returns "".
func (r *Report) WriteVisualization(dir string) (string, error) {
	bad := map[string]bool{}
	for _, k := range r.Illegal {
		bad[k] = true
	}
	for _, k := range r.Undecided {
		bad[k] = true
	}
	if len(bad) == 0 {
		return "", nil
	}
	var ops []porcupine.Operation
	for _, op := range r.ops {
		if bad[op.Input.(regInput).key] {
			ops = append(ops, op)
		}
	}
	_, info := porcupine.CheckOperationsVerbose(r.model, ops, r.timeout)
	var notes []porcupine.Annotation
	for _, f := range r.FaultEvents {
		stop := f.stopSeq
		if !f.stopped {
			stop = r.lastSeq
		}
		notes = append(notes, porcupine.Annotation{Tag: "nemesis", Start: seqScale * f.startSeq, End: seqScale * stop, Description: f.Name,
			Details: fmt.Sprintf("%s from %v to %v", f.Name, f.Start.Sub(r.start), f.Stop.Sub(r.start))})
	}
	info.AddAnnotations(notes)
	if dir == "" {
		dir = os.TempDir()
	}
	f, err := os.CreateTemp(dir, "jepsen-*.html")
	if err != nil {
		return "", err
	}
	path := f.Name()
	f.Close()
	if err := porcupine.VisualizePath(r.model, info, path); err != nil {
		return "", err
	}
	return filepath.Clean(path), nil
}
