package cc

// VegasLimits configures a Vegas window.
type VegasLimits struct {
	// QueueLow and QueueHigh bound the packets (or requests) the window
	// may keep queued in the network, Cwnd·(1 − Min RTT/SRTT): below
	// QueueLow it grows, beyond QueueHigh it shrinks.
	QueueLow, QueueHigh float64
	// Min and Max bound the window.
	Min, Max float64
}

// Vegas is a window in the manner of TCP Vegas: it grows (by one per
// answer in slow start, below Ssthresh, one per window after) while fewer
// than QueueLow of its packets wait in queues, by the RTT's excess over
// its minimum, and shrinks by one per window beyond QueueHigh, leaving
// slow start. A loss halves it. Keeping the queues short keeps the RTT,
// and so a retransmission timer built on it, honest.
type Vegas struct {
	Cwnd, Ssthresh float64
}

// OnAnswer adapts the window after an answer, given the path's RTT
// estimate (its sample already taken).
func (v *Vegas) OnAnswer(l *VegasLimits, rtt *RTT) {
	queued := 0.0
	if rtt.SRTT > 0 && rtt.Min > 0 {
		queued = v.Cwnd * (1 - float64(rtt.Min)/float64(rtt.SRTT))
	}
	switch {
	case queued > l.QueueHigh:
		v.Ssthresh = min(v.Ssthresh, v.Cwnd)
		v.Cwnd = max(l.Min, v.Cwnd-1/v.Cwnd)
	case queued < l.QueueLow && v.Cwnd < v.Ssthresh:
		v.Cwnd++
	case queued < l.QueueLow:
		v.Cwnd += 1 / v.Cwnd
	}
	v.Cwnd = min(v.Cwnd, l.Max)
}

// OnLoss halves the window (not below l.Min) and leaves slow start.
func (v *Vegas) OnLoss(l *VegasLimits) {
	v.Ssthresh = max(v.Cwnd/2, l.Min)
	v.Cwnd = v.Ssthresh
}
