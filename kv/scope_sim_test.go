package kv

import (
	"errors"
	"testing"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/secure"
)

// TestSimKeySpaceScopes: on a sealed fabric an owner serves the scopes
// its configuration names (the simulation's clients) and the key
// space's own, and refuses every other: a client of another scope is
// not told where the key space lies (Open fails with ErrDenied), and a
// write it sends anyway is neither applied nor answered otherwise.
func TestSimKeySpaceScopes(t *testing.T) {
	a, err := secure.NewAuthority([]byte("kv key space scope test"))
	if err != nil {
		t.Fatal(err)
	}
	l := Layout{Shards: 2, Buckets: 64, PageBytes: 4096, HeapBytes: 64 << 10, Owners: 1}
	simStoreProcs(t, 95, 2, l, pool.AllocOptions{}, 1, a, func(t *testing.T, s *simKV) {
		ctx := s.Ctx()
		c := s.client()
		if _, err := c.Set(ctx, []byte("k"), []byte("v")); err != nil {
			t.Fatalf("seed %d: a client of a served scope: %v", s.seed, err)
		}
		for _, name := range []string{"other", "kv-other/0"} {
			role := secure.RoleClient
			if name == "kv-other/0" {
				role = secure.RoleMember // an owner of another key space
			}
			ep := s.NewEndpointAs(endpoint.Config{}, role, name)
			defer ep.Close()
			if _, err := Open(ctx, ep, s.PoolClient(ep), ClientConfig{Switch: s.Switch.String(), Fabric: s.Fab, Space: simSpace}); !errors.Is(err, ErrDenied) {
				t.Errorf("seed %d: %s opens the key space: %v, want ErrDenied", s.seed, name, err)
			}
			// A write sent as an open client would send it.
			intruder := &Client{ep: ep, cfg: c.cfg, inc: map[int]uint64{}, l: c.l, id: 77}
			intruder.loc.init(-1)
			if _, err := intruder.Set(ctx, []byte("k"), []byte("stolen")); !errors.Is(err, ErrDenied) {
				t.Errorf("seed %d: %s writes: %v, want ErrDenied", s.seed, name, err)
			}
		}
		if got, _, err := c.Get(ctx, []byte("k")); err != nil || string(got) != "v" {
			t.Errorf("seed %d: after the refused writes the key holds %q, %v; want v", s.seed, got, err)
		}
		if d := s.owners[0].Stats().Denied; d != 4 {
			t.Errorf("seed %d: the owner counted %d denials, want 4", s.seed, d)
		}
	})
}
