// Package secure is NDMA's per-packet protection: security associations
// (SAs) that seal a wire packet with an AEAD — the header authenticated as
// associated data, the payload encrypted (or only authenticated) — under a
// 64-bit sequence number, and open it on the other side with an
// anti-replay window; HKDF key derivation; and the credentials that give
// each role (client, job member, memory node, switch) its own secret
// under the fabric secret.
//
// The layout follows PSP and IPsec ESP with extended sequence numbers
// (RFC 4303): the header's SAID names the receiver's SA, FlagAuth says a
// TagLen-byte tag follows the payload, and the header's sequence field
// (bytes 88..91, zero in packets without FlagAuth) carries the low 32 bits
// of the sender's 64-bit sequence number. The receiver infers the high 32
// bits from its window; they are authenticated (part of the associated
// data) but never sent. The AEAD nonce is the SA's 4-byte salt followed by
// the 64-bit sequence number, so a nonce never repeats under one key: an
// SA refuses to seal once its sequence numbers run out, well before which
// its owner must replace it (SendSA.NeedsRekey).
//
// Like the protocol cores, the package does no I/O and reads no clock.
package secure
