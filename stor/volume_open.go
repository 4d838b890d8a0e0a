package stor

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// OpenOptions configure Open.
type OpenOptions struct {
	// Write takes the volume's write lease: one writer at a time; a second
	// gets ErrLeaseHeld.
	Write bool
	// Lease is the lease's lifetime, renewed every third of it while the
	// volume is open. Zero means 10 s. A writer that dies loses the lease
	// this long after its last renewal.
	Lease time.Duration
	// Controller, when set, sends every read, write and flush to the
	// gateway of that service name (see Gateway) instead of straight to
	// the replicas: the controller-forwarding design, for comparison.
	Controller string
	// Logger receives what happens to an open volume that its user does
	// not see in the result of a call: a replica dropped from the write
	// groups or taken back, the groups formed again after a switch
	// restart, a lease lost. Nil: none.
	Logger *slog.Logger
}

// DefaultLease is a write lease's lifetime unless asked otherwise.
const DefaultLease = 10 * time.Second

// Volume is an open volume: io.ReaderAt, io.WriterAt and Flush. A write
// is one multicast to its extent's replica group and completes when every
// live replica has it; Flush returns when every live replica has made
// every completed write durable. A read goes to one replica of its
// extent, chosen by the switch (least outstanding requests).
type Volume struct {
	c     *Client
	d     Descriptor
	write bool
	ttl   time.Duration
	ctrl  string // the gateway's service, in controller-forwarding mode
	log   *slog.Logger

	holder uint64
	epoch  uint64

	// form serializes the forming of the groups and of the data
	// generation (a channel: who waits for it waits durably), held across
	// the network calls that takes; mu guards groups and missing, held
	// only to read or swap them, never across a network wait.
	form     chan struct{}
	flushing chan struct{} // held by the flush in progress
	io       gate          // writes and flushes in flight; closed while the groups change
	mu       sync.Mutex
	groups   map[string]*wgroup
	jobSeq   uint64 // write groups formed, for their job names
	// gen is the data generation this writer writes in (0 before the
	// first), genMembers its nodes, cur those of them that held a current
	// copy when it started.
	gen        uint64
	genMembers []uint16
	cur        map[uint16]bool
	curGen     uint64 // the generation genMembers and cur were recorded in
	ctr        uint64 // last version counter used (under verMu)
	verMu      sync.Mutex
	lastVer    []uint64 // per extent: the version of the last write completed (under verMu)
	missing    map[uint16]bool
	reform     bool  // the groups must be formed again (under form)
	lost       error // the lease was lost

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// Open opens volume name; with Write it takes the write lease.
func (c *Client) Open(ctx context.Context, name string, o OpenOptions) (*Volume, error) {
	vi, err := c.find(ctx, name)
	if err != nil {
		return nil, err
	}
	if vi.Unavailable {
		return nil, fmt.Errorf("%w: every node of volume %s (%v) is down", ErrNoReplica, name, vi.Nodes)
	}
	d := vi.Descriptor
	if o.Lease <= 0 {
		o.Lease = DefaultLease
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	v := &Volume{c: c, d: d, write: o.Write, ttl: o.Lease, ctrl: o.Controller, log: o.Logger, groups: map[string]*wgroup{}, missing: map[uint16]bool{},
		lastVer: make([]uint64, d.Extents()), stop: make(chan struct{}), done: make(chan struct{}), form: make(chan struct{}, 1), flushing: make(chan struct{}, 1)}
	if !o.Write {
		close(v.done)
		return v, nil
	}
	for v.holder == 0 {
		v.holder = c.draws.uint64()
	}
	if err := v.acquire(ctx); err != nil {
		return nil, err
	}
	if v.ctrl != "" {
		go v.renew(c.ep.NewGate())
		return v, nil
	}
	v.lockForm()
	err = v.formLocked(ctx)
	v.unlockForm()
	if err != nil {
		v.release()
		return nil, err
	}
	go v.renew(c.ep.NewGate())
	return v, nil
}

// Size is the volume's size in bytes.
func (v *Volume) Size() int64 { return int64(v.d.Size) }

// Descriptor is the volume's shape and placement.
func (v *Volume) Descriptor() Descriptor { return v.d }

// Degraded lists the volume's nodes this writer found down and writes
// without.
func (v *Volume) Degraded() []uint16 {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []uint16
	for id := range v.missing {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// Close flushes a writable volume, leaves its groups and gives the lease
// back.
func (v *Volume) Close() error {
	var err error
	v.once.Do(func() {
		if !v.write {
			return
		}
		err = v.Flush()
		close(v.stop)
		<-v.done
		v.lockForm()
		v.mu.Lock()
		gs := v.groups
		v.groups = map[string]*wgroup{}
		v.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		for _, g := range gs {
			_ = g.g.Leave(ctx)
		}
		cancel()
		v.unlockForm()
		v.release()
	})
	return err
}
