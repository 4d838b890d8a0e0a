// Package etcdstore keeps a switch's pool map in etcd (ctrlstore.Store
// over go.etcd.io/etcd/client/v3): what `ndma switch --etcd` uses.
//
// Under a prefix (default "/ndma/") each pool region has one key,
// region/<id> (the id in ten decimal digits), holding its record
// (ctrlstore.AppendRecord). Open reads them all, a key at a time, before
// the switch starts; a record that does not decode, or whose key names
// another region, is refused with an error in the log and left alone.
// The switch's changes are queued (Put, Delete: one entry per region,
// the latest change replacing an older one still queued, so the queue
// holds at most 2 × ctrlstore.MaxRegions entries) and written in order
// by one goroutine, each by a transaction that compares the key's mod
// revision with the one this store last wrote or read: a key another
// writer changed is not overwritten; the region is left to that writer
// and counted (Stats.Conflicts). While etcd cannot be reached the queue
// waits (Stats.Backlog) and the switch goes on.
//
// The switch holds a lease that it keeps alive, and under it the key
// switch/<name>: the key disappears LeaseTTL after the switch stops
// (at once when it closes the store). A watch on the region keys tells
// the store of changes another writer made: they are decoded like the
// records Open reads, logged and counted (Stats.Foreign), and the region
// is not written again by this switch.
package etcdstore
