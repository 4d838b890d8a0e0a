package main

import (
	"crypto/rand"
	"fmt"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/secure"
)

// demoSecurity gives every process of the demo an identity issued under a
// fabric secret drawn for this run, so that every datagram the demo sends
// is sealed, and sums the security layers' counters for the report.
type demoSecurity struct {
	auth   *secure.Authority
	layers []func() secure.LayerStats // one per process, in start order
}

// newDemoSecurity draws a fresh fabric secret and derives its authority.
func newDemoSecurity() (*demoSecurity, error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	a, err := secure.NewAuthority(secret)
	clear(secret)
	if err != nil {
		return nil, err
	}
	return &demoSecurity{auth: a}, nil
}

// issue returns a new identity of role and name under the demo's fabric.
func (s *demoSecurity) issue(role secure.Role, name string) (*secure.Identity, error) {
	return s.auth.Issue(role, name, rand.Reader)
}

// endpoint returns the options of an endpoint whose every datagram is
// sealed under a new identity of role and name.
func (s *demoSecurity) endpoint(role secure.Role, name string) (endpoint.Options, error) {
	id, err := s.issue(role, name)
	if err != nil {
		return endpoint.Options{}, err
	}
	return endpointOptions(id), nil
}

// watch adds a process's security counters to the report.
func (s *demoSecurity) watch(stats func() secure.LayerStats) { s.layers = append(s.layers, stats) }

// row reports the security layers of every process: the datagrams sealed
// and opened, and those refused, which must be none (every process of the
// demo holds a credential of its fabric). Datagrams a layer dropped from a
// full queue while a handshake was under way are retransmitted by the
// transport and reported apart.
func (s *demoSecurity) row() demoRow {
	var t secure.LayerStats
	for _, st := range s.layers {
		l := st()
		t.Sealed += l.Sealed
		t.Opened += l.Opened
		t.Handshakes += l.Handshakes
		t.HandshakesFailed += l.HandshakesFailed
		t.DroppedPlain += l.DroppedPlain
		t.DroppedNoSA += l.DroppedNoSA
		t.DroppedAuth += l.DroppedAuth
		t.DroppedReplay += l.DroppedReplay
		t.DroppedQueue += l.DroppedQueue
	}
	refused := t.DroppedPlain + t.DroppedNoSA + t.DroppedAuth + t.DroppedReplay + t.HandshakesFailed
	row := demoRow{Op: "security", OK: t.Sealed > 0 && t.Opened > 0 && refused == 0, Sealed: t.Sealed, Opened: t.Opened, Refused: refused,
		Detail: fmt.Sprintf("sealed: %d datagrams, %d opened, %d refused; %d processes, %d handshakes", t.Sealed, t.Opened, refused, len(s.layers), t.Handshakes)}
	if t.DroppedQueue > 0 {
		row.Detail += fmt.Sprintf(", %d queued during a handshake dropped and sent again", t.DroppedQueue)
	}
	if !row.OK {
		row.Detail = fmt.Sprintf("%s (refused: %d plain, %d no SA, %d failing authentication, %d replayed, %d handshakes failed)",
			row.Detail, t.DroppedPlain, t.DroppedNoSA, t.DroppedAuth, t.DroppedReplay, t.HandshakesFailed)
	}
	return row
}
