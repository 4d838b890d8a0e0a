package etcdstore

import (
	"context"
	"math"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// grantLease grants a lease of LeaseTTL and puts the liveness key under
// it.
func (s *Store) grantLease(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.DialTimeout)
	defer cancel()
	g, err := s.cli.Grant(ctx, int64(math.Ceil(s.cfg.LeaseTTL.Seconds())))
	if err != nil {
		return err
	}
	if _, err := s.cli.Put(ctx, s.LivenessKey(), s.cfg.Name, clientv3.WithLease(g.ID)); err != nil {
		return err
	}
	s.mu.Lock()
	s.lease = g.ID
	s.mu.Unlock()
	return nil
}

// keepAlive keeps the lease alive while the store runs; a lease that
// expired (etcd unreachable for LeaseTTL) is granted again, with the
// liveness key, once etcd answers.
func (s *Store) keepAlive() {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		lease := s.lease
		s.mu.Unlock()
		if ch, err := s.cli.KeepAlive(s.ctx, lease); err == nil {
			for range ch {
			}
		}
		if s.ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		s.stats.LeaseLost++
		s.mu.Unlock()
		s.log.Warn("etcdstore: the switch's lease expired; its liveness key is gone until etcd answers", "key", s.LivenessKey())
		for delay := retryMin; ; delay = min(2*delay, retryMax) {
			if s.grantLease(s.ctx) == nil {
				break
			}
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(delay):
			}
		}
	}
}
