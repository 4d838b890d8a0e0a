// Package ctrl is the control protocol's wire format: the messages an
// endpoint and the forwarding node exchange to form groups, register
// anycast services and run the memory pool (Msg, its Type and fields),
// their limits and validation, the encoder (Append), the decoder (Parse),
// and the meaning of the operands the switch refuses a request with.
// The switch (package fabric) and every host-side package (endpoint, pool,
// coll, the memory node) speak it through this package, which imports
// nothing above wire.
//
// A control message is the payload of a packet with opcode CONTROL (0x08):
// requests from an endpoint to the forwarding node, and its responses with
// the header's RESP flag set. They travel reliably through the transport, so
// a message may span several packets. All integers are big-endian.
//
//	0                   1                   2                   3
//	0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//
// +---------------+---------------+-------------------------------+
// |     Type      |     Flags     |                               |  0
// +---------------+---------------+                               +
// |              Fields of Type, in the order below ...           |
// +---------------------------------------------------------------+
// |                                                               |
// +                                                               +
// |           Tag: HMAC-SHA256(fabric token, every byte           |
// +             from Type to the end of the fields)               +
// |             truncated to its first 16 bytes                   |
// +                                                               +
// |                                                               |
// +---------------------------------------------------------------+
//
// This package encodes and decodes everything up to the tag (Append,
// Parse); package secure appends and checks the tag (secure.AppendCtrl,
// secure.ParseCtrl), so that all authentication lives in one package.
//
// Type: 1 JOIN, 2 LEAVE, 3 DESTROY, 4 HEARTBEAT, 5 REGISTER, 6 LOOKUP,
// 7 POOLNODE, 8 POOLCREATE, 9 POOLOPEN, 10 POOLFREE, 11 POOLSTAT,
// 12 POOLGRANT, 13 POOLREVOKE, 14 POOLREBUILD, 15 POOLREBUILDGO,
// 16 POOLREBUILT, 17 JOINSTATUS.
// Flags: bit 0 RESP (a response); bits 1–7 must be zero.
//
// Field encodings:
//
//	u8, u16, u32, u64  unsigned integers of 1, 2, 4, 8 bytes
//	i32                two's complement, 4 bytes
//	rank               u16: 0xFFFF = any rank (-1), else the rank
//	name               u8 length (1..64) + that many bytes
//	member             u16 id, u8 family (4 or 6), 4 or 16 address
//	                   bytes, u16 UDP port (9 or 21 bytes in all)
//	range              u64 start, u64 end, i32 owner, u8 replica count
//	                   (0..8) + that many i32 replica ranks
//	list of X          u16 count + count × X
//	pool               u64 size (1..2^48), u64 stripe (64..2^30, a
//	                   multiple of 8), u16 columns (0..256; 0 in a
//	                   request: every live memory node), u8 replicas
//	                   (1..2), u8 permissions (bits read, write, atomic,
//	                   vector; not 0)
//	poolnode           u16 id, address as in member, u64 capacity,
//	                   u64 used, u8 alive (0 or 1)
//	poolregion         u32 region, pool
//	ranks              u16 size (0..4096), then (size+7)/8 bytes: bit
//	                   r%8 (least significant first) of byte r/8 is rank
//	                   r; the bits past size are zero
//
// Fields by type (request → response):
//
//	JOIN       job name, size u16 (1..4096), rank (any, or < size),
//	           mtu u16 (160..65507: the sender's largest datagram)
//	           → group u32, member u16, epoch u64, list of member (≤ 4096)
//	LEAVE      group u32, member u16  → (no fields)
//	DESTROY    group u32              → (no fields)
//	HEARTBEAT  group u32, member u16
//	           → epoch u64, list of u16 dead member ids (≤ 4096)
//	REGISTER   service name, policy u8, size u16 (1..4096: members the
//	           service will have), rank (any, or < size), list of range
//	           (≤ 4096), mtu u16 → group u32, member u16
//	LOOKUP     service name, mtu u16 → group u32, list of member (≤ 4096)
//	POOLNODE   key u64 (the node's region lent to the pool), capacity u64
//	           (bytes, not 0), incarnation u64 (random per start of the
//	           node), kept u8 (1: a durable node that kept its memory
//	           and grants from an earlier start, 0: not) → node u16
//	POOLCREATE pool → region u32, key u64, pool (columns as chosen)
//	POOLOPEN   region u32, key u64 → pool
//	POOLFREE   region u32, key u64 → (no fields)
//	POOLSTAT   (no fields) → list of poolnode (≤ 1024), list of
//	           poolregion (≤ 4096; region keys are never listed),
//	           refused u64
//	POOLGRANT  region u32, key u64, perm u8, base u64, length u64
//	           (switch → memory node) → (no fields)
//	POOLREVOKE region u32, key u64 (switch → memory node) → (no fields)
//	POOLREBUILD region u32, key u64, pool, base u64, length u64, column
//	           u16 (switch → restarted memory node) → (no fields)
//	POOLREBUILDGO region u32, key u64, column u16 (switch → node) → (no
//	           fields)
//	POOLREBUILT region u32, key u64, column u16, failed u8 (0 or 1)
//	           (node → switch) → (no fields)
//	JOINSTATUS job name → ranks (the job's size and the ranks that
//	           joined its rendezvous; size 0: no rendezvous for the job)
//
// A receiver first checks that the message is at least 16 bytes long, then
// verifies the tag in constant time (a bad tag is answered with status
// AUTH), and only then decodes the fields: an unknown type or flag, a count
// or value out of range, a truncated field or trailing bytes make the
// message malformed.
package ctrl
