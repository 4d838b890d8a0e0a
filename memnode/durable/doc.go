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
//	lock         held (flock) by the process using the directory
//
// When a write counts as durable is the Sync policy's: SyncAlways
// flushes the bytes a write touched to the file before the node answers
// it; an interval flushes the whole memory in the background that often.
// A Dir is the memnode/server.Durable of the node.
package durable
