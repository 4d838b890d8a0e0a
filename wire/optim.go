package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Optimizer offload (MemoryX-style). An OpOptim request in ModePool
// carries gradients for the f32 parameters at pool address Addr; the
// memory node that holds them updates them in place with the optimizer
// state kept beside them in the same region: the first moment (momentum)
// at Addr+Operand1 and, for Adam, the second moment at Addr+2×Operand1.
// Operand1, the state stride, must be a multiple of the region's stripe
// times its columns, so that all three lie on the same memory node. The
// switch rewrites Addr, Operand1 and Operand2 to the node-local addresses
// of the parameters, the first and the second moment. The payload is
// OptimParamsLen bytes of OptimParams, then the gradients (little-endian
// f32, as many as there are parameters to update). Dtype must be F32.

// OptimAlgo is the update rule.
type OptimAlgo uint8

// Update rules. With g the gradient plus WeightDecay × p:
//
//	SGD:  m = Beta1·m + g;  p = p − LR·m   (momentum Beta1; PyTorch's SGD without dampening)
//	Adam: m = Beta1·m + (1−Beta1)·g;  v = Beta2·v + (1−Beta2)·g²;
//	      p = p − LR · (m / (1−Beta1^Step)) / (√(v / (1−Beta2^Step)) + Eps)
//
// All arithmetic is float32, in this order, per element.
const (
	OptimSGD  OptimAlgo = 1
	OptimAdam OptimAlgo = 2
)

func (a OptimAlgo) String() string {
	switch a {
	case OptimSGD:
		return "sgd"
	case OptimAdam:
		return "adam"
	}
	return fmt.Sprintf("optim(%d)", uint8(a))
}

// OptimParamsLen is the encoded size of OptimParams.
const OptimParamsLen = 32

// OptimParams are an optimizer step's hyperparameters.
type OptimParams struct {
	Algo        OptimAlgo
	Step        uint32 // Adam: the step number, from 1 (bias correction)
	LR          float32
	Beta1       float32 // SGD: momentum; Adam: first-moment decay
	Beta2       float32 // Adam: second-moment decay
	Eps         float32
	WeightDecay float32
}

// ErrOptim reports malformed optimizer parameters.
var ErrOptim = errors.New("wire: bad optimizer parameters")

// AppendOptim appends p's encoding: algo u8, 3 zero bytes, step u32, then
// LR, Beta1, Beta2, Eps, WeightDecay as IEEE 754 f32, 4 zero bytes (all
// big-endian).
func AppendOptim(b []byte, p *OptimParams) []byte {
	be := binary.BigEndian
	b = append(b, byte(p.Algo), 0, 0, 0)
	b = be.AppendUint32(b, p.Step)
	for _, f := range []float32{p.LR, p.Beta1, p.Beta2, p.Eps, p.WeightDecay} {
		b = be.AppendUint32(b, math.Float32bits(f))
	}
	return append(b, 0, 0, 0, 0)
}

// ParseOptim decodes and checks the OptimParams at the start of payload:
// a known algorithm, zero padding, finite values, LR ≥ 0, betas in [0, 1),
// Eps > 0 for Adam, Step ≥ 1 for Adam.
func ParseOptim(payload []byte) (OptimParams, error) {
	var p OptimParams
	if len(payload) < OptimParamsLen {
		return p, fmt.Errorf("%w: %d bytes", ErrOptim, len(payload))
	}
	be := binary.BigEndian
	p.Algo = OptimAlgo(payload[0])
	p.Step = be.Uint32(payload[4:])
	f := func(i int) float32 { return math.Float32frombits(be.Uint32(payload[8+4*i:])) }
	p.LR, p.Beta1, p.Beta2, p.Eps, p.WeightDecay = f(0), f(1), f(2), f(3), f(4)
	if payload[1]|payload[2]|payload[3]|payload[28]|payload[29]|payload[30]|payload[31] != 0 {
		return p, fmt.Errorf("%w: padding", ErrOptim)
	}
	for _, v := range []float32{p.LR, p.Beta1, p.Beta2, p.Eps, p.WeightDecay} {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return p, fmt.Errorf("%w: %v", ErrOptim, v)
		}
	}
	switch {
	case p.Algo != OptimSGD && p.Algo != OptimAdam:
		return p, fmt.Errorf("%w: algorithm %v", ErrOptim, p.Algo)
	case p.LR < 0 || p.Beta1 < 0 || p.Beta1 >= 1 || p.Beta2 < 0 || p.Beta2 >= 1:
		return p, fmt.Errorf("%w: lr %v, betas %v %v", ErrOptim, p.LR, p.Beta1, p.Beta2)
	case p.Algo == OptimAdam && (p.Eps <= 0 || p.Step == 0):
		return p, fmt.Errorf("%w: adam needs eps > 0 and step >= 1", ErrOptim)
	}
	return p, nil
}
