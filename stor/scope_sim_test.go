package stor

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/ndma/ndma/secure"
)

// TestSimSealedScopes: on a sealed fabric a volume belongs to the scope
// of the credential that created it. A credential of another scope
// neither sees it (List, Open, Remove, the catalog) nor reaches it, nor
// takes its name: every request a
// node serves for a volume, sent straight to each node with well-formed
// bodies, and the gateway's reads and writes are refused with DENIED,
// and nothing of the volume changes. Another credential of the owner's
// scope reads it, and the storage service's own scope lists it.
func TestSimSealedScopes(t *testing.T) {
	a, err := secure.NewAuthority([]byte("stor scope test secret"))
	if err != nil {
		t.Fatal(err)
	}
	simStorageWith(t, 3, 12, a, func(t *testing.T, s *simStor) {
		gw := s.gateway()
		d, v, m, _ := s.writtenVolume(s.clientAs("app/1"), VolumeSpec{Name: "v", Size: 4 * MinExtent, Extent: MinExtent, Replicas: 3})
		if d.Owner != "app" {
			t.Fatalf("owner %q, want the creator's scope app", d.Owner)
		}
		s.flushAndClose(v, d, m)
		ctx := s.ctx()

		other := s.clientAs("other/1")
		if vs, err := other.List(ctx); err != nil || len(vs) != 0 {
			t.Errorf("another scope lists %+v, %v: want nothing", vs, err)
		}
		// To the client of another scope the volume does not exist; its
		// name is taken all the same.
		if _, err := other.Open(ctx, "v", OpenOptions{}); !errors.Is(err, ErrNoVolume) {
			t.Errorf("another scope opens for reading: %v, want ErrNoVolume", err)
		}
		if _, err := other.Open(ctx, "v", OpenOptions{Write: true}); !errors.Is(err, ErrNoVolume) {
			t.Errorf("another scope opens for writing: %v, want ErrNoVolume", err)
		}
		if _, err := other.Remove(ctx, "v", true); !errors.Is(err, ErrNoVolume) {
			t.Errorf("another scope removes: %v, want ErrNoVolume", err)
		}
		if _, err := other.Create(ctx, VolumeSpec{Name: "v", Size: 4 * MinExtent, Extent: MinExtent}); !errors.Is(err, ErrDenied) {
			t.Errorf("another scope creates a volume of the taken name: %v, want ErrDenied", err)
		}
		js := func(op byte, v any) []byte {
			b, _ := json.Marshal(v)
			return append([]byte{op}, b...)
		}
		var name enc
		name.str("v")
		var remove enc
		remove.u8(opRemove)
		remove.str("v")
		remove.u8(1)
		foreign := d
		foreign.Owner = "other"
		reqs := map[string][]byte{
			"create":   js(opCreate, foreign),
			"remove":   remove.b,
			"stat":     append([]byte{opStat}, name.b...),
			"lease":    js(opLease, leaseReq{Name: "v", Holder: 77, TTLMs: 1000, Epoch: 1 << 40}),
			"join":     js(opJoin, joinReq{Name: "v", Holder: 77, Epoch: 1 << 40, Set: "x", Job: "other.w1@stor", Size: 2, Rank: 1}),
			"read":     (&readReq{Name: "v", Len: 16}).append(nil),
			"versions": append([]byte{opVersions}, name.b...),
			"missing":  js(opMissing, missingReq{Name: "v", Node: 1, Since: 1}),
			"write":    (&oneReq{Name: "v", Holder: 77, Ver: 1 << 40, Data: make([]byte, 16)}).append(nil, opWriteOne),
			"flush":    (&oneReq{Name: "v", Holder: 77}).append(nil, opFlushOne),
			"gen":      js(opGen, genReq{Name: "v", Holder: 77, Gen: 1 << 40, Members: []uint16{0, 1, 2}}),
			"force":    js(opForce, forceReq{Name: "v", Gen: 1 << 40}),
			"enroll":   js(opEnroll, enrollReq{Name: "v", Gen: 1 << 40, Node: 1}),
			// A tombstone for the owner's volume, and the name claimed
			// for the caller's own scope.
			"catalog":  js(opCatalog, CatalogEntry{Desc: d, Removed: 1}),
			"catalog2": js(opCatalog, CatalogEntry{Desc: foreign}),
		}
		for _, id := range d.Nodes {
			for what, req := range reqs {
				if _, err := other.call(ctx, id, what, req); !errors.Is(err, ErrDenied) {
					t.Errorf("node %d, %s from another scope: %v, want ErrDenied", id, what, err)
				}
			}
			resp, err := other.call(ctx, id, "catalog list", []byte{opCatList})
			var es []CatalogEntry
			if err == nil {
				err = json.Unmarshal(resp, &es)
			}
			if err != nil || len(es) != 0 {
				t.Errorf("node %d: another scope's catalog %+v, %v: want nothing", id, es, err)
			}
		}
		for what, req := range map[string][]byte{
			"read":  (&readReq{Name: "v", Len: 16}).append(nil),
			"write": (&oneReq{Name: "v", Holder: 77, Ver: 1 << 40, Data: make([]byte, 16)}).append(nil, opGwWrite),
			"flush": (&oneReq{Name: "v", Holder: 77}).append(nil, opGwFlush),
		} {
			resp, err := other.ep.Anycast(ctx, other.sw, GatewayName(DefaultService), gatewayKey, req, s.fab)
			if err != nil || len(resp) == 0 || Code(resp[0]) != CodeDenied {
				t.Errorf("gateway %s from another scope: %q, %v: want DENIED", what, resp, err)
			}
		}
		if st := gw.Stats(); st.Denied != 3 {
			t.Errorf("gateway counted %d denials, want 3", st.Denied)
		}
		var denied uint64
		for _, n := range s.nodes {
			denied += n.Stats().Denied
		}
		if want := uint64(len(reqs) * len(d.Nodes)); denied < want {
			t.Errorf("nodes counted %d denials, want at least %d", denied, want)
		}

		// The owner's scope reads what it wrote, through another
		// credential of the scope; the service's scope lists it.
		r, err := s.clientAs("app/2").Open(ctx, "v", OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		m.verify(t, r)
		vs, err := s.clientAs("stor/admin").List(ctx)
		if err != nil || len(vs) != 1 || vs[0].Name != "v" || vs[0].Owner != "app" {
			t.Errorf("the storage service's scope lists %+v, %v: want v of app", vs, err)
		}
	})
}
