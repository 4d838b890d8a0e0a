package coll

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio"
)

// TestParseEnvSwitches: NDMA_SWITCHES lists the switches to shard over;
// NDMA_SWITCH may be left out or must be the first; one address is one
// switch (no sharding); empty, repeated or too many addresses are
// refused naming the variable.
func TestParseEnvSwitches(t *testing.T) {
	env := func(kv ...string) func(string) (string, bool) {
		m := map[string]string{"NDMA_RANK": "0", "NDMA_SIZE": "2"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	for _, c := range []struct {
		kv       []string
		sw       string
		switches []string
	}{
		{[]string{"NDMA_SWITCHES", "a:1, b:2"}, "a:1", []string{"a:1", "b:2"}},
		{[]string{"NDMA_SWITCH", "a:1", "NDMA_SWITCHES", "a:1,b:2,c:3"}, "a:1", []string{"a:1", "b:2", "c:3"}},
		{[]string{"NDMA_SWITCHES", "a:1"}, "a:1", nil},
		{[]string{"NDMA_SWITCH", "a:1"}, "a:1", nil},
	} {
		l, err := ParseEnv(env(c.kv...))
		if err != nil || l.Switch != c.sw || strings.Join(l.Switches, ",") != strings.Join(c.switches, ",") {
			t.Errorf("%q: Switch %q, Switches %q, %v; want %q, %q", c.kv, l.Switch, l.Switches, err, c.sw, c.switches)
		}
	}
	for _, kv := range [][]string{
		{"NDMA_SWITCH", "b:2", "NDMA_SWITCHES", "a:1,b:2"},
		{"NDMA_SWITCHES", "a:1,,b:2"},
		{"NDMA_SWITCHES", "a:1,a:1"},
		{"NDMA_SWITCHES", strings.Repeat("x:1,", MaxSwitches) + "y:1"},
	} {
		if _, err := ParseEnv(env(kv...)); !errors.Is(err, ErrArg) || !strings.Contains(err.Error(), "NDMA_SWITCH") {
			t.Errorf("%q: %v; want ErrArg naming the variable", kv, err)
		}
	}
}

// TestShardConfigRefused: a sharded Config whose stripe endpoints do not
// match its switches is refused before anything is sent.
func TestShardConfigRefused(t *testing.T) {
	ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	other, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	base := Config{Endpoint: ep, Rank: 0, Size: 2, Token: testToken}
	for _, c := range []struct {
		name     string
		switches []string
		sw       string
		eps      []*endpoint.Endpoint
	}{
		{"too few endpoints", []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}, "", []*endpoint.Endpoint{other}},
		{"the first endpoint again", []string{"127.0.0.1:1", "127.0.0.1:2"}, "", []*endpoint.Endpoint{ep}},
		{"a nil endpoint", []string{"127.0.0.1:1", "127.0.0.1:2"}, "", []*endpoint.Endpoint{nil}},
		{"Switch not the first", []string{"127.0.0.1:1", "127.0.0.1:2"}, "127.0.0.1:2", []*endpoint.Endpoint{other}},
		{"a repeated switch", []string{"127.0.0.1:1", "127.0.0.1:1"}, "", []*endpoint.Endpoint{other}},
		{"endpoints without switches", nil, "127.0.0.1:1", []*endpoint.Endpoint{other}},
	} {
		cfg := base
		cfg.Switches, cfg.Switch, cfg.StripeEndpoints = c.switches, c.sw, c.eps
		if _, err := New(context.Background(), cfg); !errors.Is(err, ErrArg) {
			t.Errorf("%s: %v; want ErrArg", c.name, err)
		}
	}
	if st := ep.Stats(); st.Transport.PacketsSent != 0 {
		t.Fatalf("sent %d packets before refusing", st.Transport.PacketsSent)
	}
}

// TestLaunchSwitchesUDP: two ranks launched with NDMA_SWITCHES naming
// two switches on loopback get a communicator that opened its own
// endpoint for the second switch, joined both, reduces exactly through
// both (each switch took aggregation packets) and closes what it opened.
func TestLaunchSwitchesUDP(t *testing.T) {
	var addrs []string
	var srvs []*fabric.Server
	for range 2 {
		conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
		if err != nil {
			t.Fatal(err)
		}
		s, err := fabric.New(fabric.Config{Token: testToken})
		if err != nil {
			t.Fatal(err)
		}
		srv := fabric.NewServer(conn, s, nil)
		t.Cleanup(func() { srv.Close() })
		srvs = append(srvs, srv)
		addrs = append(addrs, srv.Addr().String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	comms := make([]*Communicator, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			l := Launch{Rank: r, Size: 2, Switch: addrs[0], Switches: addrs, Job: t.Name(), Token: string(testToken), Insecure: true, Hierarchy: HierarchyOff}
			ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
			if err != nil {
				errs[r] = err
				return
			}
			t.Cleanup(func() { ep.Close() })
			comms[r], errs[r] = l.Communicator(ctx, ep)
		})
	}
	wg.Wait()
	firstErr(t, "launch", errs)
	for r, c := range comms {
		if got := c.Switches(); len(got) != 2 || got[0].String() != addrs[0] || got[1].String() != addrs[1] {
			t.Fatalf("rank %d stripes over %v, want %v", r, got, addrs)
		}
	}
	checkShardReductions(t, comms, 3001, WithAlgo(AlgoInNet))
	for i, srv := range srvs {
		if st := srv.Stats(); st.AggregateIn == 0 {
			t.Errorf("switch %d took no aggregation packet", i)
		}
	}
	runEach(comms, func(ctx context.Context, c *Communicator) error { return c.Close(ctx) })
	for r, c := range comms {
		for _, ep := range c.ownEps {
			if err := ep.Start(&endpoint.Op{Kind: endpoint.KindRead, Peer: ep.LocalAddr()}, nil); !errors.Is(err, endpoint.ErrClosed) {
				t.Errorf("rank %d: the stripe endpoint it opened is open after Close (%v)", r, err)
			}
		}
	}
}
