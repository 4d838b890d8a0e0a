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
//   - a memory pool (mmu.go, pool_ctrl.go, pool_data.go): memory nodes
//     lend memory to the MMU, regions are striped over them (one or two
//     copies, by wire/poolmap's Layout), and pool requests are translated
//     per datagram and forwarded to the node that holds them, which
//     answers the client;
//     chained instructions and optimizer steps go the same way;
//   - a control plane (control.go, pool_ctrl.go; the messages are package
//     wire/ctrl's): job rendezvous, service registration, heartbeats,
//     leave, destroy, the pool's nodes, regions and grants —
//     authenticated with a fabric token (secure.ParseCtrl).
//
// Switch is sans-I/O (Receive/Poll with an explicit time) like the transport
// engine it embeds, so it runs on real UDP (Server) and on netio/simnet.
package fabric
