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
