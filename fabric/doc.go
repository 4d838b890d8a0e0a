// Package fabric is NDMA's forwarding node — the software switch that does
// the many-to-many work so that one application call is one transmission:
//
//   - multicast: a sender's packets are replicated to every member of its
//     group and the members' ACKs are merged into one ACK stream back to
//     the sender (cumulative = minimum, SACK = intersection);
//     retransmissions go only to the members that miss them;
//   - aggregation: members' contributions are reduced in a bounded pool of
//     slots (AggPool) and only the result is forwarded, to a root or to
//     all members, in a deterministic member order on request;
//   - anycast: a request to a service group is forwarded to one member
//     chosen by policy (Selector: least outstanding, round robin, key
//     affinity with replicas), and the reply relayed back;
//   - a control plane (ctrl.go): job rendezvous, service registration,
//     heartbeats, leave, destroy — authenticated with a fabric token.
//
// Switch is sans-I/O (Step/Poll with an explicit time) like the transport
// engine it embeds, so it runs on real UDP (Server) and on netio/simnet.
package fabric
