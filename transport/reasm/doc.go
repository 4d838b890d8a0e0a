// Package reasm puts multi-packet messages back together. It is the one
// record of which bytes of a message have arrived, shared by every layer
// that reassembles: the transport engine (its partial messages: it checks
// every fragment it delivers against them), the endpoint (responses,
// multicast and two-sided messages, anycast requests, placed into the
// caller's buffer or kept until one is given) and the forwarding node's
// assembler of multi-packet control requests.
//
// A Msg is the byte ranges received of one message whose length its first
// fragment fixed: at most MaxRanges disjoint ranges, so checking or
// recording a fragment costs O(MaxRanges) whatever the message's size. A
// Buffer adds the bytes themselves. The tables of messages, with their
// bounds and lifetimes, belong to each layer: the transport's per peer
// (MaxPartial), the endpoint's and the forwarding node's control limits.
// Nothing here is safe for concurrent use.
package reasm
