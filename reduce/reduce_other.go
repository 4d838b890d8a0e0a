//go:build !amd64 || purego

package reduce

import "github.com/ndma/ndma/wire"

// reduceVecEnabled reports whether Apply runs vector kernels; there are
// none on this platform or build.
const reduceVecEnabled = false

// reduceVec would run a vector kernel on the leading part of dst and src;
// here it processes nothing and Apply runs the scalar kernels on all of it.
func reduceVec(dst, src []byte, dt wire.Dtype, alu wire.Alu) int { return 0 }
