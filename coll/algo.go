package coll

import (
	"fmt"
	"strings"
)

// Algo names a collective algorithm. The names are used in flags, the
// NDMA_ALGO_<OP> environment variables and JSON output.
type Algo string

// Algorithms.
const (
	AlgoAuto              Algo = "auto"               // the Tuner chooses
	AlgoInNet             Algo = "innet"              // in the network: multicast / aggregation through the switch
	AlgoBinomial          Algo = "binomial"           // binomial tree
	AlgoChain             Algo = "chain"              // pipelined chain, segmented
	AlgoScatterAllgather  Algo = "scatter_allgather"  // van de Geijn: scatter then ring allgather
	AlgoRing              Algo = "ring"               // ring (reduce-scatter + allgather for allreduce)
	AlgoRecursiveDoubling Algo = "recursive_doubling" // recursive doubling (non-powers of two fold in)
	AlgoRabenseifner      Algo = "rabenseifner"       // recursive-halving reduce-scatter + recursive-doubling allgather
	AlgoDirect            Algo = "direct"             // every pair directly
)

// Operation names a collective, as used in NDMA_ALGO_<OP> (upper-cased)
// and JSON output.
type Operation string

// Operations.
const (
	OpBarrier       Operation = "barrier"
	OpBcast         Operation = "bcast"
	OpReduce        Operation = "reduce"
	OpAllreduce     Operation = "allreduce"
	OpAllgather     Operation = "allgather"
	OpReduceScatter Operation = "reducescatter"
	OpGather        Operation = "gather"
	OpScatter       Operation = "scatter"
	OpAlltoall      Operation = "alltoall"
)

// Algorithms lists, per operation, the algorithms implemented (AlgoAuto
// aside), in the order benchmarks show them.
var Algorithms = map[Operation][]Algo{
	OpBarrier:       {AlgoInNet, AlgoRecursiveDoubling},
	OpBcast:         {AlgoInNet, AlgoBinomial, AlgoChain, AlgoScatterAllgather},
	OpReduce:        {AlgoInNet, AlgoBinomial},
	OpAllreduce:     {AlgoInNet, AlgoRing, AlgoRecursiveDoubling, AlgoRabenseifner},
	OpAllgather:     {AlgoInNet, AlgoRing, AlgoRecursiveDoubling, AlgoDirect},
	OpReduceScatter: {AlgoInNet, AlgoRing, AlgoDirect},
	OpGather:        {AlgoBinomial, AlgoDirect},
	OpScatter:       {AlgoBinomial, AlgoDirect},
	OpAlltoall:      {AlgoDirect},
}

// Supported reports whether op implements a.
func Supported(op Operation, a Algo) bool {
	if a == AlgoAuto {
		return true
	}
	for _, x := range Algorithms[op] {
		if x == a {
			return true
		}
	}
	return false
}

// ParseAlgo checks a name.
func ParseAlgo(s string) (Algo, error) {
	a := Algo(strings.ToLower(strings.TrimSpace(s)))
	if a == AlgoAuto {
		return a, nil
	}
	for _, list := range Algorithms {
		for _, x := range list {
			if x == a {
				return a, nil
			}
		}
	}
	return "", fmt.Errorf("%w: unknown algorithm %q", ErrArg, s)
}

// Tuner chooses an algorithm for AlgoAuto.
type Tuner interface {
	// Choose returns the algorithm for op on bytes (the per-rank message
	// size) over ranks ranks; innet says whether a switch is available.
	Choose(op Operation, bytes, ranks int, innet bool) Algo
}

// DefaultTuner picks by message size and communicator size, preferring
// in-network algorithms when a switch is reachable (one transmission per
// operation: they won at every size the simulator measured, except
// ReduceScatter from 4 to 128 KiB) and falling back to the best host
// algorithm otherwise. TestSimTuner checks its choices against every
// algorithm at 8 ranks.
type DefaultTuner struct{}

// Choose implements Tuner.
func (DefaultTuner) Choose(op Operation, bytes, ranks int, innet bool) Algo {
	switch {
	case op == OpReduceScatter && innet && (bytes < 4<<10 || bytes >= 128<<10):
		// The in-network reduce-scatter wins while latency dominates (one
		// aggregation), and again from 128 KiB, where direct's incast
		// (every rank sending to one at once) costs more than the
		// switch's per-block aggregations (simnet, 8 ranks; ndma bench
		// coll --sim --op reducescatter).
		return AlgoInNet
	case op == OpReduceScatter && ranks <= 16:
		return AlgoDirect
	case innet && Supported(op, AlgoInNet) && op != OpReduceScatter:
		return AlgoInNet
	}
	switch op {
	case OpBarrier:
		return AlgoRecursiveDoubling
	case OpBcast:
		switch {
		case bytes < 16<<10 || ranks <= 2:
			return AlgoBinomial
		case bytes < 512<<10:
			return AlgoScatterAllgather
		default:
			return AlgoChain
		}
	case OpReduce:
		return AlgoBinomial
	case OpAllreduce:
		switch {
		case bytes < 16<<10:
			return AlgoRecursiveDoubling
		case ranks&(ranks-1) == 0:
			return AlgoRabenseifner
		default:
			return AlgoRing
		}
	case OpAllgather:
		if bytes*ranks < 64<<10 {
			return AlgoRecursiveDoubling
		}
		return AlgoRing
	case OpReduceScatter:
		return AlgoRing
	case OpGather, OpScatter:
		// Measured on simnet at 8 ranks: direct wins at every size; the
		// tree only pays off when many ranks make the root's fan-in long.
		if ranks > 16 && bytes < 16<<10 {
			return AlgoBinomial
		}
		return AlgoDirect
	}
	return AlgoDirect
}

// CallOption tunes one collective call.
type CallOption func(*callOpts)

type callOpts struct {
	algo          Algo
	deterministic bool
	segment       int
}

// WithAlgo forces an algorithm (AlgoAuto: the tuner, the default).
func WithAlgo(a Algo) CallOption { return func(o *callOpts) { o.algo = a } }

// WithDeterministic asks in-network reductions to reduce in member order,
// so float results are bitwise identical from run to run.
func WithDeterministic(on bool) CallOption { return func(o *callOpts) { o.deterministic = on } }

// WithSegment sets the pipeline segment of chain algorithms, in bytes
// (zero: 16 KiB, best of 16/64/256/1024 KiB on simnet at 100 Mbit/s).
func WithSegment(bytes int) CallOption { return func(o *callOpts) { o.segment = bytes } }
