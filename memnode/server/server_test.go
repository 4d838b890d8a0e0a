package server

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// nopHost is a Host that sends nothing.
type nopHost struct{}

func (nopHost) Reply(transport.PeerID, *wire.Header, []byte) error { return nil }
func (nopHost) Raw(netip.AddrPort, *wire.Header, []byte) bool      { return true }
func (nopHost) ReadPool(time.Time, netip.AddrPort, uint32, uint64, uint64, uint16, []byte, func(error)) error {
	return nil
}
func (nopHost) Notify(time.Time, netip.AddrPort, []byte) {}

// lentStore returns a store with one region of 64 KiB and its key.
func lentStore(t *testing.T) (*memnode.Store, uint64) {
	t.Helper()
	st, err := memnode.NewStore(memnode.Config{})
	if err != nil {
		t.Fatal(err)
	}
	key, err := st.Alloc(1<<16, wire.PermAll, 0)
	if err != nil {
		t.Fatal(err)
	}
	return st, key
}

// TestPoolServeNeedsToken: a server that would serve a pool without a
// fabric token (accepting anyone's grants) is refused unless Insecure
// says so, and so is one with both.
func TestPoolServeNeedsToken(t *testing.T) {
	sw := netip.MustParseAddrPort("10.0.0.1:7471")
	for _, tc := range []struct {
		serve PoolServe
		ok    bool
	}{
		{PoolServe{}, false},
		{PoolServe{Token: []byte("t"), Insecure: true}, false},
		{PoolServe{Token: []byte("t")}, true},
		{PoolServe{Insecure: true}, true},
	} {
		st, key := lentStore(t)
		tc.serve.Switch, tc.serve.Key = sw, key
		_, err := New(Config{Store: st, Pool: &tc.serve, Segment: 1024, DeadTimeout: time.Second}, nopHost{})
		switch {
		case tc.ok && err != nil:
			t.Errorf("token %q, insecure %v: %v", tc.serve.Token, tc.serve.Insecure, err)
		case !tc.ok && err == nil:
			t.Errorf("token %q, insecure %v: New succeeded", tc.serve.Token, tc.serve.Insecure)
		case !tc.ok && (len(tc.serve.Token) == 0) != errors.Is(err, secure.ErrNoToken):
			t.Errorf("token %q, insecure %v: %v", tc.serve.Token, tc.serve.Insecure, err)
		}
	}
}

// TestPoolServeChecks: a pool server needs its switch's address and a
// lent region the store holds, and bounds that are not negative.
func TestPoolServeChecks(t *testing.T) {
	st, key := lentStore(t)
	sw := netip.MustParseAddrPort("10.0.0.1:7471")
	for name, ps := range map[string]PoolServe{
		"no switch":        {Key: key, Insecure: true},
		"no such region":   {Switch: sw, Key: key + 1, Insecure: true},
		"negative replies": {Switch: sw, Key: key, Insecure: true, Replies: -1},
		"negative TTL":     {Switch: sw, Key: key, Insecure: true, ReplyTTL: -time.Second},
	} {
		if _, err := New(Config{Store: st, Pool: &ps, Segment: 1024, DeadTimeout: time.Second}, nopHost{}); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
	if _, err := New(Config{}, nopHost{}); err == nil {
		t.Error("New without a Store succeeded")
	}
}
