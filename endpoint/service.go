package endpoint

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// Handler serves one anycast request: key is the request's affinity key,
// caller the scope of the process that sent it. It returns the reply, or
// an error (sent as StatusBusy... use a wire.Status to choose the code).
type Handler func(key uint64, caller Caller, req []byte) ([]byte, error)

// A Caller is the scope of an anycast request's sender as the switch
// relaying it certified it: the tag (secure.ScopeTag) of the scope of the
// sender's credential name, which the switch writes into every request it
// relays, over whatever the sender wrote, and which this endpoint takes
// only from the group's switch. Zero when the switch knows no identities
// (an insecure fabric) or the sender's role is not a member's or a
// client's: then the caller is nobody in particular.
type Caller uint64

// Is reports whether the caller is certified as of scope.
func (c Caller) Is(scope string) bool { return c != 0 && uint64(c) == secure.ScopeTag(scope) }

// Certified reports whether the switch certified a scope for the caller.
func (c Caller) Certified() bool { return c != 0 }

// Service is this endpoint's membership in an anycast service group.
type Service struct {
	ep      *Endpoint
	sw      netip.AddrPort
	id      uint32
	rank    uint16
	opts    FabricOptions
	handler Handler

	stop     chan struct{}
	stopOnce sync.Once
	hbDone   chan struct{}
	// confirmed: see Confirmed.
	confirmed atomic.Int64
}

// ServiceConfig describes a service group at its creation (by its first
// member to register).
type ServiceConfig struct {
	Name   string
	Size   int // members the service will have (their ids are 0..Size-1)
	Policy ctrl.Policy
	// Ranges is the ownership table for key affinity: keys in [Start, End)
	// go to Owner, or to its first live replica.
	Ranges []ctrl.KeyRange
}

// RegisterService makes this endpoint member rank (-1: any free id) of
// the service group, serving requests with h on a goroutine per request.
// At most Config.MaxIncoming requests are held at once (being received or
// handled): beyond that the core refuses new ones with StatusBusy, which
// their clients see, so at most MaxIncoming handlers run at once.
func (ep *Endpoint) RegisterService(ctx context.Context, sw string, sc ServiceConfig, rank int, h Handler, opts FabricOptions) (*Service, error) {
	ap, err := parseSwitch(sw)
	if err != nil {
		return nil, err
	}
	ep.enableGroups()
	req := &ctrl.Msg{Type: ctrl.Register, Service: sc.Name, Size: sc.Size, Rank: rank, Policy: uint8(sc.Policy)}
	for _, r := range sc.Ranges {
		cr := ctrl.Range{Start: r.Start, End: r.End, Owner: int32(r.Owner)}
		for _, x := range r.Replicas {
			cr.Replicas = append(cr.Replicas, int32(x))
		}
		req.Ranges = append(req.Ranges, cr)
	}
	sent := time.Now()
	resp, err := ep.control(ctx, ap, req, &opts)
	if err != nil {
		return nil, fmt.Errorf("endpoint: register %q: %w", sc.Name, err)
	}
	ep.mu.Lock()
	ep.core.SetMember(resp.Group, resp.Member)
	ep.core.SetGroupSwitch(resp.Group, ap)
	ep.mu.Unlock()
	s := &Service{ep: ep, sw: ap, id: resp.Group, rank: resp.Member, opts: opts, handler: h,
		stop: make(chan struct{}), hbDone: make(chan struct{})}
	s.confirmed.Store(sent.UnixNano())
	ep.mu.Lock()
	ep.services[s.id] = s
	ep.mu.Unlock()
	ep.addCloser(s.stopHeartbeats)
	go s.heartbeats(ep.ticker(opts.HeartbeatInterval()))
	return s, nil
}

// Rank is this member's id in the service group.
func (s *Service) Rank() int { return int(s.rank) }

// Confirmed is the send time of the latest request (the registration,
// then each heartbeat) the switch answered counting this membership
// alive. The switch counts a member dead only after hearing nothing from
// it for its heartbeat timeout, and a member it counted dead (or a
// switch that restarted) never answers this membership's heartbeats
// again: so until Confirmed plus the heartbeat timeout no other process
// can have taken this member's id, and a Confirmed that advances means
// none did. A process that must be the only one acting for its id (an
// owner of data) stops acting when Confirmed grows old.
func (s *Service) Confirmed() time.Time { return time.Unix(0, s.confirmed.Load()) }

func (s *Service) heartbeats(tick <-chan time.Time, stopTick func()) {
	g := &Group{ep: s.ep, sw: s.sw, id: s.id, rank: s.rank, opts: s.opts, stop: s.stop, hbDone: s.hbDone, service: true,
		confirmed: &s.confirmed}
	g.heartbeats(tick, stopTick)
}

func (s *Service) stopHeartbeats() {
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.hbDone
}

// Close stops serving: heartbeats stop, so the switch fails the service
// over to other members after its heartbeat timeout.
//
// A switch that restarted may have given this service's group id to
// another service this endpoint registered since: Close then leaves that
// one alone.
func (s *Service) Close() {
	s.stopHeartbeats()
	s.ep.mu.Lock()
	if s.ep.services[s.id] == s {
		delete(s.ep.services, s.id)
		s.ep.core.LeaveGroup(s.id)
	}
	s.ep.mu.Unlock()
}

// dispatchLocked hands completed anycast requests to their handlers.
// Caller holds mu.
func (ep *Endpoint) dispatchLocked() {
	for _, r := range ep.core.Requests() {
		s := ep.services[r.Group]
		if s == nil {
			_ = ep.core.Reply(r, nil, wire.StatusNotMember)
			continue
		}
		ep.handlers.Add(1)
		go func(r *Request) {
			defer ep.handlers.Done()
			data, err := s.handler(r.Key, r.Caller, r.Data)
			st := wire.StatusOK
			if err != nil {
				if !errors.As(err, &st) {
					st = wire.StatusBusy
				}
				data = nil
			}
			ep.mu.Lock()
			defer ep.mu.Unlock()
			if ep.closed {
				return
			}
			ep.replyLocked(r, data, st)
		}(r)
	}
}

// Anycast sends req to one member of service group (as chosen by the
// switch's policy; key selects the owner under key affinity) and returns
// the reply.
func (ep *Endpoint) Anycast(ctx context.Context, sw string, service string, key uint64, req []byte, opts FabricOptions) ([]byte, error) {
	op, err := ep.anycastOp(ctx, sw, service, key, req, opts)
	if err != nil {
		return nil, err
	}
	if err := ep.Do(ctx, op); err != nil {
		return nil, err
	}
	return op.Resp, nil
}

// StartAnycast is Anycast's asynchronous form: the reply is in op.Resp
// once op.Done() is closed (the service name is resolved first, within
// ctx, and cached).
func (ep *Endpoint) StartAnycast(ctx context.Context, sw string, service string, key uint64, req []byte, opts FabricOptions, notify chan<- *Op) (*Op, error) {
	op, err := ep.anycastOp(ctx, sw, service, key, req, opts)
	if err != nil {
		return nil, err
	}
	return op, ep.Start(op, notify)
}

func (ep *Endpoint) anycastOp(ctx context.Context, sw string, service string, key uint64, req []byte, opts FabricOptions) (*Op, error) {
	ap, err := parseSwitch(sw)
	if err != nil {
		return nil, err
	}
	ep.enableGroups()
	id, err := ep.lookup(ctx, ap, service, opts)
	if err != nil {
		return nil, err
	}
	return &Op{Kind: KindAnycast, Peer: ap, Group: id, Addr: key, Buf: req}, nil
}

// ResolveService resolves service to its group id at switch sw, asking
// the switch only if the endpoint has not cached it yet, as Anycast
// does before its first request to the service. A caller that orders
// its goroutines with Gates calls it (and passes its gate) before
// Anycast, so that the lookup is a wait of its own.
func (ep *Endpoint) ResolveService(ctx context.Context, sw string, service string, opts FabricOptions) (uint32, error) {
	ap, err := parseSwitch(sw)
	if err != nil {
		return 0, err
	}
	ep.enableGroups()
	return ep.lookup(ctx, ap, service, opts)
}

// lookup resolves a service name to its group id (cached).
func (ep *Endpoint) lookup(ctx context.Context, sw netip.AddrPort, service string, opts FabricOptions) (uint32, error) {
	ep.mu.Lock()
	id, ok := ep.svcIDs[service]
	ep.mu.Unlock()
	if ok {
		return id, nil
	}
	resp, err := ep.control(ctx, sw, &ctrl.Msg{Type: ctrl.Lookup, Service: service}, &opts)
	if err != nil {
		return 0, fmt.Errorf("endpoint: lookup %q: %w", service, err)
	}
	ep.mu.Lock()
	ep.svcIDs[service] = resp.Group
	ep.mu.Unlock()
	return resp.Group, nil
}

// ServiceMembers asks the switch for service group service's live
// members (id and address), fresh each call: the switch's soft state of
// who serves it.
func (ep *Endpoint) ServiceMembers(ctx context.Context, sw string, service string, opts FabricOptions) ([]ctrl.MemberInfo, error) {
	ap, err := parseSwitch(sw)
	if err != nil {
		return nil, err
	}
	ep.enableGroups()
	resp, err := ep.control(ctx, ap, &ctrl.Msg{Type: ctrl.Lookup, Service: service}, &opts)
	if err != nil {
		return nil, fmt.Errorf("endpoint: lookup %q: %w", service, err)
	}
	ep.mu.Lock()
	ep.svcIDs[service] = resp.Group
	ep.mu.Unlock()
	return resp.Members, nil
}
