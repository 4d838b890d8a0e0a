package mq

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/wire/ctrl"
)

// Push delivery: a producer configured with a Push multicasts every
// batch it stores, once, to the topic's subscribers through the switch,
// which replicates it. The subscribers are the members of the topic's
// push service (pushService), an anycast service group of the switch
// with key affinity: key k reaches member k. A producer asks the switch
// for the service's live members while it produces (at most once a
// Push.Refresh), and when they changed forms a job group of them and
// itself (rank 0) anew: it invites each member by anycast to join the
// job, then joins it. Pushing is best effort: a batch that finds no
// group, or a full push window, is not pushed, and a subscriber reads
// it from the log (see Subscription).

// Push names the endpoint that pushes (a producer's) or receives pushes
// (a subscriber's), and its switch.
type Push struct {
	// Endpoint sends or receives the pushes; it may be the one the
	// topic's pool client uses.
	Endpoint *endpoint.Endpoint
	// Switch is the switch's address, as for endpoint.JoinJob.
	Switch string
	// Fabric carries the fabric's token.
	Fabric endpoint.FabricOptions
	// Refresh is how often a producer, while it produces, asks the
	// switch who subscribes; zero means DefaultPushRefresh.
	Refresh time.Duration
	// Idle is how long a subscriber hears nothing pushed for a
	// partition before it reads that partition's log for what it
	// missed; zero means DefaultPushIdle.
	Idle time.Duration
}

// Push's defaults and bounds.
const (
	DefaultPushRefresh = time.Second
	DefaultPushIdle    = 200 * time.Millisecond
	// MaxSubscribers bounds a topic's subscribers (its push service's
	// members, each owning one key range of its ownership table). The
	// wire allows up to ctrl.MaxSize-1 = 4095 (a push group is the
	// subscribers and the producer, at most ctrl.MaxSize ranks, and the
	// table at most ctrl.MaxRanges ranges); 1024 keeps a subscriber's
	// registration (its table of 1024 ranges) to a few datagrams.
	MaxSubscribers = 1024
	// pushInvites bounds the invitations a producer has in flight while
	// it forms a group.
	pushInvites = 64
	// MaxPushBatch is the largest batch pushed; a larger one is read
	// from the log.
	MaxPushBatch = 256 << 10
	// pushWindow bounds a producer's pushes in flight; pushQueue the
	// batches waiting for its pusher.
	pushWindow = 64
	pushQueue  = 256
	// pushJoinWait bounds the forming of one push group.
	pushJoinWait = 2 * time.Second
)

func (p Push) check() error {
	if p.Endpoint == nil || p.Switch == "" {
		return fmt.Errorf("%w: a push needs an endpoint and a switch", ErrBadRequest)
	}
	if p.Refresh < 0 || p.Idle < 0 {
		return fmt.Errorf("%w: negative push refresh %v or idle %v", ErrBadRequest, p.Refresh, p.Idle)
	}
	return nil
}

func (p Push) refresh() time.Duration {
	if p.Refresh <= 0 {
		return DefaultPushRefresh
	}
	return p.Refresh
}

func (p Push) idle() time.Duration {
	if p.Idle <= 0 {
		return DefaultPushIdle
	}
	return p.Idle
}

// pushService is the name of topic t's push service.
func pushService(t *Topic) string { return fmt.Sprintf("mq.push.%d", t.ref.Data) }

// pushRanges is the push service's ownership table: key k to member k.
var pushRanges = sync.OnceValue(func() []ctrl.KeyRange {
	rs := make([]ctrl.KeyRange, MaxSubscribers)
	for i := range rs {
		rs[i] = ctrl.KeyRange{Start: uint64(i), End: uint64(i) + 1, Owner: i}
	}
	return rs
})

// The push messages (little-endian), each ending in a tag: the first
// pushTagLen bytes of HMAC-SHA256 under the topic's data region key
// over the rest, so that only holders of the topic's capability push
// to its subscribers or invite them:
//
//	pushed batch: u16 pushMagic, u16 zero, u32 partition, the batch
//	              (its header and body, without the padding), tag
//	invitation:   u16 inviteMagic, u16 zero, u32 data region id,
//	              u16 job size, u16 rank, the job's name, tag
const (
	pushMagic   = 0x504d // "MP"
	inviteMagic = 0x494d // "MI"
	pushPrefix  = 8
	pushTagLen  = 16
)

// pushMAC is the tag of m under topic t's data region key.
func pushMAC(t *Topic, m []byte) []byte {
	var k [8]byte
	binary.LittleEndian.PutUint64(k[:], t.ref.DataKey)
	h := hmac.New(sha256.New, k[:])
	h.Write(m)
	return h.Sum(nil)[:pushTagLen]
}

// pushTag appends m's tag to m.
func pushTag(t *Topic, m []byte) []byte { return append(m, pushMAC(t, m)...) }

// pushUntag checks m's tag and returns m without it.
func pushUntag(t *Topic, m []byte) ([]byte, error) {
	if len(m) < pushTagLen {
		return nil, fmt.Errorf("%w: %d bytes", errBadPush, len(m))
	}
	body := m[:len(m)-pushTagLen]
	if !hmac.Equal(pushMAC(t, body), m[len(body):]) {
		return nil, fmt.Errorf("%w: the tag does not match the topic's key", errBadPush)
	}
	return body, nil
}

func appendInvite(t *Topic, job string, size, rank int) []byte {
	b := binary.LittleEndian.AppendUint16(nil, inviteMagic)
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = binary.LittleEndian.AppendUint32(b, t.ref.Data)
	b = binary.LittleEndian.AppendUint16(b, uint16(size))
	b = binary.LittleEndian.AppendUint16(b, uint16(rank))
	return pushTag(t, append(b, job...))
}

// errBadPush is wrapped by the error for a push message that does not
// parse or whose tag does not match.
var errBadPush = errors.New("mq: bad push message")

// parseInvite checks an invitation to topic t's push group.
func parseInvite(t *Topic, m []byte) (job string, size, rank int, err error) {
	b, err := pushUntag(t, m)
	if err != nil {
		return "", 0, 0, err
	}
	if len(b) < 12 || binary.LittleEndian.Uint16(b) != inviteMagic || len(b)-12 > ctrl.MaxName || binary.LittleEndian.Uint32(b[4:]) != t.ref.Data {
		return "", 0, 0, fmt.Errorf("%w: an invitation of %d bytes", errBadPush, len(m))
	}
	size, rank = int(binary.LittleEndian.Uint16(b[8:])), int(binary.LittleEndian.Uint16(b[10:]))
	if size < 2 || size > MaxSubscribers+1 || rank < 1 || rank >= size {
		return "", 0, 0, fmt.Errorf("%w: rank %d of a job of %d", errBadPush, rank, size)
	}
	return string(b[12:]), size, rank, nil
}

// pusher is a producer's push half: a goroutine that keeps its push
// group and multicasts the batches Produce hands it.
type pusher struct {
	t    *Topic
	cfg  Push
	id   uint64 // the producer's: names its groups
	q    chan pushItem
	stop chan struct{}
	done chan struct{}
	once sync.Once
	gen  uint64 // groups tried: names the next one
	// Counts.
	pushed, dropped, formed atomic.Uint64
}

// pushGroup is a formed push group: its subscribers' member ids and
// the multicasts in flight.
type pushGroup struct {
	g      *endpoint.Group
	subs   []uint16
	flight []*endpoint.Op
	broken bool // an operation failed: form it anew
}

func newPusher(t *Topic, cfg Push, id uint64) *pusher {
	ps := &pusher{t: t, cfg: cfg, id: id, q: make(chan pushItem, pushQueue), stop: make(chan struct{}), done: make(chan struct{})}
	go ps.run()
	return ps
}

// pushItem is a batch stored: its partition, header and body.
type pushItem struct {
	part int
	b    []byte
}

// offer hands the batch b (header and body, which the caller does not
// change from then on) of partition part to the pusher; a full queue
// drops it. The pusher sees a producer's batches in their order, and
// decides alone whether to push them.
func (ps *pusher) offer(part int, b []byte) {
	select {
	case ps.q <- pushItem{part, b}:
	default:
		ps.dropped.Add(1)
	}
}

func (ps *pusher) close() {
	ps.once.Do(func() { close(ps.stop) })
	<-ps.done
}

// run is the pusher's goroutine. It looks at the subscribers again when
// the producer produces a refresh after the last look (at once when its
// group broke), and not while nothing is produced.
func (ps *pusher) run() {
	defer close(ps.done)
	var g *pushGroup
	var last time.Time       // the last look at the subscribers
	var due <-chan time.Time // the next look, when the producer produced too early
	for {
		select {
		case <-ps.stop:
			// What was offered before the stop is pushed first, so that
			// a producer that stores a batch and closes pushes it, in
			// one order whatever the scheduler does.
			for {
				select {
				case it := <-ps.q:
					ps.send(g, it)
					continue
				default:
				}
				break
			}
			ps.leave(g)
			return
		case it := <-ps.q:
			ps.send(g, it)
			if wait := ps.cfg.refresh() - time.Since(last); wait > 0 && (g == nil || !g.broken) {
				if due == nil {
					due = time.After(wait)
				}
				continue
			}
		case <-due:
		}
		last, due = time.Now(), nil
		g = ps.reform(g)
	}
}

// send multicasts batch it to g's subscribers, unless there are none,
// it is larger than MaxPushBatch, or g's window is full.
func (ps *pusher) send(g *pushGroup, it pushItem) {
	if g == nil {
		return // no subscribers: nothing to push
	}
	if g.broken || len(it.b) > MaxPushBatch {
		ps.dropped.Add(1)
		return
	}
	for len(g.flight) > 0 && opDone(g.flight[0]) {
		if g.flight[0].Err != nil {
			g.broken = true
		}
		g.flight = g.flight[1:]
	}
	if len(g.flight) >= pushWindow || g.broken {
		ps.dropped.Add(1)
		return
	}
	m := make([]byte, pushPrefix, pushPrefix+len(it.b)+pushTagLen)
	binary.LittleEndian.PutUint16(m, pushMagic)
	binary.LittleEndian.PutUint32(m[4:], uint32(it.part))
	op, err := g.g.StartMulticast(pushTag(ps.t, append(m, it.b...)), endpoint.MulticastOptions{Continue: true, Eager: true})
	if err != nil {
		g.broken = true
		ps.dropped.Add(1)
		return
	}
	g.flight = append(g.flight, op)
	ps.pushed.Add(1)
}

func opDone(op *endpoint.Op) bool {
	select {
	case <-op.Done():
		return true
	default:
		return false
	}
}

// reform asks the switch who subscribes and, when that changed (or g
// broke), forms a group of them anew; nil when there are none or the
// forming failed (it is tried again at the next refresh).
func (ps *pusher) reform(g *pushGroup) *pushGroup {
	ctx, cancel := context.WithTimeout(context.Background(), pushJoinWait)
	defer cancel()
	ms, err := ps.cfg.Endpoint.ServiceMembers(ctx, ps.cfg.Switch, pushService(ps.t), ps.cfg.Fabric)
	var subs []uint16
	for _, m := range ms {
		if int(m.ID) < MaxSubscribers {
			subs = append(subs, m.ID)
		}
	}
	slices.Sort(subs)
	if err == nil && g != nil && !g.broken && slices.Equal(subs, g.subs) {
		return g
	}
	ps.leave(g)
	if err != nil || len(subs) == 0 {
		return nil
	}
	ps.gen++
	job := fmt.Sprintf("mq.push.%d.%x.%d", ps.t.ref.Data, ps.id, ps.gen)
	size := len(subs) + 1
	// The invitations go out in the subscribers' order, up to
	// pushInvites at once, from this goroutine (a simulated run replays).
	errs := make([]error, len(subs))
	ops := make([]*endpoint.Op, len(subs))
	wait := func(i int) {
		if ops[i] != nil {
			errs[i] = ps.cfg.Endpoint.Wait(ctx, ops[i])
		}
	}
	for i, id := range subs {
		if i >= pushInvites {
			wait(i - pushInvites)
		}
		req := appendInvite(ps.t, job, size, i+1)
		if ops[i], errs[i] = ps.cfg.Endpoint.StartAnycast(ctx, ps.cfg.Switch, pushService(ps.t), uint64(id), req, ps.cfg.Fabric, nil); errs[i] != nil {
			ops[i] = nil // not posted: nothing to wait for
		}
	}
	for i := max(0, len(subs)-pushInvites); i < len(subs); i++ {
		wait(i)
	}
	if errors.Join(errs...) != nil {
		return nil
	}
	jg, err := ps.cfg.Endpoint.JoinJob(ctx, ps.cfg.Switch, job, size, 0, ps.cfg.Fabric)
	if err != nil {
		return nil
	}
	ps.formed.Add(1)
	return &pushGroup{g: jg, subs: subs}
}

// leave leaves g, letting its pushes in flight end first (for at most a
// second).
func (ps *pusher) leave(g *pushGroup) {
	if g == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = g.g.Leave(ctx)
}
