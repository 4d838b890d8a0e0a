package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// resolveUDPAddr looks up a UDP address; tests replace it.
var resolveUDPAddr = net.ResolveUDPAddr

// resolveUDP turns a UDP address given in flag ("host:port", the host a
// name or an IP literal) into the numeric "ip:port" the libraries parse.
// A listening address may leave the host out (":7471", every interface);
// a peer's may not. A name that does not resolve is an error naming it.
func resolveUDP(flag, addr string, listen bool) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("%s %q: want host:port: %w", flag, addr, err)
	}
	if host == "" {
		if listen {
			return addr, nil
		}
		return "", fmt.Errorf("%s %q: no host: want host:port, e.g. 127.0.0.1:%s or localhost:%s", flag, addr, port, port)
	}
	ua, err := resolveUDPAddr("udp", addr)
	if err != nil {
		if _, ok := errors.AsType[*net.DNSError](err); ok {
			return "", fmt.Errorf("%s %q: host %q does not resolve: %w", flag, addr, host, err)
		}
		return "", fmt.Errorf("%s %q: %w", flag, addr, err)
	}
	ap := ua.AddrPort() // an IPv4 address comes back 4-in-6
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String(), nil
}

// resolvePeer resolves a peer's UDP address given in flag; see resolveUDP.
func resolvePeer(flag, addr string) (string, error) { return resolveUDP(flag, addr, false) }

// resolveListen resolves a UDP address to listen on given in flag; see
// resolveUDP.
func resolveListen(flag, addr string) (string, error) { return resolveUDP(flag, addr, true) }
