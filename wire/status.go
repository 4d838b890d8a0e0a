package wire

import "fmt"

// Status is the result code a responder puts in a response header. A
// non-zero Status is an error value: callers test it with errors.Is, for
// example errors.Is(err, wire.StatusBadKey).
type Status uint8

// Status codes. The numbers are part of the wire format.
const (
	StatusOK          Status = 0
	StatusBadKey      Status = 1  // no region with this key
	StatusOutOfBounds Status = 2  // address range outside the region
	StatusMisaligned  Status = 3  // atomic or vector address/length not aligned to the element size
	StatusUnknownOp   Status = 4  // opcode, ALU op or mode the responder does not execute
	StatusPermission  Status = 5  // region does not allow this access (e.g. write to read-only)
	StatusBadOperand  Status = 6  // invalid dtype, or payload length not a multiple of the element size
	StatusTooLarge    Status = 7  // request larger than the responder accepts
	StatusBusy        Status = 8  // responder out of resources; retry later
	StatusMemberDead  Status = 9  // a group member stopped answering (Operand1 = member id)
	StatusNotMember   Status = 10 // sender or destination is not a member of the group
	StatusAuth        Status = 11 // control message failed authentication (bad fabric token)
	StatusLost        Status = 12 // pool data lost: the memory node that held the only copy restarted
	StatusFenced      Status = 13 // a fenced request's token is below the fence's (a newer holder raised it), or the fence was never raised; Operand1 = the fence's token
	statusCount              = 14
)

var statusText = [...]string{
	StatusOK:          "ok",
	StatusBadKey:      "bad region key",
	StatusOutOfBounds: "address out of bounds",
	StatusMisaligned:  "misaligned address or length",
	StatusUnknownOp:   "unknown operation",
	StatusPermission:  "permission denied",
	StatusBadOperand:  "bad operand",
	StatusTooLarge:    "request too large",
	StatusBusy:        "responder busy",
	StatusMemberDead:  "group member dead",
	StatusNotMember:   "not a member of the group",
	StatusAuth:        "authentication failed",
	StatusLost:        "data lost (its memory node restarted)",
	StatusFenced:      "fenced (a newer holder raised the fence)",
}

// Error implements error.
func (s Status) Error() string {
	if int(s) < len(statusText) {
		return "ndma: " + statusText[s]
	}
	return fmt.Sprintf("ndma: status %d", uint8(s))
}

// String is the short name of the status.
func (s Status) String() string {
	if int(s) < len(statusText) {
		return statusText[s]
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// Known reports whether s is a status code this version defines.
func (s Status) Known() bool { return s < statusCount }
