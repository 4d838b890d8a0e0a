package pool

// AgeProof makes c's last control exchange with the switch look older
// than ReproveAfter.
func AgeProof(c *Client) { c.proved.Store(0) }
