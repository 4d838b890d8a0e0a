// Package durable keeps a durable memory node's state in a directory
// (ndma memd --dir): the lent memory is a file mapped shared into the
// node, so that the bytes clients write reach the file, and the node's
// grant table (memnode.AppendGrants) is saved beside it, atomically,
// whenever it changes. A node started again on the directory takes both
// back and reports its grants to the switch, which decides which of its
// copies are still current.
//
// The directory holds:
//
//	memory       the lent memory, exactly the lent size
//	grants       the last grant record saved (absent: none yet)
//	grants.tmp   a record being saved (a crash may leave it: ignored and
//	             removed at the next start, the previous grants used)
//	replies      the reply journal: the replies of the newest mutating
//	             requests the node applied (replies.go), a ring of the
//	             reply cache's entries, 64 bytes each, fixed in size
//	undo         under SyncAlways, the bytes the request being applied
//	             may change, as they were before it (undo.go): one
//	             record, emptied at each start
//	lock         held (flock) by the process using the directory
//
// When a write counts as durable is the Sync policy's: SyncAlways
// flushes the bytes a write touched to the file before the node answers
// it; an interval flushes the whole memory in the background that often.
//
// The reply journal closes the gap a restart opens in the node's reply
// cache (memnode.Replies, which answers a resent WRITE, CAS, FETCHADD,
// VECTOR, OPTIM or mutating chain hop instead of applying it again): a
// request applied just before a crash, whose answer was lost, is resent
// by its client after the restart, and without its reply it would be
// applied a second time (an add counted twice, a CAS that swapped
// reporting failure, a write undoing a later write of another client).
// The node writes each applied request's reply to the mapped journal
// right after applying it, and flushes as the policy says.
//
// Under SyncAlways a request and its reply record are one unit on disk,
// though they live in two files that cannot be flushed as one: before
// applying the request the node saves the bytes it may change to the
// undo file and flushes it (Begin); after applying it flushes the
// changed bytes, then writes and flushes the reply record (Commit), and
// only then answers. Open puts the saved bytes back if the journal
// lacks the record of that request, so whatever cut it (a crash of the
// process, a power loss, the kernel writing pages back on its own), the
// request is either kept with its reply or not at all, and its client,
// which had no answer, resends it: the resend is answered from the
// record, or applied for the first time. The price is a third flush
// per request (BenchmarkSyncAlways; docs/BENCHMARKS.md, "A durable
// node's flushes"). Under an interval both go to disk in the
// background flush, the memory first, and no undo record is kept.
//
// Open gives the records back (KeptReplies), and the node puts them in
// its reply cache before it serves, so the resend is answered as the
// first request would have been. Records keep their time: one older
// than the cache's TTL answers nothing, as in memory, and the ring keeps
// as many as the cache holds.
//
// What each failure keeps: under SyncAlways, every answered request
// with its record, and no request without its record. Under an
// interval, a crash of the process keeps every record written (the
// pages are the kernel's), so only a request it killed between applying
// and writing its record (a few instructions, no system call between)
// can be applied again; a power loss takes the last interval's writes
// and records, and pages the kernel wrote back on its own in that
// interval may hold one without the other. A torn or corrupt record is
// skipped at start, and a journal that does not read as one (cut short,
// a bad header, another cache size, beside new memory) is discarded:
// both are logged, and the node then serves as one without a journal
// would; an undo record whose journal was discarded cannot be judged
// and is left as it is (logged). Records live with the node: a copy
// rebuilt on another node has none.
//
// A Dir is the memnode/server.Durable of the node.
package durable
