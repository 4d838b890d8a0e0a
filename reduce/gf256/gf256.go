// Package gf256 is arithmetic in GF(2^8) with the polynomial
// x^8+x^4+x^3+x^2+1 (0x11d) and generator 2, the field of
// github.com/klauspost/reedsolomon: memory nodes build Reed-Solomon
// parity with MulAdd (wire.ChainGFAccumulate), hosts derive the
// coefficients and reconstruct with klauspost's codec, and both agree on
// every product.
package gf256

// Poly is the field's reduction polynomial.
const Poly = 0x11d

// expTable[i] = 2^i for i in [0, 510), so that a sum of two logarithms
// indexes it without reduction; logTable[x] = log2(x) for x != 0.
var (
	expTable [510]byte
	logTable [256]byte
)

func init() {
	x := 1
	for i := range 255 {
		expTable[i], expTable[i+255] = byte(x), byte(x)
		logTable[x] = byte(i)
		x <<= 1
		if x&0x100 != 0 {
			x ^= Poly
		}
	}
}

// Mul is a·b in the field.
func Mul(a, b byte) byte {
	if a == 0 || b == 0 {
		return 0
	}
	return expTable[int(logTable[a])+int(logTable[b])]
}

// MulAdd sets dst[i] ^= c·src[i] for i < len(src); dst must be at least
// as long as src. c 1 is a plain XOR, c 0 leaves dst as it is.
func MulAdd(c byte, src, dst []byte) {
	dst = dst[:len(src)]
	switch c {
	case 0:
		return
	case 1:
		for i, s := range src {
			dst[i] ^= s
		}
		return
	}
	var row [256]byte
	lc := int(logTable[c])
	for x := 1; x < 256; x++ {
		row[x] = expTable[lc+int(logTable[x])]
	}
	for i, s := range src {
		dst[i] ^= row[s]
	}
}
