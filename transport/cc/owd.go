package cc

import "time"

// OWDBucket is how long one bucket of a one-way delay base lasts: the
// base is the lowest delay of the last one to two buckets, so a drift of
// the clocks' offset ages out of it.
const OWDBucket = 30 * time.Second

// OWD keeps the bases of a stream's one-way delays (LEDBAT-style,
// RFC 6817), in both directions: Out, of the packets this side sends
// (the receiver's arrival time less the send time, from the ACKs), and
// In, of the packets it receives. A one-way delay has the two clocks'
// offset in it; only its excess over the base means anything (queueing).
// The base is the lowest delay of a full-size packet (a small packet
// leaves out the serialization a full one pays on every hop), kept as
// the minimum of two buckets that both directions rotate together every
// OWDBucket. The zero value has no base.
type OWD struct {
	out, in [2]int64 // Unix ns differences; zero: none in the bucket
	rotated time.Time
}

// SampleOut takes the one-way delay owd of a packet this side sent (full:
// a full-size packet's, which may lower the base) and returns the base,
// zero while there is none.
func (o *OWD) SampleOut(now time.Time, owd int64, full bool) int64 {
	return o.sample(now, &o.out, owd, full)
}

// SampleIn is SampleOut for a packet this side received.
func (o *OWD) SampleIn(now time.Time, owd int64, full bool) int64 {
	return o.sample(now, &o.in, owd, full)
}

func (o *OWD) sample(now time.Time, bases *[2]int64, owd int64, full bool) int64 {
	if full {
		o.rotate(now)
		if bases[0] == 0 || owd < bases[0] {
			bases[0] = owd
		}
	}
	base := bases[0]
	if bases[1] != 0 && (base == 0 || bases[1] < base) {
		base = bases[1]
	}
	return base
}

// rotate starts a new bucket of both directions' bases every OWDBucket.
func (o *OWD) rotate(now time.Time) {
	if now.Sub(o.rotated) >= OWDBucket {
		o.out[1], o.out[0] = o.out[0], 0
		o.in[1], o.in[0] = o.in[0], 0
		o.rotated = now
	}
}
