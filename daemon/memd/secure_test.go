package memd

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ndma/ndma/daemon/switchd"
	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
)

func issueID(t *testing.T, a *secure.Authority, role secure.Role, name string) *secure.Identity {
	t.Helper()
	id, err := a.Issue(role, name, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestSecurityConfig: Start refuses a credential of another role than
// memory node, and an MTU without room for the tag, naming the field.
func TestSecurityConfig(t *testing.T) {
	a, err := secure.NewAuthority([]byte("memd security config test"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cfg   Config
		field string
	}{
		{Config{Security: issueID(t, a, secure.RoleSwitch, "sw")}, "Security"},
		{Config{Security: issueID(t, a, secure.RoleMemoryNode, "m"), MTU: MinMTU}, "MTU"},
	} {
		c.cfg.Listen, c.cfg.Size = "127.0.0.1:0", 1<<16
		srv, err := Start(c.cfg)
		if err == nil {
			srv.Close()
			t.Fatalf("%+v: Start succeeded", c.cfg)
		}
		if fe, ok := errors.AsType[*FieldError](err); !ok || fe.Field != c.field || !errors.Is(err, ErrConfig) {
			t.Errorf("Start: %v, want a *FieldError for %s", err, c.field)
		}
	}
}

// TestLendSealed: a memory node and a switch, each with its credential,
// seal every datagram: the node lends its region to the switch's pool
// (a client with a credential sees it alive), the node logs that it
// seals, and a client without a credential is told that the switch
// takes sealed datagrams only.
func TestLendSealed(t *testing.T) {
	a, err := secure.NewAuthority([]byte("memd sealed lending test"))
	if err != nil {
		t.Fatal(err)
	}
	token := []byte("sealed lend")
	opts := secure.Options{}
	sw, err := switchd.Start(switchd.Config{Listen: "127.0.0.1:0", Token: token, Security: issueID(t, a, secure.RoleSwitch, "sw0"), SecurityOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	var logs bytes.Buffer
	srv, err := Start(Config{Listen: "127.0.0.1:0", Size: 1 << 20, Switch: sw.Addr().String(), Token: token,
		Security: issueID(t, a, secure.RoleMemoryNode, "mem0"), SecurityOptions: opts, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		MetricsAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{Security: issueID(t, a, secure.RoleClient, "cli"), SecurityOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		ps, err := cli.PoolStat(ctx, sw.Addr().String(), endpoint.FabricOptions{Token: token})
		if err != nil {
			t.Fatal(err)
		}
		if len(ps.Nodes) == 1 && ps.Nodes[0].Alive && ps.Nodes[0].Addr == srv.Addr() {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := srv.Stats().Security; st.Handshakes == 0 || st.Sealed == 0 || st.Opened == 0 {
		t.Errorf("the node's security layer: %+v", st)
	}
	if st := sw.Stats().Security; st.Handshakes < 2 {
		t.Errorf("the switch's security layer: %+v", st)
	}
	m := scrape(t, srv)
	if m[`ndma_memd_security_handshakes_total{result="established"}`] == 0 || m["ndma_memd_security_sealed_total"] == 0 ||
		m["ndma_memd_security_peers"] == 0 {
		t.Errorf("the security layer's series: handshakes %v, sealed %v, peers %v", m[`ndma_memd_security_handshakes_total{result="established"}`],
			m["ndma_memd_security_sealed_total"], m["ndma_memd_security_peers"])
	}
	if _, ok := m[`ndma_memd_security_sessions_ended_total{cause="lost"}`]; !ok {
		t.Error("no series of sessions lost")
	}
	if !strings.Contains(logs.String(), `sealing every datagram (role memory node, name \"mem0\")`) {
		t.Errorf("no sealing line in the logs:\n%s", logs.String())
	}
	plain, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	pctx, pcancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer pcancel()
	if _, err := plain.PoolStat(pctx, sw.Addr().String(), endpoint.FabricOptions{Token: token}); !errors.Is(err, transport.ErrSealRequired) {
		t.Errorf("a client without a credential: %v, want transport.ErrSealRequired", err)
	}
}
