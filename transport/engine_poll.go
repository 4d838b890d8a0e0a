package transport

import (
	"time"

	"github.com/ndma/ndma/netio"
)

// Poll appends the datagrams to send now to out and returns them, along
// with completions since the last Poll and the time Poll should next be
// called (zero: nothing pending; a time not after now: call again at
// once). The datagrams' buffers belong to the engine and are valid until
// the next Poll; so is the completion slice. While peers have state, the
// time returned is no later than when the least recently active of them
// may be swept as idle (Config.IdleTimeout).
func (e *Engine) Poll(now time.Time, out []netio.Datagram) ([]netio.Datagram, []Completion, time.Time) {
	e.setNow(now)
	e.selfStall(now)
	next := e.sweep(now)
	budget := e.cfg.MaxBurst
	used := 0
	keep := e.active[:0]
	for _, p := range e.active {
		if budget > 0 {
			var n int
			out, n = p.poll(now, out, used, budget)
			used += n
			budget -= n
		}
		if p.removed {
			p.isActive = false
			continue
		}
		var dl time.Time
		if p.hasWork(now) {
			dl = now
		} else {
			dl = p.deadline(now)
		}
		if dl.IsZero() {
			p.isActive = false
			p.releaseRingIfIdle()
			continue
		}
		keep = append(keep, p)
		if next.IsZero() || dl.Before(next) {
			next = dl
		}
	}
	for i := len(keep); i < len(e.active); i++ {
		e.active[i] = nil
	}
	e.active = keep
	// Rotate so the next Poll starts with a different peer (fairness when
	// the burst budget runs out).
	if len(e.active) > 1 && budget == 0 {
		first := e.active[0]
		copy(e.active, e.active[1:])
		e.active[len(e.active)-1] = first
	}
	comps := e.comps
	e.comps, e.compsSpare = e.compsSpare[:0], comps
	e.expectAt = next
	return out, comps, next
}

// selfStallGap is how late past its deadline a Poll must come for the
// engine to take the delay as its own process's stall.
const selfStallGap = 500 * time.Millisecond

// selfStall leaves this process's own stall out of its peers' silence:
// when Poll comes more than selfStallGap after the deadline it last gave,
// the process did not run meanwhile (stopped, paused, starved of CPU),
// so neither did it receive; the time its peers have been silent is
// shifted by the stall, and a peer is declared dead only if it stays
// silent for DeadTimeout of this process's running time. (What the peers
// decided about this process meanwhile, it learns from them: a switch
// that counted it dead says so.) The work is over the peers with data in
// flight, only after a stall.
func (e *Engine) selfStall(now time.Time) {
	if e.expectAt.IsZero() {
		return
	}
	gap := now.Sub(e.expectAt)
	e.expectAt = time.Time{}
	if gap <= selfStallGap {
		return
	}
	e.stats.SelfStalls++
	for _, p := range e.active {
		if !p.lastProgress.IsZero() {
			p.lastProgress = p.lastProgress.Add(gap)
		}
	}
}
