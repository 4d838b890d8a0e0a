// Package reduce holds the element-wise reduction kernels of NDMA: Apply
// folds one buffer of little-endian elements into another with an ALU
// operation (wire.Alu over wire.Dtype), with AVX2 kernels where the CPU
// has them. The switch (package fabric) reduces aggregation contributions
// with it and the host-side collectives (package coll) their host
// algorithms' blocks, so both produce the same bits.
package reduce
