package endpoint

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire/ctrl"
)

// Pool control: clients create, open, free and list pool regions (memory
// nodes lend memory to the forwarding node's MMU through memnode/node). (Reads and writes at
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
