package fabric

import "time"

// Bounds and lifetimes of the switch's data-path state (aggregation slots,
// anycast requests), applied at every Poll.

// Defaults of the Config fields bounding the data paths.
const (
	DefaultAggTimeout          = 10 * time.Minute
	DefaultAggReclaimAfter     = 30 * time.Second
	DefaultAnycastTimeout      = 30 * time.Second
	DefaultMaxAnycast          = 1 << 16
	DefaultMaxAnycastPerClient = 1024
)

func (c *Config) setDataDefaults() {
	if c.AggTimeout == 0 {
		c.AggTimeout = DefaultAggTimeout
	}
	if c.AggReclaimAfter == 0 {
		c.AggReclaimAfter = DefaultAggReclaimAfter
	}
	if c.AnycastTimeout == 0 {
		c.AnycastTimeout = DefaultAnycastTimeout
	}
	if c.MaxAnycast == 0 {
		c.MaxAnycast = DefaultMaxAnycast
	}
	if c.MaxAnycastPerClient == 0 {
		c.MaxAnycastPerClient = DefaultMaxAnycastPerClient
	}
}

// negativeData reports whether a data-path bound is negative.
func (c *Config) negativeData() bool {
	return c.AggTimeout < 0 || c.AggReclaimAfter < 0 || c.AnycastTimeout < 0 || c.MaxAnycast < 0 || c.MaxAnycastPerClient < 0
}

// expireData frees the data-path state whose lifetime is over.
func (s *Switch) expireData(now time.Time) {
	s.expireAggs(now)
	s.expireAnycast(now)
}

// nextDataExpiry is the earliest time expireData has work (zero: none).
func (s *Switch) nextDataExpiry() time.Time {
	a, b := s.nextAggExpiry(), s.anyQ.nextExpiry()
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
