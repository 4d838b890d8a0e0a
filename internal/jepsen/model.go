package jepsen

import (
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/anishathalye/porcupine"
)

// Digest is the 64-bit FNV-1a hash of b: a register's value for what a
// key holds, equal for equal bytes. A workload that writes bytes no other
// write wrote (say, a unique write id in the first bytes) can tell every
// write's bytes from every other's, and from a torn mix of two.
func Digest(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

// regInput is a register operation as porcupine sees it; the value read
// is its output.
type regInput struct {
	kind  Kind
	key   string
	value uint64 // written
	phase uint8  // of a write to a regular register: phaseBegin or phaseEnd
}

// The halves of a write to a regular register.
const (
	phaseWhole uint8 = iota
	phaseBegin       // from now on the value may be read
	phaseEnd         // the write completed: its value is read only if it is the register's
)

// regularState is a regular register's state: the value of the last
// write that took effect, and the values of the writes begun and not ended (sorted,
// as a string, so that states compare with ==).
type regularState struct {
	last    uint64
	pending string
}

func (s regularState) values() []uint64 {
	var out []uint64
	for i := 0; i+16 <= len(s.pending); i += 16 {
		var v uint64
		fmt.Sscanf(s.pending[i:i+16], "%016x", &v)
		out = append(out, v)
	}
	return out
}

func pendingString(vs []uint64) string {
	slices.Sort(vs)
	var b []byte
	for _, v := range vs {
		b = fmt.Appendf(b, "%016x", v)
	}
	return string(b)
}

// regularModel is a regular register per key: a write begins, takes
// effect (phaseWhole) within its interval and ends; a read returns the
// value of the last write that took effect, or of one that began and has
// not ended.
func regularModel(init uint64, describe func(uint64) string) porcupine.Model {
	if describe == nil {
		describe = func(v uint64) string { return fmt.Sprintf("%#x", v) }
	}
	return porcupine.Model{
		Partition: partitionByKey,
		Init:      func() any { return regularState{last: init} },
		Step: func(state, input, output any) (bool, any) {
			st, in := state.(regularState), input.(regInput)
			switch {
			case in.kind == Write && in.phase == phaseBegin:
				return true, regularState{last: st.last, pending: pendingString(append(st.values(), in.value))}
			case in.kind == Write && in.phase == phaseWhole:
				return true, regularState{last: in.value, pending: st.pending}
			case in.kind == Write:
				vs := st.values()
				i := slices.Index(vs, in.value)
				if i < 0 {
					return false, st // an end without its beginning
				}
				return true, regularState{last: st.last, pending: pendingString(slices.Delete(vs, i, i+1))}
			}
			v := output.(uint64)
			return v == st.last || slices.Contains(st.values(), v), st
		},
		Hash: func(state any) uint64 {
			st := state.(regularState)
			return st.last ^ Digest([]byte(st.pending))
		},
		DescribeOperation: func(input, output any) string {
			in := input.(regInput)
			switch {
			case in.kind == Write && in.phase == phaseBegin:
				return fmt.Sprintf("write begins(%s, %s)", in.key, describe(in.value))
			case in.kind == Write && in.phase == phaseWhole:
				return fmt.Sprintf("write(%s, %s)", in.key, describe(in.value))
			case in.kind == Write:
				return fmt.Sprintf("write ends(%s, %s)", in.key, describe(in.value))
			}
			return fmt.Sprintf("read(%s) -> %s", in.key, describe(output.(uint64)))
		},
		DescribeState: func(state any) string {
			st := state.(regularState)
			s := describe(st.last)
			for _, v := range st.values() {
				s += " | " + describe(v)
			}
			return s
		},
	}
}

// registerModel is a register per key: a read returns the value of the
// last write, init before any. Partitioned by key (a history is
// linearizable if and only if each key's is), so the state of one
// partition is the register's value alone.
func registerModel(init uint64, describe func(uint64) string) porcupine.Model {
	if describe == nil {
		describe = func(v uint64) string { return fmt.Sprintf("%#x", v) }
	}
	return porcupine.Model{
		Partition: partitionByKey,
		Init:      func() any { return init },
		Step: func(state, input, output any) (bool, any) {
			in := input.(regInput)
			if in.kind == Write {
				return true, in.value
			}
			return output.(uint64) == state.(uint64), state
		},
		Hash: func(state any) uint64 { return state.(uint64) },
		DescribeOperation: func(input, output any) string {
			in := input.(regInput)
			if in.kind == Write {
				return fmt.Sprintf("write(%s, %s)", in.key, describe(in.value))
			}
			return fmt.Sprintf("read(%s) -> %s", in.key, describe(output.(uint64)))
		},
		DescribeState: func(state any) string { return describe(state.(uint64)) },
	}
}

// partitionByKey splits a history into one per key, in order of key.
func partitionByKey(history []porcupine.Operation) [][]porcupine.Operation {
	by := map[string][]porcupine.Operation{}
	for _, op := range history {
		k := op.Input.(regInput).key
		by[k] = append(by[k], op)
	}
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([][]porcupine.Operation, len(keys))
	for i, k := range keys {
		out[i] = by[k]
	}
	return out
}
