// Package ctrlstore is the switch's durable control-plane state: the
// record of one pool region as a switch writes it through to a store
// outside itself (Record, AppendRecord, ParseRecord), and the interface
// a switch writes through (Store). Package etcdstore implements Store
// over etcd; Mem is an in-memory Store for tests.
//
// Nodes still hold the truth of their own data; the store holds who
// holds what: each region's shape, key, homes, epoch, lost and
// rebuilding columns and fences. A switch that starts with a store
// takes its regions from it first (with their keys), then settles every
// column with the memory nodes' reports as a switch without one does.
//
// The package sits below fabric and imports only wire, wire/ctrl and
// wire/poolmap: a switch without a store pulls in no etcd code.
package ctrlstore
