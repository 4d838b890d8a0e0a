package endpoint

import (
	"context"
	"encoding/binary"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// forged wraps a HANDSHAKE message as an off-path forger sends it.
func forged(t testing.TB, msg []byte) []byte {
	h := wire.Header{Version: wire.Version, Op: wire.OpHandshake, MsgLen: uint32(len(msg))}
	b, err := wire.AppendPacket(nil, &h, msg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// lastSAID is the SAID of the last sealed datagram tap wrote (0: none).
func lastSAID(tap *tapConn) uint32 {
	w := tap.wire()
	for i := len(w) - 1; i >= 0; i-- {
		var h wire.Header
		if _, _, err := wire.Parse(w[i], &h); err == nil && h.Flags&wire.FlagAuth != 0 {
			return h.SAID
		}
	}
	return 0
}

// TestSimSealedForgedHandshake: an off-path forger who sees the wire
// sends each side of a sealed client–memory node pair, from the other
// side's address, the two datagrams that used to cut a session for good
// (an unknown-SA notice naming the SAID each sealed datagram carries, a
// HELLO with an all-zero ephemeral key), and sprays notices for the SAIDs
// around it, every 100 ms for 30 s of virtual time while the client
// reads and writes: every operation completes, no session is lost, and
// the node keeps one session with the client.
func TestSimSealedForgedHandshake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := simnet.New(5)
		l := simnet.LinkConfig{Rate: 10e9, Latency: 20 * time.Microsecond}
		st, err := memnode.NewStore(memnode.Config{})
		if err != nil {
			t.Fatal(err)
		}
		key, err := st.Alloc(1<<16, wire.PermAll, 0)
		if err != nil {
			t.Fatal(err)
		}
		a := testAuthority(t)
		sopts := secure.Options{}
		nodeAddr, cliAddr := netip.MustParseAddrPort("10.0.0.1:7470"), netip.MustParseAddrPort("10.0.0.2:5000")
		ntap := &tapConn{Conn: n.ListenConn(nodeAddr, l, l)}
		node, err := New(ntap, Config{Store: st, Transport: transport.Config{Seed: 1}},
			Options{Security: testIdentity(t, a, secure.RoleMemoryNode, "mem0"), SecurityOptions: sopts})
		if err != nil {
			t.Fatal(err)
		}
		ctap := &tapConn{Conn: n.ListenConn(cliAddr, l, l)}
		cli, err := New(ctap, Config{Transport: transport.Config{Seed: 2}},
			Options{Security: testIdentity(t, a, secure.RoleClient, "alice"), SecurityOptions: sopts})
		if err != nil {
			t.Fatal(err)
		}
		stop := serveNet(t, n)
		defer func() {
			cli.Close()
			node.Close()
			stop()
		}()
		r := cli.Remote(nodeAddr)
		op := func(i int) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			v := binary.BigEndian.AppendUint64(nil, uint64(i))
			if err := r.Write(ctx, key, 64, v); err != nil {
				t.Fatalf("write %d under forgeries: %v (client %+v, node %+v)", i, err, cli.SecurityStats(), node.SecurityStats())
			}
			got := make([]byte, 8)
			if err := r.Read(ctx, key, 64, got); err != nil || binary.BigEndian.Uint64(got) != uint64(i) {
				t.Fatalf("read %d under forgeries: %v", i, err)
			}
		}
		op(0)
		zeroHello := func(said uint32) []byte {
			b := append([]byte{1}, make([]byte, 32)...) // HELLO, an all-zero key
			return append(binary.BigEndian.AppendUint32(b, said), 0)
		}
		notice := func(said uint32) []byte { return binary.BigEndian.AppendUint32([]byte{5}, said) } // unknown SA
		for i := 1; i <= 300; i++ {
			cs, ns := lastSAID(ctap), lastSAID(ntap)
			n.Locked(func() {
				for d := uint32(0); d < 8; d++ {
					n.Inject(nodeAddr, cliAddr, forged(t, notice(cs+d-4)))
					n.Inject(cliAddr, nodeAddr, forged(t, notice(ns+d-4)))
				}
				n.Inject(nodeAddr, cliAddr, forged(t, zeroHello(cs)))
				n.Inject(cliAddr, nodeAddr, forged(t, zeroHello(ns)))
			})
			op(i)
			time.Sleep(100 * time.Millisecond)
		}
		for name, s := range map[string]secure.LayerStats{"client": cli.SecurityStats(), "node": node.SecurityStats()} {
			if s.SessionsLost != 0 || s.Peers != 1 {
				t.Errorf("%s after 30 s of forgeries: %+v", name, s)
			}
			if s.Handshakes > 40 {
				t.Errorf("%s: %d handshakes in 30 s: the forgeries start more than one a second", name, s.Handshakes)
			}
		}
	})
}
