// Package stor is replicated block storage on NDMA: volumes of fixed-size
// extents, each extent kept by Replicas storage nodes. A write is one
// multicast to the extent's replica group (the switch replicates it and
// merges the replicas' acknowledgements); a read is one anycast to the
// extent's replica set (the switch picks the replica with the fewest
// requests outstanding), which answers the client directly through the
// switch, with no other server in the path.
//
// A storage node (Node, the daemon `ndma stord`) keeps its extents in
// files under a directory, with a version per extent, and registers with
// the switch as a member of the storage service, of its own service and
// of the anycast service of every replica set it belongs to. The volume
// map lives on the nodes: every node of a volume keeps its Descriptor, so
// the switch holds only soft state (who serves which replica set), which
// the nodes register again after a switch restart.
//
// A Client creates, lists, stats and removes volumes and opens them. A
// Volume opened for writing holds the volume's lease on every live node
// (one writer at a time) and forms one multicast group per replica set
// with the nodes that are up. Whenever those nodes change it starts a new
// data generation, recorded on each of them before any write of it, so
// that every copy can tell whether it is current: a node that returns
// after the writer went on without it is outdated and copies every extent
// from a current replica before it serves reads; one that cannot reach
// the nodes of its last generation waits, serving nothing (Stat reports
// each copy's state; Client.ForceCurrent is the operator's way out when
// the current copies are lost). A write, flush or read that fails because
// a replica died or the switch restarted is retried, after the groups are
// formed anew, for up to RetryFor. Flush makes every completed write
// durable on every replica written to: each fdatasyncs and the switch
// sums their answers in one aggregation.
package stor
