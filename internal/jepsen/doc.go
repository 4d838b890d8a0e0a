// Package jepsen checks what a replicated service did under faults from a
// recorded history, the way Jepsen does: histories, not anecdotes. A test
// runs concurrent clients against the service while a Nemesis crashes and
// restarts its processes and impairs its links on a schedule drawn from a
// seed; every client operation is recorded in a History with its
// invocation, its completion and its outcome, and Check decides whether
// some order of the operations, each taking effect at one instant between
// its invocation and its completion, explains every result (whether the
// history is linearizable), key by key, with the porcupine checker. A
// write whose outcome is unknown (a timeout: it may or may not have taken
// effect) is kept open to the end of the history, as Jepsen's :info; one
// that failed definitely is dropped. After the faults are healed,
// CompareReplicas checks that no two replicas of a key differ.
//
// The package knows nothing about the service: operations are reads and
// writes of registers named by string keys, whose values are 64-bit
// digests of what was stored (Digest), so that a stale read, the loss of
// an acknowledged write and a read of something never written all show.
// The block store (stor) is its first user; the key-value store (kv)
// reuses the same History, Nemesis and Report.
//
// A queue's history is checked exactly instead (QueueHistory,
// CheckQueue, used by the message queue, mq): every record sent has a
// value no other uses and an acknowledged send says at which offset of
// which partition its batch lies, so the partitions' contents follow
// from the history, and lost, reordered, skipped or duplicated records
// show without a search.
//
// Everything takes its time from the clock it is given and from the time
// package, so inside a testing/synctest bubble (the simnet harnesses) time
// is virtual and a run of minutes of faults takes seconds.
package jepsen
