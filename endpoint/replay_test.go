package endpoint

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire"
)

// TestSecureReplayFetchAdd: every datagram a sealed client sent for a
// FETCHADD, replayed by someone who captured them — from the client's
// own address and from five new ports — changes nothing: the counter
// holds what the one FETCHADD made it, and the memory node counts the
// replays as dropped.
func TestSecureReplayFetchAdd(t *testing.T) {
	a := testAuthority(t)
	srv, _ := listenTapped(t, Config{}, testIdentity(t, a, secure.RoleMemoryNode, "mem0"))
	cli, cliTap := listenTapped(t, Config{}, testIdentity(t, a, secure.RoleClient, "alice"))
	mem := make([]byte, 4096)
	key, err := srv.Register(mem, wire.PermAll, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	r, err := cli.Dial(ctx, srv.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	if old, err := r.FetchAdd(ctx, key, 0, 1); err != nil || old != 0 {
		t.Fatalf("fetch-add: %d, %v", old, err)
	}
	captured := cliTap.wire()
	to := srv.LocalAddr()
	replay := func(c netio.Conn) {
		for _, b := range captured {
			if err := c.WriteBatch([]netio.Datagram{{Addr: to, Buf: append([]byte(nil), b...)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := srv.SecurityStats()
	cli.Locked(func() { replay(cliTap.Conn) }) // from the client's own address (its writer holds the lock)
	for range 5 {
		c, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
		if err != nil {
			t.Fatal(err)
		}
		replay(c)
		c.Close()
	}
	time.Sleep(200 * time.Millisecond)
	got := make([]byte, 8)
	if err := r.Read(ctx, key, 0, got); err != nil {
		t.Fatal(err)
	}
	if v := binary.LittleEndian.Uint64(got); v != 1 {
		t.Fatalf("after %d replays the counter is %d, want 1", 6*len(captured), v)
	}
	st := srv.SecurityStats()
	if dropped := st.DroppedReplay + st.DroppedNoSA - before.DroppedReplay - before.DroppedNoSA; dropped == 0 || st.Opened-before.Opened > 4 {
		t.Fatalf("replays: %d dropped, %d opened (before %+v, after %+v)", dropped, st.Opened-before.Opened, before, st)
	}
}
