package etcdstore

import "slices"

// queue is the changes waiting to be written: at most one per region
// (a newer change replaces the one queued, keeping its place), in the
// order their regions first changed, at most max regions. A nil value
// is a deletion.
type queue struct {
	order []uint32
	vals  map[uint32][]byte
	max   int
}

func (q *queue) init(max int) { q.vals, q.max = make(map[uint32][]byte), max }

func (q *queue) len() int { return len(q.order) }

// push queues val for region id; it reports false, queueing nothing, if
// the queue is full.
func (q *queue) push(id uint32, val []byte) bool {
	if _, ok := q.vals[id]; ok {
		q.vals[id] = val
		return true
	}
	if len(q.order) >= q.max {
		return false
	}
	q.order = append(q.order, id)
	q.vals[id] = val
	return true
}

// pop takes the oldest change.
func (q *queue) pop() (uint32, []byte, bool) {
	if len(q.order) == 0 {
		return 0, nil, false
	}
	id := q.order[0]
	q.order = slices.Delete(q.order, 0, 1)
	val := q.vals[id]
	delete(q.vals, id)
	return id, val, true
}

// retry puts back a change pop took and that could not be written, at
// the front; if the region changed again meanwhile, the newer change
// stays instead.
func (q *queue) retry(id uint32, val []byte) {
	if _, ok := q.vals[id]; ok {
		return
	}
	q.order = slices.Insert(q.order, 0, id)
	q.vals[id] = val
}
