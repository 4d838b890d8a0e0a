package ec

import (
	"bytes"
	"fmt"

	"github.com/ndma/ndma/reduce/gf256"
)

// A chain cut short. A piece's chain visits its data shard (taking the
// change δ = new XOR old), then parity shards 0 to m-1 (each adding
// coef·δ), then the data shard again (adding δ). One that fails after a
// parity hop leaves the first parity shards with the change and the data
// shard without it. Rewriting from the data puts that right when every
// other data shard answers; when one is gone, its bytes are rebuilt from
// the parity, which must first be the codeword the row held before the
// chain: undoPartial takes δ back out of the parity shards the chain
// reached. Which ones it reached is not reported, but only a prefix can
// have been: with more than k shards answering, each prefix is tried and
// the one whose shards agree is kept; with exactly k, nothing is left to
// check against, and the chain is taken to have stopped at the first
// parity shard that is gone (the node whose failure cut it short). The
// one case left to chance (exactly k shards, a chain cut short by
// something else than a node) is the RAID write hole: the bytes of the
// gone data shards under the piece may rebuild wrong, which their
// readers' checks then refuse. A chain cut short whose row nothing else
// wrote is finished instead, by sending it again (repair.go).

// undoPartial reverts in shards (the row's bytes of piece pc, nil where
// a shard is gone; shards[pc.i] the data shard as read, without the new
// bytes data) the change a cut chain may have made to the parity, and
// reconstructs the gone data shards.
func (v *Volume) undoPartial(pc piece, shards [][]byte, data []byte) error {
	delta := bytes.Clone(data)
	for i, b := range shards[pc.i] {
		delta[i] ^= b
	}
	live, reach := 0, v.m // reach: parity hops the chain may have passed
	for s, b := range shards {
		if b != nil {
			live++
		} else if s >= v.k && s-v.k < reach {
			reach = s - v.k
		}
	}
	// cand is shards with the change taken out of the first p parity
	// shards, and the gone ones reconstructed.
	cand := func(p int) ([][]byte, error) {
		c := make([][]byte, len(shards))
		copy(c, shards)
		for j := range p {
			c[v.k+j] = bytes.Clone(shards[v.k+j])
			gf256.MulAdd(v.coef[j][pc.i], delta, c[v.k+j])
		}
		return c, v.enc.Reconstruct(c)
	}
	var pick [][]byte
	if live == v.k {
		c, err := cand(reach)
		if err != nil {
			return fmt.Errorf("ec: row %d: %w", pc.row, err)
		}
		pick = c
	} else {
		for p := 0; p <= reach; p++ {
			c, err := cand(p)
			if err != nil {
				continue
			}
			if ok, err := v.enc.Verify(c); err != nil || !ok {
				continue
			}
			if pick != nil && !sameData(pick, c, v.k) {
				return fmt.Errorf("ec: row %d: the parity a cut write left agrees with two outcomes", pc.row)
			}
			pick = c
		}
		if pick == nil {
			return fmt.Errorf("ec: row %d: no outcome of a cut write agrees with the shards read", pc.row)
		}
	}
	for s := range v.k {
		shards[s] = pick[s]
	}
	return nil
}

func sameData(a, b [][]byte, k int) bool {
	for s := range k {
		if !bytes.Equal(a[s], b[s]) {
			return false
		}
	}
	return true
}
