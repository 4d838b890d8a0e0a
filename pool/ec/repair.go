package ec

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ndma/ndma/wire"
)

// Pieces left unsure. A chain cut short (this host's link, the switch
// restarting, the write's context ending) may have added its change to
// some parity shards and not to the data shard; when the degraded
// rewrite cannot put the row right either, the piece's parity no longer
// matches its data, which a later chain write of the same bytes would
// carry on (it adds changes, it does not recompute). The Volume keeps
// such pieces, and the next write to their row first recomputes their
// parity from the data (the writer of a row is its only writer, so this
// races nothing). Until then only a reconstruction through those bytes
// is affected: it fails its reader's checks, or returns what the code
// computes, but never touches the data shards.

//
// Recomputing the parity from the data needs every data shard of the
// row. One may be gone too (its node dead): then the row's parity can
// only be put right by finishing the chain. A piece whose chain was cut
// short before anything else wrote its row keeps the chain's request ids
// and data (cutChain), and its repair sends the same requests again
// first (the next write to the row, or Repair between writes; a chain
// the next write cannot finish is dropped, since its bytes would land
// over that write's): the hops that applied them answer from their memory nodes'
// reply caches and pass them on, the others apply them, and the chain
// ends with the data shard written, so that data and parity agree on
// the new bytes. That holds while the memory nodes remember the replies
// (their reply TTL, 30 s by default): cutChainLife is less.

// maxUnsure bounds the unsure pieces kept; beyond it the oldest is
// dropped (its parity stays unsure until its bytes are written again).
const maxUnsure = 1024

// maxCutChains bounds the unsure pieces that keep their chain (and a
// copy of its data); older ones are repaired from the data only.
const maxCutChains = 64

// cutChainLife is how long after it was cut a chain is sent again:
// below the memory nodes' reply TTL (memd.ReplyCacheTTL, 30 s).
const cutChainLife = 20 * time.Second

// cutChain is a chain cut short: its requests' ids, the data it carried,
// and when it failed.
type cutChain struct {
	ids  []uint64
	data []byte
	at   time.Time
}

// markUnsure records piece pc as unsure.
func (v *Volume) markUnsure(pc piece) {
	v.st.mu.Lock()
	defer v.st.mu.Unlock()
	if len(v.st.unsure) == maxUnsure {
		v.st.unsure = v.st.unsure[1:]
	}
	v.st.unsure = append(v.st.unsure, pc)
	if pc.cut == nil {
		return
	}
	// Only the newest maxCutChains keep their chain.
	n := 0
	for i := len(v.st.unsure) - 1; i >= 0; i-- {
		if v.st.unsure[i].cut == nil {
			continue
		}
		if n++; n > maxCutChains {
			v.st.unsure[i].cut = nil
		}
	}
}

// takeUnsure removes and returns the unsure pieces of row.
func (v *Volume) takeUnsure(row uint64) []piece {
	v.st.mu.Lock()
	defer v.st.mu.Unlock()
	var out []piece
	keep := v.st.unsure[:0]
	for _, pc := range v.st.unsure {
		if pc.row == row {
			out = append(out, pc)
		} else {
			keep = append(keep, pc)
		}
	}
	clear(v.st.unsure[len(keep):])
	v.st.unsure = keep
	return out
}

// Scrub recomputes from the data the parity of every row that holds a
// byte of [off, off+n) of the volume, one row at a time, and returns the
// rows it repaired. It is for a writer that takes over rows from
// another process, which may have died in the middle of a chain and
// whose list of unsure pieces died with it: until the parity matches
// the data again, a reconstruction of the row (one of its data shards
// lost) would return wrong bytes for what was written there before. A
// row that cannot be repaired now (a data shard unreachable) is recorded
// unsure, repaired before this Volume writes it (see maxUnsure), and the
// error says so. The caller must be the rows' only writer meanwhile.
func (v *Volume) Scrub(ctx context.Context, off, n int64, each func()) (int, error) {
	if n == 0 {
		return 0, nil
	}
	if off < 0 || n < 0 || off > v.Size() || n > v.Size()-off {
		return 0, fmt.Errorf("ec: scrub of %d bytes at %d in a volume of %d: %w", n, off, v.Size(), wire.StatusOutOfBounds)
	}
	rowBytes := int64(v.k) * int64(v.s)
	var errs []error
	done := 0
	for row := off / rowBytes; row <= (off+n-1)/rowBytes; row++ {
		pc := piece{row: uint64(row), w: 0, n: v.s}
		_, err := v.repair(ctx, pc)
		if each != nil {
			each()
		}
		if err != nil {
			v.markUnsure(pc)
			errs = append(errs, err)
			continue
		}
		done++
	}
	if len(errs) > 0 {
		return done, fmt.Errorf("ec: scrub: %d rows left unsure: %w", len(errs), errors.Join(errs...))
	}
	return done, nil
}

// Unsure returns how many pieces' parity this Volume knows may not match
// their data.
func (v *Volume) Unsure() int {
	v.st.mu.Lock()
	defer v.st.mu.Unlock()
	return len(v.st.unsure)
}

// repairRow puts right the unsure pieces of row: a chain cut short
// recently is sent again (and so finished), the others' parity is
// recomputed from the data; a piece that cannot be repaired now is kept.
// writing says the caller writes the row next: a chain not finished now
// is then dropped, since finishing it after that write would put its
// older bytes over the newer ones.
func (v *Volume) repairRow(ctx context.Context, row uint64, writing bool) {
	for _, pc := range v.takeUnsure(row) {
		if c := pc.cut; c != nil && time.Since(c.at) < cutChainLife {
			hops := make([]wire.ChainHop, v.m+2)
			ids, err := v.chainWrite(ctx, hops, pc, c.data, c.ids)
			if err == nil {
				v.st.mu.Lock()
				v.st.finished++
				v.st.mu.Unlock()
				continue
			}
			for i := range min(len(ids), len(c.ids)) {
				if ids[i] != 0 {
					c.ids[i] = ids[i] // (a chunk not sent now keeps its id)
				}
			}
			if writing {
				pc.cut = nil
			}
		} else {
			pc.cut = nil
		}
		wrote, err := v.repair(ctx, pc)
		switch {
		case err == nil:
			// The parity agrees with the data as it is: the chain must
			// not be sent again.
		case wrote:
			pc.cut = nil // the parity partly recomputed
			v.markUnsure(pc)
		default:
			v.markUnsure(pc)
		}
	}
}

// Repair puts right the unsure pieces (repair.go) of the rows that hold
// a byte of [off, off+n) of the volume, as the next write to each row
// would. It is for the rows' writer, between writes: a chain cut short
// can be finished only while the memory nodes remember it.
func (v *Volume) Repair(ctx context.Context, off, n int64) {
	if n <= 0 || off < 0 || off >= v.Size() {
		return
	}
	n = min(n, v.Size()-off)
	rowBytes := int64(v.k) * int64(v.s)
	for row := off / rowBytes; row <= (off+n-1)/rowBytes; row++ {
		v.repairRow(ctx, uint64(row), false)
	}
}

// ForgetCuts drops the chains cut short this Volume keeps to send
// again: for a writer that may not have been the rows' only writer
// since (it lost them a while), for which finishing a chain would write
// over newer bytes. Their pieces stay unsure, repaired from the data.
func (v *Volume) ForgetCuts() {
	v.st.mu.Lock()
	defer v.st.mu.Unlock()
	for i := range v.st.unsure {
		v.st.unsure[i].cut = nil
	}
}

// Finished counts the chains cut short that this Volume finished by
// sending them again (repairRow).
func (v *Volume) Finished() int {
	v.st.mu.Lock()
	defer v.st.mu.Unlock()
	return v.st.finished
}

// repair recomputes the parity of the bytes of piece pc from the data
// shards of its row, which must all answer; wrote reports whether it
// wrote a parity shard before it failed.
func (v *Volume) repair(ctx context.Context, pc piece) (wrote bool, _ error) {
	shards := make([][]byte, v.k+v.m)
	for i := range v.k {
		shards[i] = make([]byte, pc.n)
		if _, err := v.r.ReadAtContext(ctx, shards[i], int64(v.ShardAddr(pc.row, i, pc.w))); err != nil {
			return false, fmt.Errorf("ec: row %d shard %d: %w", pc.row, i, err)
		}
	}
	for j := range v.m {
		shards[v.k+j] = make([]byte, pc.n)
	}
	if err := v.enc.Encode(shards); err != nil {
		return false, fmt.Errorf("ec: row %d: %w", pc.row, err)
	}
	var errs []error
	for j := range v.m {
		s := v.k + j
		if _, err := v.r.WriteAtContext(ctx, shards[s], int64(v.ShardAddr(pc.row, s, pc.w))); err != nil && !gone(err) {
			errs = append(errs, fmt.Errorf("ec: row %d shard %d: %w", pc.row, s, err))
		}
	}
	return true, errors.Join(errs...)
}
