package gf256

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/reedsolomon"
)

// mulSlow multiplies by shifts and reductions, with no tables.
func mulSlow(a, b byte) byte {
	var p int
	x, y := int(a), int(b)
	for y != 0 {
		if y&1 != 0 {
			p ^= x
		}
		y >>= 1
		x <<= 1
		if x&0x100 != 0 {
			x ^= Poly
		}
	}
	return byte(p)
}

func TestMulTable(t *testing.T) {
	for a := range 256 {
		for b := range 256 {
			if got, want := Mul(byte(a), byte(b)), mulSlow(byte(a), byte(b)); got != want {
				t.Fatalf("Mul(%#x, %#x) = %#x, want %#x", a, b, got, want)
			}
		}
	}
}

func TestMulAdd(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	src, dst := make([]byte, 300), make([]byte, 301)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	for i := range dst {
		dst[i] = byte(rng.Uint32())
	}
	for _, c := range []byte{0, 1, 2, 0x8e, 0xff} {
		got := bytes.Clone(dst)
		MulAdd(c, src, got)
		for i := range dst {
			want := dst[i]
			if i < len(src) {
				want ^= mulSlow(c, src[i])
			}
			if got[i] != want {
				t.Fatalf("c %#x: byte %d = %#x, want %#x", c, i, got[i], want)
			}
		}
	}
}

// TestReedSolomonParity: parity built with MulAdd from the coefficients
// klauspost's encoder gives unit vectors equals its own Encode of random
// data, so the field and the polynomial are the same.
func TestReedSolomonParity(t *testing.T) {
	const k, m, n = 5, 3, 1000
	enc, err := reedsolomon.New(k, m)
	if err != nil {
		t.Fatal(err)
	}
	coef := make([][]byte, m) // coef[j][i]: data shard i's weight in parity j
	for j := range coef {
		coef[j] = make([]byte, k)
	}
	for i := range k {
		unit := make([][]byte, k+m)
		for s := range unit {
			unit[s] = make([]byte, 1)
		}
		unit[i][0] = 1
		if err := enc.Encode(unit); err != nil {
			t.Fatal(err)
		}
		for j := range m {
			coef[j][i] = unit[k+j][0]
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	shards := make([][]byte, k+m)
	for s := range shards {
		shards[s] = make([]byte, n)
		if s < k {
			for b := range shards[s] {
				shards[s][b] = byte(rng.Uint32())
			}
		}
	}
	if err := enc.Encode(shards); err != nil {
		t.Fatal(err)
	}
	for j := range m {
		par := make([]byte, n)
		for i := range k {
			MulAdd(coef[j][i], shards[i], par)
		}
		if !bytes.Equal(par, shards[k+j]) {
			t.Fatalf("parity %d differs from klauspost's", j)
		}
	}
}
