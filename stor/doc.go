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
// with the nodes that are up; a node found dead is dropped from the
// groups (the volume is degraded, which Stat reports) and taken back when
// it returns, after it copied the extents it missed from the other
// replicas (resync). Flush makes every completed write durable on every
// live replica: each replica fdatasyncs and the switch sums their answers
// in one aggregation.
package stor
