package endpoint

// Views of the core's tables for the hostile-input tests.

// bufferedUnexpected is the bytes kept for unexpected messages.
func bufferedUnexpected(c *Core) int {
	n := 0
	for _, u := range c.unexp {
		for _, f := range u.asm.frags {
			n += len(f.data)
		}
	}
	for _, u := range c.unexpMsg {
		for _, f := range u.asm.frags {
			n += len(f.data)
		}
	}
	return n
}

// refusedFrags is the fragments refused for contradicting their message.
func refusedFrags(c *Core) uint64 { return c.Stats().FragmentsRefused }
