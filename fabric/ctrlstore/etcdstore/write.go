package etcdstore

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ndma/ndma/fabric/ctrlstore"
)

// Retry delays of the writer while etcd does not answer.
const (
	retryMin = 100 * time.Millisecond
	retryMax = 2 * time.Second
)

// writer writes the queued changes, oldest first, one at a time; a
// change etcd did not take is tried again, after a delay that doubles up
// to retryMax.
func (s *Store) writer() {
	defer s.wg.Done()
	delay := time.Duration(0)
	for {
		s.mu.Lock()
		id, val, ok := s.q.pop()
		if ok {
			s.inflight++
		}
		s.mu.Unlock()
		if !ok {
			select {
			case <-s.ctx.Done():
				return
			case <-s.wake:
			}
			continue
		}
		err := s.write(id, val)
		s.mu.Lock()
		s.inflight--
		if err != nil {
			s.stats.Failed++
			s.q.retry(id, val)
		}
		backlog := s.q.len()
		s.mu.Unlock()
		if err == nil {
			if delay > 0 {
				s.log.Info("etcdstore: etcd answers again; writing the queued changes", "backlog", backlog)
			}
			delay = 0
			continue
		}
		if delay == 0 {
			s.log.Warn("etcdstore: etcd does not answer; the switch goes on and queues its changes", "err", err, "backlog", backlog)
		}
		delay = min(max(2*delay, retryMin), retryMax)
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

// write writes region id's record val (nil: deletes it) if the key is
// still as this store last saw it. It returns an error only if etcd did
// not answer.
func (s *Store) write(id uint32, val []byte) error {
	s.mu.Lock()
	rev, known := s.revs[id]
	switch {
	case s.conflicted[id]:
		s.mu.Unlock()
		return nil
	case val == nil && !known:
		s.mu.Unlock()
		return nil // never written
	}
	h := hash(val)
	sent := s.sent[id]
	if len(sent) == 0 || sent[0] != h {
		// The values sent before whose answers were lost may be there.
		sent = append([]uint64{h}, sent[:min(len(sent), maxSent-1)]...)
		s.sent[id] = sent
	}
	s.mu.Unlock()

	key := s.regionKey(id)
	op := clientv3.OpDelete(key)
	if val != nil {
		op = clientv3.OpPut(key, string(val))
	}
	for range 2 {
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.DialTimeout)
		resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(op).Else(clientv3.OpGet(key)).Commit()
		cancel()
		if err != nil {
			return err
		}
		if resp.Succeeded {
			s.mu.Lock()
			if val == nil {
				delete(s.revs, id)
				delete(s.sent, id) // a zero entry matches the watch's delete event too
			} else {
				s.revs[id] = resp.Header.Revision
				s.sent[id] = []uint64{h} // older ones' events come before this revision
			}
			s.stats.Written++
			s.mu.Unlock()
			return nil
		}
		// The key changed since this store saw it: by this store's
		// own write whose answer was lost, or by another writer.
		cur, curRev := uint64(sentDelete), int64(0)
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
			cur, curRev = hash(kvs[0].Value), kvs[0].ModRevision
		}
		if !own(sent, cur) {
			break
		}
		s.mu.Lock()
		if curRev == 0 {
			delete(s.revs, id)
		} else {
			s.revs[id] = curRev
		}
		s.mu.Unlock()
		if cur == h {
			s.mu.Lock()
			s.stats.Written++
			s.mu.Unlock()
			return nil
		}
		rev = curRev // the older value of this store's: write over it
	}
	s.mu.Lock()
	s.conflict(id)
	s.stats.Conflicts++
	s.mu.Unlock()
	s.log.Error("etcdstore: region record changed by another writer: not overwritten, and no longer written by this switch", "region", id, "key", key)
	return nil
}

// conflict marks region id as another writer's: this store no longer
// writes it. The table holds at most the regions this store wrote or
// read (revs, sent), and never more than 2 × ctrlstore.MaxRegions.
// Caller holds mu.
func (s *Store) conflict(id uint32) {
	_, known := s.revs[id]
	if (known || len(s.sent[id]) > 0) && len(s.conflicted) < 2*ctrlstore.MaxRegions {
		s.conflicted[id] = true
	}
}
