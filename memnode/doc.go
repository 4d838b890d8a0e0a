// Package memnode is the memory node of NDMA: memory regions identified by
// 64-bit keys, and the NetDAM instruction executor that carries out the
// READ, WRITE, compare-and-swap, fetch-and-add and element-wise vector ALU
// instructions arriving in request packets. Both the memory-node daemon
// (ndma memd) and any endpoint that exposes its own memory run the same
// executor. A node lending memory to a forwarding node's pool keeps a
// grant table over the lent region (PoolNode: pool requests checked a
// second time, chained-instruction hops, optimizer steps) and a reply cache
// (Replies) that answers duplicates of mutating pool requests.
//
// The package is a sans-I/O core: a Store holds the regions, and
// Store.Exec takes one decoded request header (wire.Header) and its payload
// and returns a Result — the status, the old value of an atomic, or the bytes
// of a READ. It never does I/O, never reads the clock, never logs, starts no
// goroutines, and Exec never allocates and never panics whatever the header
// says. Receiving packets, reassembling and acknowledging them, and sending
// the responses is the caller's job (the transport engine and the daemon
// wiring, which live elsewhere); so is turning a key file into regions, for
// which LoadKeyFile parses the format.
//
// # Byte order
//
// NDMA memory words are little-endian: the 64-bit word of a CAS or
// fetch-and-add and every element of a vector op are read from and written
// to region memory in little-endian order, the native order of the hosts
// NDMA targets, so an application can map a region onto its own []uint64 or
// []float32 without conversion. The integers of the wire header (addresses,
// keys, operands) are big-endian on the wire, but that is the wire package's
// concern: by the time Exec sees a wire.Header they are plain Go integers.
//
// # Addresses
//
// Every address is a byte offset into the region named by the header's Key,
// not a host pointer. All bounds checks are done in uint64 arithmetic that
// cannot wrap, so no combination of Addr, Offset and length reaches memory
// outside the region.
package memnode
