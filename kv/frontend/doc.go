// Package frontend serves a key space (a kv.Client) to unmodified
// memcached and Redis clients: the memcached text protocol and RESP2 /
// RESP3, over TCP, as a sidecar beside the clients (`ndma kv serve`).
//
// Every request becomes calls on the Store: a GET is a one-sided read
// of the memory nodes, a write an anycast to the key's owner. What a
// protocol offers that the store does not (flush_all, Redis's other
// data types, databases other than 0) is answered with the protocol's
// own error, and the connection goes on.
//
// Each connection holds at most one request: a line of at most
// Config.MaxLine bytes, arguments of at most Config.MaxRequest bytes in
// all. A pipelining client is read one request at a time, and replies
// are written as they are made (the socket's buffers push back on a
// client that does not read them). A value over the key space's
// largest is read, dropped, and refused; a line that is too long, or
// RESP framing that cannot be followed, is answered with an error and
// ends that connection only. At most Config.MaxConns connections are
// served at once; the next is answered with the protocol's refusal and
// closed.
package frontend
