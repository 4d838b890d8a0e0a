package stor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
)

// GatewayConfig configures a Gateway.
type GatewayConfig struct {
	// Switch is the forwarding node; Fabric its options.
	Switch string
	Fabric endpoint.FabricOptions
	// Service names the storage service (DefaultService when empty).
	Service string
	// Name is the gateway's own service (Service+".gw" when empty).
	Name string
	// MaxInflight bounds the bytes of reads and writes the gateway has
	// forwarded to storage nodes and not yet seen answered, as a storage
	// target bounds its queue to its disks: beyond it a request waits at
	// the gateway instead of overrunning the switch's relay queues. Zero
	// means 8 MiB.
	MaxInflight int
	// Logger receives the gateway's logs (none when nil).
	Logger *slog.Logger
}

// Gateway is the controller of the controller-forwarding mode, the
// design that multicast writes and anycast reads improve on: a storage
// target on its own host that every I/O goes to. It forwards a read to
// one replica of its extent and relays the answer, and a write to every
// replica, one copy each, answering when all have it.
type Gateway struct {
	ep  *endpoint.Endpoint
	cfg GatewayConfig
	c   *Client
	log *slog.Logger
	svc *endpoint.Service // under mu

	stop, done chan struct{}

	inflight *semaphore.Weighted

	mu     sync.Mutex
	descs  map[string]Descriptor
	live   []uint16
	liveAt time.Time
	stats  GatewayStats
}

// GatewayStats are a gateway's counters.
type GatewayStats struct {
	Reads, Writes, Flushes uint64
	Copies                 uint64 // write copies sent to replicas
	Failed                 uint64 // requests answered with a code other than OK
}

// NewGateway returns a gateway using ep (which it does not close).
func NewGateway(ep *endpoint.Endpoint, cfg GatewayConfig) *Gateway {
	if cfg.Service == "" {
		cfg.Service = DefaultService
	}
	if cfg.Name == "" {
		cfg.Name = GatewayName(cfg.Service)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxInflight <= 0 {
		cfg.MaxInflight = 8 << 20
	}
	return &Gateway{ep: ep, cfg: cfg, log: cfg.Logger, descs: map[string]Descriptor{},
		c:        NewClient(ep, cfg.Switch, ClientOptions{Fabric: cfg.Fabric, Service: cfg.Service}),
		inflight: semaphore.NewWeighted(int64(max(cfg.MaxInflight, MaxIO)))}
}

// GatewayName is the default service name of the gateway of storage
// service service.
func GatewayName(service string) string { return service + ".gw" }

// Start registers the gateway with the switch, and keeps it registered:
// every second it checks that the switch lists it (a restarted switch, or
// one that counted it dead, does not) and registers again if not.
func (g *Gateway) Start(ctx context.Context) error {
	if err := g.register(ctx); err != nil {
		return err
	}
	g.stop = make(chan struct{})
	g.done = make(chan struct{})
	go g.supervise()
	return nil
}

func (g *Gateway) register(ctx context.Context) error {
	g.mu.Lock()
	old := g.svc
	g.svc = nil
	g.mu.Unlock()
	if old != nil {
		old.Close()
	}
	s, err := g.ep.RegisterService(ctx, g.cfg.Switch, endpoint.ServiceConfig{Name: g.cfg.Name, Size: 1, Policy: fabric.PolicyLeastOutstanding}, 0, g.handle, g.cfg.Fabric)
	if err != nil {
		return fmt.Errorf("stor: gateway: %w", err)
	}
	g.mu.Lock()
	g.svc = s
	g.mu.Unlock()
	return nil
}

func (g *Gateway) supervise() {
	defer close(g.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		ms, err := g.ep.ServiceMembers(ctx, g.cfg.Switch, g.cfg.Name, g.cfg.Fabric)
		if err != nil || len(ms) == 0 {
			g.log.Info("stor: gateway registering again", "err", err)
			if err := g.register(ctx); err != nil {
				g.log.Warn("stor: gateway register", "err", err)
			}
		}
		cancel()
	}
}

// Close stops serving.
func (g *Gateway) Close() {
	if g.stop != nil {
		close(g.stop)
		<-g.done
		g.stop = nil
	}
	g.mu.Lock()
	s := g.svc
	g.svc = nil
	g.mu.Unlock()
	if s != nil {
		s.Close()
	}
}

// Stats returns the gateway's counters.
func (g *Gateway) Stats() GatewayStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stats
}

// desc returns volume name's descriptor (cached).
func (g *Gateway) desc(ctx context.Context, name string) (Descriptor, error) {
	g.mu.Lock()
	d, ok := g.descs[name]
	g.mu.Unlock()
	if ok {
		return d, nil
	}
	vi, err := g.c.find(ctx, name)
	if err != nil {
		return Descriptor{}, err
	}
	d = vi.Descriptor
	g.mu.Lock()
	if len(g.descs) >= MaxGatewayVolumes {
		clear(g.descs)
	}
	g.descs[name] = d
	g.mu.Unlock()
	return d, nil
}

// MaxGatewayVolumes bounds the descriptors a gateway caches; a full cache
// is emptied (they are fetched again from the nodes).
const MaxGatewayVolumes = 4096

// liveNodes returns the nodes the switch lists, refreshed at most every
// liveEvery (or at once with fresh).
func (g *Gateway) liveNodes(ctx context.Context, fresh bool) ([]uint16, error) {
	g.mu.Lock()
	if !fresh && time.Since(g.liveAt) < liveEvery {
		l := g.live
		g.mu.Unlock()
		return l, nil
	}
	g.mu.Unlock()
	l, err := g.c.live(ctx)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.live, g.liveAt = l, time.Now()
	g.mu.Unlock()
	return l, nil
}

// liveEvery is how long a gateway trusts its list of live nodes.
const liveEvery = 500 * time.Millisecond

func (g *Gateway) handle(_ uint64, req []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp := g.serve(ctx, req)
	g.mu.Lock()
	if len(resp) == 0 || resp[0] != byte(CodeOK) {
		g.stats.Failed++
	}
	g.mu.Unlock()
	return resp, nil
}

func (g *Gateway) serve(ctx context.Context, req []byte) []byte {
	if len(req) == 0 {
		return refusal(CodeBadRequest, "empty request")
	}
	switch req[0] {
	case opRead:
		r, ok := parseRead(req)
		if !ok {
			return refusal(CodeBadRequest, "read: malformed")
		}
		d, err := g.desc(ctx, r.Name)
		if err != nil {
			return refusal(codeOf(err), err.Error())
		}
		if r.Off >= d.Size {
			return refusal(CodeOutOfRange, "read past the end")
		}
		g.mu.Lock()
		g.stats.Reads++
		g.mu.Unlock()
		if err := g.inflight.Acquire(ctx, int64(r.Len)); err != nil {
			return refusal(CodeNotReady, "gateway queue: "+err.Error())
		}
		resp, err := readExtent(ctx, g.c, d, int(r.Off/d.Extent), req)
		g.inflight.Release(int64(r.Len))
		if err != nil {
			return refusal(codeOf(err), err.Error())
		}
		return resp
	case opGwWrite, opGwFlush:
		r, ok := parseOne(req)
		if !ok {
			return refusal(CodeBadRequest, "malformed")
		}
		d, err := g.desc(ctx, r.Name)
		if err != nil {
			return refusal(codeOf(err), err.Error())
		}
		var to []uint16
		op := uint8(opFlushOne)
		if req[0] == opGwWrite {
			if r.Off >= d.Size {
				return refusal(CodeOutOfRange, "write past the end")
			}
			to, op = d.Replica(int(r.Off/d.Extent)), opWriteOne
		} else {
			to = d.Nodes
		}
		n := int64(len(r.Data) * len(to))
		if err := g.inflight.Acquire(ctx, min(n, int64(g.cfg.MaxInflight))); err != nil {
			return refusal(CodeNotReady, "gateway queue: "+err.Error())
		}
		err = g.forward(ctx, to, r.append(nil, op))
		g.inflight.Release(min(n, int64(g.cfg.MaxInflight)))
		if err != nil {
			return refusal(codeOf(err), err.Error())
		}
		g.mu.Lock()
		if op == opWriteOne {
			g.stats.Writes++
		} else {
			g.stats.Flushes++
		}
		g.mu.Unlock()
		return []byte{byte(CodeOK)}
	}
	return refusal(CodeBadRequest, fmt.Sprintf("unknown request %d", req[0]))
}

// forward sends req to every live node of to, a copy each, and waits for
// all: a node the switch no longer lists is skipped (degraded); none
// left is ErrNoReplica.
func (g *Gateway) forward(ctx context.Context, to []uint16, req []byte) error {
	live, err := g.liveNodes(ctx, false)
	if err != nil {
		return err
	}
	to = slices.DeleteFunc(slices.Clone(to), func(id uint16) bool { return !slices.Contains(live, id) })
	if len(to) == 0 {
		return ErrNoReplica
	}
	errs := make([]error, len(to))
	forEach(len(to), func(i int) { _, errs[i] = g.c.call(ctx, to[i], "write", req) })
	g.mu.Lock()
	g.stats.Copies += uint64(len(to))
	g.mu.Unlock()
	var first error
	for _, err := range errs {
		var ne *NodeError
		if errors.As(err, &ne) {
			return err // the node refused it: the writer must know
		}
		first = cmpErr(first, err)
	}
	if first == nil {
		return nil
	}
	// A node did not answer: if the switch no longer lists it, the write
	// went to the others (degraded).
	live, err = g.liveNodes(ctx, true)
	if err != nil {
		return first
	}
	ok := 0
	for i, err := range errs {
		if err == nil {
			ok++
		} else if slices.Contains(live, to[i]) {
			return err
		}
	}
	if ok == 0 {
		return ErrNoReplica
	}
	return nil
}
