package endpoint

import (
	"testing"

	"github.com/ndma/ndma/memnode/server"
)

// Views of the core's tables for the hostile-input tests.

// bufferedUnexpected is the bytes kept for unexpected messages.
func bufferedUnexpected(c *Core) int {
	n := 0
	for _, u := range c.unexp {
		n += u.asm.Kept()
	}
	for _, u := range c.unexpMsg {
		n += u.asm.Kept()
	}
	return n
}

// refusedFrags is the fragments refused for contradicting their message.
func refusedFrags(c *Core) uint64 {
	st := c.Stats()
	return st.FragmentsRefused + st.Transport.Contradicting
}

// anyInBytes is the bytes held by anycast requests being received.
func anyInBytes(c *Core) int {
	n := 0
	for _, r := range c.anyIn {
		n += len(r.Data)
	}
	return n
}

// tableSizes reports the entries of each table a remote datagram can
// reach.
func tableSizes(c *Core) map[string]int {
	return map[string]int{
		"unexp": len(c.unexp), "unexpMsg": len(c.unexpMsg), "anyIn": len(c.anyIn), "requests": len(c.requests),
		"inStatus": c.mem.InRequests(), "deadMembers": len(c.deadMembers), "sendSeq": len(c.sendSeq),
		"recvSeq": len(c.recvSeq), "recvs": len(c.recvs), "rxSeq": len(c.rxSeq), "mcSeq": len(c.mcSeq),
		"aggSeq": len(c.aggSeq), "ops": len(c.ops), "gops": len(c.gops),
	}
}

// checkBounds fails the test if a table a remote datagram can grow is
// past its bound.
func checkBounds(t testing.TB, c *Core) {
	t.Helper()
	cfg := c.cfg
	sz := tableSizes(c)
	switch {
	case sz["unexp"]+sz["unexpMsg"] > cfg.MaxUnexpectedMsgs:
		t.Fatalf("%d unexpected messages, bound %d", sz["unexp"]+sz["unexpMsg"], cfg.MaxUnexpectedMsgs)
	case bufferedUnexpected(c) > cfg.MaxUnexpected:
		t.Fatalf("%d unexpected bytes, bound %d", bufferedUnexpected(c), cfg.MaxUnexpected)
	case sz["anyIn"]+sz["requests"] > cfg.MaxIncoming:
		t.Fatalf("%d anycast requests held, bound %d", sz["anyIn"]+sz["requests"], cfg.MaxIncoming)
	case anyInBytes(c) > cfg.MaxIncomingBytes:
		t.Fatalf("%d anycast request bytes, bound %d", anyInBytes(c), cfg.MaxIncomingBytes)
	case sz["inStatus"] > server.MaxInRequests:
		t.Fatalf("%d partial requests, bound %d", sz["inStatus"], server.MaxInRequests)
	case sz["deadMembers"] > len(c.joined)*(1<<16):
		t.Fatalf("%d dead members for %d groups", sz["deadMembers"], len(c.joined))
	}
	n := 0
	for _, u := range c.unexp {
		if u.stranger {
			n++
		}
	}
	for _, u := range c.unexpMsg {
		if u.stranger {
			n++
		}
	}
	if n > cfg.MaxUnexpectedMsgs/4 {
		t.Fatalf("%d unexpected messages from strangers, bound %d", n, cfg.MaxUnexpectedMsgs/4)
	}
}
