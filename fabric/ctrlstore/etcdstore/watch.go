package etcdstore

import (
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// watch follows the region keys from the revision Open read them at,
// until the store closes; a watch etcd ends (a compaction, a lost
// leader) starts again where it stopped.
func (s *Store) watch() {
	defer s.wg.Done()
	next := s.loadRev + 1
	for s.ctx.Err() == nil {
		wch := s.cli.Watch(clientv3.WithRequireLeader(s.ctx), s.cfg.Prefix+"region/", clientv3.WithPrefix(), clientv3.WithRev(next))
		for resp := range wch {
			if resp.CompactRevision > next {
				s.log.Warn("etcdstore: watch compacted: changes other writers made before it are not seen", "from", next, "to", resp.CompactRevision)
				next = resp.CompactRevision
			}
			for _, ev := range resp.Events {
				s.watched(ev)
				next = ev.Kv.ModRevision + 1
			}
		}
		select {
		case <-s.ctx.Done():
		case <-time.After(retryMin):
		}
	}
}

// watched takes one change of a region key: this store's own, or
// another writer's, which is decoded (and refused if it does not),
// logged and counted, and whose region this switch no longer writes.
func (s *Store) watched(ev *clientv3.Event) {
	put := ev.Type == mvccpb.PUT
	h := uint64(sentDelete)
	if put {
		h = hash(ev.Kv.Value)
	}
	id, named := s.regionID(ev.Kv.Key)
	s.mu.Lock()
	// This store's own change: a value it sent (whose answer may have
	// been lost), or one at or before the revision it last wrote (older
	// changes of its own that the watch delivers late).
	if named && (own(s.sent[id], h) || ev.Kv.ModRevision <= s.revs[id]) {
		s.mu.Unlock()
		return
	}
	s.stats.Foreign++
	if named {
		s.conflict(id)
	}
	s.mu.Unlock()
	if !put {
		s.log.Warn("etcdstore: region record deleted by another writer; this switch no longer writes it", "key", string(ev.Kv.Key))
		return
	}
	rec, _, err := s.decode(ev.Kv.Key, ev.Kv.Value)
	if err != nil {
		s.mu.Lock()
		s.stats.Refused++
		s.mu.Unlock()
		s.log.Error("etcdstore: region record written by another writer refused", "key", string(ev.Kv.Key), "err", err)
		return
	}
	s.log.Warn("etcdstore: region record changed by another writer; this switch no longer writes it", "region", rec.Region, "epoch", rec.Epoch)
}
