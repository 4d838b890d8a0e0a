package fabric

import "time"

// Bounds and lifetimes of the switch's data-path state (aggregation slots,
// anycast requests), applied at every Poll.

// DefaultAggTimeout is Config.AggTimeout's default.
const DefaultAggTimeout = 30 * time.Second

func (c *Config) setDataDefaults() {
	if c.AggTimeout == 0 {
		c.AggTimeout = DefaultAggTimeout
	}
}

// negativeData reports whether a data-path bound is negative.
func (c *Config) negativeData() bool {
	return c.AggTimeout < 0
}

// expireData frees the data-path state whose lifetime is over.
func (s *Switch) expireData(now time.Time) {
	s.expireAggs(now)
}

// nextDataExpiry is the earliest time expireData has work (zero: none).
func (s *Switch) nextDataExpiry() time.Time {
	return s.nextAggExpiry()
}
