// Package wire owns every byte layout of the NDMA protocol: the fixed packet
// header, opcodes, delivery modes, status codes, the ACK/SACK/NACK frame and
// CRC32C integrity. docs/PROTOCOL.md is the human-readable specification of
// the same layouts; the two are kept in step.
//
// Encoding and decoding never allocate: a Header is a plain value that is
// written into or read from a caller-supplied buffer, and an Ack holds its
// SACK blocks in a fixed array. Every decoder rejects malformed input with an
// error and never panics, whatever the bytes (see the fuzz targets).
package wire
