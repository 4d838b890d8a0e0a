package stor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// handle serves one anycast request. A request meant for one node carries
// its id+1 as the key: a switch that restarted may have given the
// service's group id to another service, and a client that still has the
// old one reaches the wrong node, which says so.
func (n *Node) handle(key uint64, who endpoint.Caller, req []byte) ([]byte, error) {
	n.reqs.Add(1)
	defer n.reqs.Done()
	if len(req) == 0 {
		return n.refuse(CodeBadRequest, "empty request"), nil
	}
	if key != 0 && key != uint64(n.st.id)+1 {
		return n.refuse(CodeWrongNode, fmt.Sprintf("this is node %d, not %d", n.st.id, key-1)), nil
	}
	var resp []byte
	switch req[0] {
	case opInfo:
		resp = n.info()
	case opCreate:
		resp = n.create(who, req[1:])
	case opRemove:
		resp = n.remove(who, req[1:])
	case opList:
		resp = n.listVols(who)
	case opStat:
		resp = n.stat(who, req[1:])
	case opLease:
		resp = n.lease(who, req[1:])
	case opJoin:
		resp = n.join(who, req[1:])
	case opRead:
		resp = n.read(who, req)
	case opVersions:
		resp = n.versions(who, req[1:])
	case opMissing:
		resp = n.missing(who, req[1:])
	case opWriteOne, opFlushOne:
		resp = n.one(who, req)
	case opGen:
		resp = n.setGen(who, req[1:])
	case opForce:
		resp = n.force(who, req[1:])
	case opEnroll:
		resp = n.enroll(who, req[1:])
	case opCatalog:
		resp = n.catalogAdd(who, req[1:])
	case opCatList:
		n.st.mu.Lock()
		resp = okJSON(slices.DeleteFunc(n.st.cat.list(), func(e CatalogEntry) bool { return !n.may(who, e.Desc.Owner) }))
		n.st.mu.Unlock()
	default:
		resp = n.refuse(CodeBadRequest, fmt.Sprintf("unknown request %d", req[0]))
	}
	return resp, nil
}

func (n *Node) refuse(c Code, msg string) []byte {
	n.mu.Lock()
	n.stats.Refused++
	n.mu.Unlock()
	return refusal(c, msg)
}

func (n *Node) refuseErr(err error) []byte { return n.refuse(codeOf(err), err.Error()) }

// leasedVolume returns volume name locked (v.mu) if holder holds its
// write lease, or nil and the refusal.
func (n *Node) leasedVolume(who endpoint.Caller, name string, holder uint64) (*vol, []byte) {
	v, refused := n.volume(who, name)
	if v == nil {
		return nil, refused
	}
	v.mu.Lock()
	if !v.leasedTo(holder) {
		v.mu.Unlock()
		return nil, n.refuse(CodeLeaseHeld, "the requester does not hold the volume's write lease")
	}
	return v, nil
}

// volume returns volume name, or nil and the refusal: NO_VOLUME, or
// DENIED when who may not act on it (may).
func (n *Node) volume(who endpoint.Caller, name string) (*vol, []byte) {
	v := n.st.get(name)
	if v == nil {
		return nil, n.refuse(CodeNoVolume, name)
	}
	v.mu.Lock()
	owner := v.meta.Desc.Owner
	v.mu.Unlock()
	if !n.may(who, owner) {
		return nil, n.deny(name, owner)
	}
	return v, nil
}

// may reports whether a request from who may act on a volume of owner:
// on a node without identities every request may; on a sealed one, those
// the switch certified as of the storage service's own scope (the other
// storage nodes, a gateway, an operator's credential of that scope) or
// of the volume's owner. A volume without an owner (made on a fabric
// without identities) is the service's alone.
func (n *Node) may(who endpoint.Caller, owner string) bool {
	if n.ep.Identity() == nil {
		return true
	}
	svc, _ := secure.NameScopes(n.cfg.Service)
	return who.Is(svc) || owner != "" && who.Is(owner)
}

func (n *Node) deny(name, owner string) []byte {
	n.mu.Lock()
	n.stats.Denied++
	n.mu.Unlock()
	if owner == "" {
		owner = "the storage service"
	}
	return n.refuse(CodeDenied, fmt.Sprintf("volume %s belongs to %s, not to the requester's scope", name, owner))
}

func okJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return append([]byte{byte(CodeOK)}, b...)
}

// nodeCallTimeout bounds one try of a request to one node, and
// nodeCopyTimeout one read (up to MaxIO bytes).
const (
	nodeCallTimeout = 3 * time.Second
	nodeCopyTimeout = 10 * time.Second
)

// call sends req to node id's own service and returns the reply's body,
// or the node's refusal as a *NodeError.
func (n *Node) call(ctx context.Context, id uint16, what string, req []byte) ([]byte, error) {
	return callNode(ctx, n.ep, n.draws, n.cfg.Switch, n.cfg.Service, n.cfg.Fabric, id, what, req)
}

func callNode(ctx context.Context, ep *endpoint.Endpoint, r *draws, sw, service string, opts endpoint.FabricOptions, id uint16, what string, req []byte) ([]byte, error) {
	name := nodeName(service, id)
	// One node that does not answer (or a switch that keeps answering
	// BUSY) holds its caller up for at most this long a try.
	limit := nodeCallTimeout
	if req[0] == opRead {
		limit = nodeCopyTimeout
	}
	for try := 0; ; try++ {
		actx, cancel := context.WithTimeout(ctx, limit)
		// The node's service is looked up (if not cached) as a wait of
		// its own, followed by the goroutine's gate: inside Anycast it
		// would not be, and goroutines of a fan-out woken by their
		// lookups' answers at one instant would send in the
		// scheduler's order.
		_, _ = ep.ResolveService(actx, sw, name, opts) // (Anycast reports a failure)
		passGate(ctx)
		resp, err := retryBusy(actx, r, false, func() ([]byte, error) { return ep.Anycast(actx, sw, name, uint64(id)+1, req, opts) })
		cancel()
		var body []byte
		if err == nil {
			body, err = replyBody(int(id), what, resp)
		} else {
			err = fmt.Errorf("stor: node %d: %s: %w", id, what, err)
		}
		if try == 0 && ctx.Err() == nil && (staleService(err) || silentService(err)) {
			// The switch restarted: the cached group id may name no
			// service (its requests go unanswered), or another node's.
			// Look the service up again.
			_, lerr := ep.ServiceMembers(ctx, sw, name, opts)
			passGate(ctx)
			if lerr == nil {
				continue
			}
		}
		return body, err
	}
}

// silentService reports whether err says that nobody answered a request
// to a service: after a switch restart, a cached group id may name a
// group that is no service any more, whose requests go unanswered.
func silentService(err error) bool {
	return errors.Is(err, endpoint.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, transport.ErrPeerDead)
}

// staleService reports whether err says that a cached service group id no
// longer names the service (the switch restarted and forgot it, or gave
// its id to another).
func staleService(err error) bool {
	return errors.Is(err, wire.StatusNotMember) || errors.Is(err, ErrWrongNode)
}

// replyBody splits a reply into its code and body.
func replyBody(node int, what string, resp []byte) ([]byte, error) {
	if len(resp) == 0 {
		return nil, &NodeError{Node: node, Op: what, Code: CodeBadRequest, Msg: "empty reply"}
	}
	if c := Code(resp[0]); c != CodeOK {
		msg := string(resp[1:])
		if c == CodeLeaseHeld && len(msg) > 0 && msg[0] == '{' {
			msg = "" // a lease answer: the caller decodes it
		}
		return resp[1:], &NodeError{Node: node, Op: what, Code: c, Msg: msg}
	}
	return resp[1:], nil
}
