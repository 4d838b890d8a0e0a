package endpoint

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/ndma/ndma/internal/ctrlclient"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire/ctrl"
)

// Pool control: memory nodes lend memory to the forwarding node's MMU, and
// clients create, open, free and list pool regions. (Reads and writes at
// pool addresses are the pool client's, built on the forwarding path.)

// parseSwitch parses a forwarding node's address ("host:port").
func parseSwitch(sw string) (netip.AddrPort, error) {
	ap, err := ResolveAddr(sw)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("endpoint: switch address: %w", err)
	}
	return ap, nil
}

// ResolveAddr returns the UDP address "host:port" names: an IP literal
// as it is, a host name looked up (its first address; an IPv4 address as
// such, not mapped into IPv6). A missing host or port, or a name that
// does not resolve, is an error naming the address.
func ResolveAddr(s string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap, nil
	}
	host, _, err := net.SplitHostPort(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%q: want host:port: %w", s, err)
	}
	if host == "" {
		return netip.AddrPort{}, fmt.Errorf("%q: no host: want host:port", s)
	}
	ua, err := net.ResolveUDPAddr("udp", s)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%q: %w", s, err)
	}
	ap := ua.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}

// PoolCreate asks the switch sw for a pool region shaped like spec
// (Columns 0: over every live memory node). It returns the region as
// created (Region, Columns set) and its key, the capability every access
// and Free needs.
func (ep *Endpoint) PoolCreate(ctx context.Context, sw string, spec ctrl.PoolSpec, opts FabricOptions) (ctrl.PoolSpec, uint64, error) {
	ap, err := parseSwitch(sw)
	if err != nil {
		return ctrl.PoolSpec{}, 0, err
	}
	resp, err := ep.controlPool(ctx, ap, &ctrl.Msg{Type: ctrl.PoolCreate, Pool: spec}, &opts)
	if err != nil {
		return ctrl.PoolSpec{}, 0, fmt.Errorf("endpoint: pool create: %w", err)
	}
	p := resp.Pool
	p.Region = resp.Region
	ep.setPoolProof(ap, p.Region, resp.Key, opts.Token)
	return p, resp.Key, nil
}

// PoolOpen returns region's shape if key opens it.
func (ep *Endpoint) PoolOpen(ctx context.Context, sw string, region uint32, key uint64, opts FabricOptions) (ctrl.PoolSpec, error) {
	ap, err := parseSwitch(sw)
	if err != nil {
		return ctrl.PoolSpec{}, err
	}
	resp, err := ep.controlPool(ctx, ap, &ctrl.Msg{Type: ctrl.PoolOpen, Region: region, Key: key}, &opts)
	if err != nil {
		return ctrl.PoolSpec{}, fmt.Errorf("endpoint: pool open %d: %w", region, err)
	}
	p := resp.Pool
	p.Region = region
	ep.setPoolProof(ap, region, key, opts.Token)
	return p, nil
}

// PoolFree frees region (key must open it).
func (ep *Endpoint) PoolFree(ctx context.Context, sw string, region uint32, key uint64, opts FabricOptions) error {
	ap, err := parseSwitch(sw)
	if err != nil {
		return err
	}
	if _, err := ep.controlPool(ctx, ap, &ctrl.Msg{Type: ctrl.PoolFree, Region: region, Key: key}, &opts); err != nil {
		return fmt.Errorf("endpoint: pool free %d: %w", region, err)
	}
	return nil
}

// PoolState is the pool as the switch reports it (POOLSTAT).
type PoolState struct {
	Nodes   []ctrl.PoolNodeInfo // memory nodes, with their use and the requests forwarded to them
	Regions []ctrl.PoolSpec     // regions, without keys
	Refused uint64              // pool requests the switch refused since it started
}

// PoolStat returns the pool's memory nodes and regions (without keys) and
// the switch's pool request counters.
func (ep *Endpoint) PoolStat(ctx context.Context, sw string, opts FabricOptions) (PoolState, error) {
	ap, err := parseSwitch(sw)
	if err != nil {
		return PoolState{}, err
	}
	resp, err := ep.control(ctx, ap, &ctrl.Msg{Type: ctrl.PoolStat}, &opts)
	if err != nil {
		return PoolState{}, fmt.Errorf("endpoint: pool stat: %w", err)
	}
	return PoolState{Nodes: resp.PoolNodes, Regions: resp.PoolRegions, Refused: resp.PoolRefused}, nil
}

// PoolLeave tells the switch that this endpoint, a memory node lending
// region key, stops lending (it shuts down): the switch counts it dead
// at once instead of after its heartbeat timeout, and forgets it if it
// holds no region copies. Cancel the PoolLend context first, or its
// heartbeat registers the node again.
func (ep *Endpoint) PoolLeave(ctx context.Context, sw string, key uint64, opts FabricOptions) error {
	ap, err := parseSwitch(sw)
	if err != nil {
		return err
	}
	if err := ctrlclient.Leave(ctx, (*lender)(ep), ap, key, ep.incarnation, opts); err != nil {
		return fmt.Errorf("endpoint: %w", err)
	}
	return nil
}

// PoolLend offers capacity bytes of this endpoint's memory region key to
// the switch's pool, as a memory node, and keeps offering it (the offer is
// the node's heartbeat) every opts' heartbeat interval until ctx ends or
// the endpoint closes. It returns the node id once the first offer is
// accepted, or its error (the first offer waits at most four intervals).
// Whenever the switch answers as an incarnation the node has not reported
// to (it started, or restarted), the node reports the grants it holds
// (ctrl.PoolReport), so that the switch rebuilds its map of the pool.
func (ep *Endpoint) PoolLend(ctx context.Context, sw string, key, capacity uint64, opts FabricOptions) (uint16, error) {
	ap, err := parseSwitch(sw)
	if err != nil {
		return 0, err
	}
	node, err := ctrlclient.Lend(ctx, (*lender)(ep), ep.log, ap, key, capacity, ep.incarnation, opts)
	if err != nil {
		return 0, fmt.Errorf("endpoint: %w", err)
	}
	return node, nil
}

// lender is the Endpoint as a memory node that lends (ctrlclient.Lender).
type lender Endpoint

func (l *lender) Control(ctx context.Context, sw netip.AddrPort, req *ctrl.Msg, opts *FabricOptions) (*ctrl.Msg, error) {
	return (*Endpoint)(l).control(ctx, sw, req, opts)
}

func (l *lender) Send(ctx context.Context, sw netip.AddrPort, msg []byte) error {
	return (*Endpoint)(l).Do(ctx, &Op{Kind: KindControl, Peer: sw, Buf: msg})
}

func (l *lender) Reports(switchInc uint64) ([][]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.core.PoolReports(switchInc)
}

func (l *lender) Reported(switchInc uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.core.PoolReported(switchInc)
}

func (l *lender) Closed(err error) bool { return errors.Is(err, ErrClosed) }

// setPoolProof gives the core a PoolOpen of region to send the switch
// again when it stops forwarding this endpoint's pool requests
// (Core.SetPoolProof).
func (ep *Endpoint) setPoolProof(sw netip.AddrPort, region uint32, key uint64, token []byte) {
	msg, err := secure.AppendCtrl(nil, &ctrl.Msg{Type: ctrl.PoolOpen, Region: region, Key: key}, token)
	if err != nil {
		return
	}
	ep.mu.Lock()
	ep.core.SetPoolProof(sw, msg)
	ep.mu.Unlock()
}
