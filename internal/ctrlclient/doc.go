// Package ctrlclient is the client side of the control protocol
// (wire/ctrl) that both the host library (endpoint) and the memory node
// (memnode/node) speak to a forwarding node: encoding a request with the
// fabric token, reading and checking its answer, explaining a refusal or
// a silence (NoAnswerError), and a memory node's lending (Lend: the offer
// of its region, repeated as its heartbeat, and the report of its
// grants to a switch that restarted). How a request travels and waits
// for its answer is the caller's (a Transport).
package ctrlclient
