package ctrl

import "errors"

// Why the switch refuses a control request: the Operand1 of its AUTH,
// BUSY or BAD_OPERAND answer (wire.Status), which the endpoint turns into
// an error that says what to do.

// Operand1 of an AUTH answer to a request that authenticated but that the
// sender's credential may not make; 0 is a control message that failed
// authentication.
const (
	// AuthRoleRefused: the credential's role may not send the request
	// (fabric.RoleMay).
	AuthRoleRefused = 1
	// AuthNameRefused: the credential's name does not bind the job, rank
	// or service the request names (fabric.RankMay, fabric.ServiceMay).
	AuthNameRefused = 2
)

// Operand1 of a JOIN refused with StatusBusy: why.
const (
	// JoinBusyFormed: the job's group formed already (with every rank),
	// or the name is an anycast service's.
	JoinBusyFormed = 1
	// JoinBusyFull: the switch holds fabric.Config.MaxGroups groups or
	// fabric.ControlLimits.MaxRendezvous rendezvous.
	JoinBusyFull = 2
	// JoinBusyNoRank: a JOIN for any rank found every rank taken.
	JoinBusyNoRank = 3
	// JoinBusyExpired: no rank joined for fabric.ControlLimits.RendezvousTimeout
	// and the switch dropped the rendezvous.
	JoinBusyExpired = 4
	// JoinBusyConflict (in Operand1's top byte, JoinConflict): another
	// rank asked for the job with another size or MTU, and the switch
	// dropped the rendezvous.
	JoinBusyConflict = 5
)

// JoinConflict is Operand1 of a JOIN refused with StatusBusy because
// rank asked for the job with size and mtu, which the waiting ranks did
// not: JoinBusyConflict in the top byte, then the rank (16 bits), the
// size and the MTU (20 bits each; a rank of RankAny is 0xFFFF).
// SplitJoinConflict takes it apart.
func JoinConflict(rank, size, mtu int) uint64 {
	return JoinBusyConflict<<56 | uint64(uint16(rank))<<40 | uint64(size&0xFFFFF)<<20 | uint64(mtu&0xFFFFF)
}

// SplitJoinConflict returns the rank, size and MTU of a JoinConflict
// operand (rank -1: any rank).
func SplitJoinConflict(v uint64) (rank, size, mtu int) {
	rank = int(uint16(v >> 40))
	if rank == 0xFFFF {
		rank = -1
	}
	return rank, int(v >> 20 & 0xFFFFF), int(v & 0xFFFFF)
}

// JoinRefusal is Operand1 of a JOIN refused with wire.StatusBadOperand:
// the size and MTU the job's members joined with, which the refused
// request did not match. SplitJoinRefusal takes it apart.
func JoinRefusal(size, mtu int) uint64 { return uint64(size)<<32 | uint64(mtu) }

// SplitJoinRefusal returns the job size and MTU of a JoinRefusal operand.
func SplitJoinRefusal(v uint64) (size, mtu int) { return int(v >> 32), int(v & 0xFFFFFFFF) }

// PoolRecovering is, in the top byte of a BUSY answer's Operand1, a switch
// rebuilding its pool map; the rest is the milliseconds left.
const PoolRecovering = 3

// A POOLCREATE answered BUSY for want of memory nodes or memory: Operand1
// holds the kind in its top byte (1 nodes: the nodes needed and alive in
// its two low 16-bit fields; 2 bytes: the bytes free), and the endpoint's
// error wraps one of these.
var (
	ErrNoSpace = errors.New("fabric: pool: not enough free memory on the memory nodes")
	ErrNoNodes = errors.New("fabric: pool: not enough live memory nodes")
)
