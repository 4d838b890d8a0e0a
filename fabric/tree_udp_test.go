package fabric_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire"
)

// TestUDPSecureTree runs a job over a root switch and a leaf below it
// on loopback UDP, every datagram sealed and each switch with its own
// switch credential: two members under the leaf and one at the root
// join, see each other's own addresses, multicast from both sides and
// allreduce; the root knows the leaf by its certified identity.
func TestUDPSecureTree(t *testing.T) {
	a, err := secure.NewAuthority([]byte("fabric secret of the secure tree test"))
	if err != nil {
		t.Fatal(err)
	}
	token := []byte("tree token")
	sopts := secure.Options{}
	rootConn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	leafConn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		rootConn.Close()
		t.Fatal(err)
	}
	serve := func(conn *netio.UDPConn, cfg fabric.Config, name string) *fabric.Server {
		t.Helper()
		sw, err := fabric.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		srv, err := fabric.NewServerWith(conn, sw, fabric.ServerOptions{Security: secureIdentity(t, a, secure.RoleSwitch, name), SecurityOptions: sopts})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		return srv
	}
	root := serve(rootConn, fabric.Config{Token: token, Children: []netip.AddrPort{leafConn.LocalAddr()}}, "spine")
	leaf := serve(leafConn, fabric.Config{Token: token, Parent: rootConn.LocalAddr()}, "leaf1")

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	const n = 3
	switches := []*fabric.Server{leaf, leaf, root}
	gs := make([]*endpoint.Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{
			Security: secureIdentity(t, a, secure.RoleMember, fmt.Sprintf("tree/%d", i)), SecurityOptions: sopts})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ep.Close() })
		wg.Go(func() {
			gs[i], errs[i] = ep.JoinJob(ctx, switches[i].Addr().String(), "tree", n, i, endpoint.FabricOptions{Token: token})
			if errs[i] == nil {
				for _, m := range gs[i].Members() {
					if m.ID == uint16(i) && m.Addr != ep.LocalAddr() {
						errs[i] = fmt.Errorf("rank %d listed at %v, its address is %v", i, m.Addr, ep.LocalAddr())
					}
				}
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %d join: %v", i, err)
		}
	}
	if gs[0].ID() != gs[2].ID() {
		t.Fatalf("group %d under the leaf, %d at the root", gs[0].ID(), gs[2].ID())
	}
	for _, sender := range []int{0, 2} {
		data := bytes.Repeat([]byte{byte(sender + 1), 7, 9}, 100000)
		for i := range n {
			wg.Go(func() {
				if i == sender {
					errs[i] = gs[i].Multicast(ctx, data, endpoint.MulticastOptions{})
					return
				}
				buf := make([]byte, len(data))
				if errs[i] = gs[i].Recv(ctx, sender, buf); errs[i] == nil && !bytes.Equal(buf, data) {
					errs[i] = fmt.Errorf("received other bytes")
				}
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("multicast from %d: member %d: %v", sender, i, err)
			}
		}
	}
	// An Allreduce: the leaf reduces its two members and sends one
	// partial up; the root adds its member's and sends the sum down.
	const elems = 5000
	for i := range n {
		wg.Go(func() {
			send, recv := make([]byte, 4*elems), make([]byte, 4*elems)
			for j := range elems {
				binary.LittleEndian.PutUint32(send[4*j:], uint32(i*elems+j))
			}
			if errs[i] = gs[i].Allreduce(ctx, send, recv, wire.DtypeI32, wire.AluAdd, endpoint.ReduceOptions{}); errs[i] != nil {
				return
			}
			for j := range elems {
				if got, want := binary.LittleEndian.Uint32(recv[4*j:]), uint32(3*elems+3*j); got != want {
					errs[i] = fmt.Errorf("element %d: %d, want %d", j, got, want)
					return
				}
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %d allreduce: %v", i, err)
		}
	}
	if c, ok := root.PeerIdentity(leaf.Addr()); !ok || c.Role != secure.RoleSwitch || c.Name != "leaf1" {
		t.Fatalf("the root sees the leaf as %+v, %v", c, ok)
	}
}
