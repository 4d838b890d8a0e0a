package secure

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestCertValidAt: a certificate is valid from its NotBefore to its
// NotAfter, give or take ClockSkew, and not a second more; the errors say
// which side of the period now is on, and name the role and the name.
func TestCertValidAt(t *testing.T) {
	a := authority(t, "certificate validity test secret")
	nb, na := t0, t0.Add(24*time.Hour)
	id, err := a.IssueBetween(RoleMemoryNode, "mem0", nb, na, newRng(1))
	if err != nil {
		t.Fatal(err)
	}
	c := &id.Cert
	if err := c.Verify(a.Public()); err != nil {
		t.Fatal(err)
	}
	for _, ok := range []time.Time{nb, na, nb.Add(-ClockSkew), na.Add(ClockSkew), nb.Add(time.Hour)} {
		if err := c.ValidAt(ok); err != nil {
			t.Errorf("at %v: %v", ok.Sub(nb), err)
		}
	}
	for _, c2 := range []struct {
		at   time.Time
		want error
		says string
	}{
		{na.Add(ClockSkew + time.Second), ErrExpired, `memory node "mem0": valid until 2027-01-16T08:00:00Z, 5m1s ago`},
		{na.Add(30 * 24 * time.Hour), ErrExpired, "valid until"},
		{nb.Add(-ClockSkew - time.Second), ErrNotYetValid, `memory node "mem0": valid from 2027-01-15T08:00:00Z, in 5m1s`},
	} {
		err := c.ValidAt(c2.at)
		if !errors.Is(err, c2.want) || !errors.Is(err, ErrIdentity) || !strings.Contains(err.Error(), c2.says) {
			t.Errorf("at %v: %v, want %v saying %q", c2.at.Sub(nb), err, c2.want, c2.says)
		}
	}
	// The period is signed: moving it breaks the signature.
	moved := *c
	moved.NotAfter = moved.NotAfter.Add(365 * 24 * time.Hour)
	if err := moved.Verify(a.Public()); err == nil || !strings.Contains(err.Error(), "not signed") {
		t.Fatalf("a certificate with its end moved: %v", err)
	}
	// Issue refuses a period the encoding cannot carry.
	for _, p := range [][2]time.Time{
		{na, nb},                           // ends before it begins
		{nb.Add(time.Millisecond), na},     // not whole seconds
		{time.Unix(-1, 0), na},             // before 1970
		{nb, MaxCertTime.Add(time.Second)}, // after 9999
	} {
		if _, err := a.IssueBetween(RoleClient, "x", p[0], p[1], newRng(2)); !errors.Is(err, ErrIdentity) {
			t.Errorf("issue from %v to %v: %v", p[0], p[1], err)
		}
	}
}

// TestHandshakeRefusesCertOutsideItsPeriod: each side of the handshake
// refuses a peer whose certificate is expired or not yet valid at the time
// it handles the peer's message, and says whose certificate, its role,
// its name and why; a peer in its period is taken at the same time.
func TestHandshakeRefusesCertOutsideItsPeriod(t *testing.T) {
	a := authority(t, "certificate validity test secret")
	issueAt := func(role Role, name string, nb, na time.Time, seed byte) *Identity {
		id, err := a.IssueBetween(role, name, nb, na, newRng(seed))
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	day := 24 * time.Hour
	current := func(role Role, name string, seed byte) *Identity {
		return issueAt(role, name, t0.Add(-day), t0.Add(day), seed)
	}
	expired := func(role Role, name string, seed byte) *Identity {
		return issueAt(role, name, t0.Add(-10*day), t0.Add(-day), seed)
	}
	future := func(role Role, name string, seed byte) *Identity {
		return issueAt(role, name, t0.Add(day), t0.Add(10*day), seed)
	}
	// run handshakes ini with a responder of res; it returns the
	// initiator's error on the RESPONSE and the responder's on the FINISH.
	run := func(ini, resID *Identity) (errI, errR error) {
		n := uint32(0x100)
		res, err := NewResponder(resID, Options{}, newRng(3), func() uint32 { n++; return n })
		if err != nil {
			t.Fatal(err)
		}
		in, err := NewInitiator(ini, 9, Options{}, newRng(5))
		if err != nil {
			t.Fatal(err)
		}
		retry, _, _ := res.Handle(t0, addrI, in.Hello())
		h2, _, _ := in.Handle(t0, retry)
		resp, _, err := res.Handle(t0, addrI, h2)
		if err != nil {
			t.Fatal(err)
		}
		fin, si, errI := in.Handle(t0, resp)
		if errI != nil {
			if si != nil {
				t.Fatal("a session with an error")
			}
			return errI, nil // no FINISH to give the responder
		}
		_, sr, errR := res.Handle(t0, addrI, fin)
		if (errR == nil) != (sr != nil) {
			t.Fatal("a session with an error, or neither")
		}
		return nil, errR
	}

	if errI, errR := run(current(RoleClient, "alice", 1), current(RoleSwitch, "sw0", 2)); errI != nil || errR != nil {
		t.Fatalf("both in their period: %v, %v", errI, errR)
	}
	for _, c := range []struct {
		name      string
		ini, res  *Identity
		initiator bool // the initiator refuses (else the responder)
		want      error
		says      string
	}{
		{"expired responder", current(RoleClient, "alice", 1), expired(RoleSwitch, "sw0", 2), true, ErrExpired, `the responder's certificate: secure: bad identity: certificate expired: switch "sw0": valid until`},
		{"future responder", current(RoleClient, "alice", 1), future(RoleSwitch, "sw0", 2), true, ErrNotYetValid, `the responder's certificate: secure: bad identity: certificate not yet valid: switch "sw0": valid from`},
		{"expired initiator", expired(RoleClient, "alice", 1), current(RoleSwitch, "sw0", 2), false, ErrExpired, `the initiator's certificate: secure: bad identity: certificate expired: client "alice"`},
		{"future initiator", future(RoleMemoryNode, "mem0", 1), current(RoleSwitch, "sw0", 2), false, ErrNotYetValid, `the initiator's certificate: secure: bad identity: certificate not yet valid: memory node "mem0"`},
	} {
		errI, errR := run(c.ini, c.res)
		err := errR
		if c.initiator {
			err = errI
		} else if errI != nil {
			t.Errorf("%s: the initiator refused: %v", c.name, errI)
			continue
		}
		if !errors.Is(err, ErrHandshake) || !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want %v saying %q", c.name, err, c.want, c.says)
		}
	}
}
