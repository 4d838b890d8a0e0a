package endpoint

import (
	"cmp"
	"slices"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/wire"
)

// On the simulated network (a socket that offers netio.TimerConn),
// anycast handlers' replies are not sent as each handler returns but
// together, once the goroutines woken at that instant have run, in the
// order of their requests: handlers that finish at one instant (woken
// by the same deadline, say) then reply in an order fixed by the run's
// seed rather than by the Go scheduler. On real sockets a reply goes
// out at once.

// pendingReply is a handler's reply waiting for the instant's flush.
type pendingReply struct {
	r    *Request
	data []byte
	st   wire.Status
}

// initReplyOrder arms the deferred replies when the socket offers a
// network-ordered timer.
func (ep *Endpoint) initReplyOrder() {
	if tc, ok := ep.io.Conn().(netio.TimerConn); ok {
		ep.replyTimer = tc.AfterFunc(ep.flushReplies)
	}
}

// replyLocked sends a handler's reply, or with deferred replies queues
// it for the instant's flush. The caller holds mu.
func (ep *Endpoint) replyLocked(r *Request, data []byte, st wire.Status) {
	if ep.replyTimer == nil {
		_ = ep.core.Reply(r, data, st)
		ep.pumpLocked(time.Now())
		return
	}
	ep.replies = append(ep.replies, pendingReply{r, data, st})
	if len(ep.replies) == 1 {
		ep.replyTimer.Reset(0)
	}
}

// flushReplies sends the queued replies in their requests' order.
func (ep *Endpoint) flushReplies() {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.closed || len(ep.replies) == 0 {
		return
	}
	slices.SortStableFunc(ep.replies, func(a, b pendingReply) int {
		return cmp.Or(cmp.Compare(a.r.msgID, b.r.msgID), cmp.Compare(a.r.Group, b.r.Group))
	})
	for i, p := range ep.replies {
		_ = ep.core.Reply(p.r, p.data, p.st)
		ep.replies[i] = pendingReply{}
	}
	ep.replies = ep.replies[:0]
	ep.pumpLocked(time.Now())
}
