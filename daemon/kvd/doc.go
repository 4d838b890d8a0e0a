// Package kvd is the key-value store's owner daemon: it runs one owner
// rank of a key space (kv.StartOwner) on an endpoint of its own, so
// that the writes of the rank's shards, sent by anycast to the space's
// service, are applied by it; and it exports the owner's counters as
// Prometheus metrics. It is the library behind `ndma kvd`.
//
// A key space is a pool region; its id and key are the capability to
// it. `ndma kv create` makes the region and writes them, with the
// space's name, to a space file (SpaceFile, private to its owner):
// every owner of the space starts from that file. Clients need only the
// space's name: they ask a running owner for the region.
package kvd
