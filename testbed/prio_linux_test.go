package testbed

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ndma/ndma/netio"
)

const (
	prioPort = 7602
	// prioBurst data datagrams of prioSize bytes go ahead of the Control
	// one: 38 ms at 20 Mbit/s.
	prioBurst = 12
	prioSize  = 8000
)

// TestPriorityQueues: with Config.PriorityQueues each link's tbf holds a
// pfifo_fast of QueuePackets per band, and a datagram netio marks Control
// overtakes data queued ahead of it on the way from one host to another
// (through two shaped links and the bridge).
func TestPriorityQueues(t *testing.T) {
	st := upTestbed(t, Config{Hosts: 2, MemNodes: 1, Rate: "10mbit", HostRate: "20mbit", Latency: 200 * time.Millisecond, PriorityQueues: true})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	// 10 Mbit/s for 200 ms plus a two-frame bucket, in 9014-byte frames
	// (memory node); 20 Mbit/s for the hosts.
	if st.QueuePackets != 30 || st.HostQueuePackets != 58 {
		t.Errorf("QueuePackets %d, HostQueuePackets %d; want 30, 58", st.QueuePackets, st.HostQueuePackets)
	}
	check := func(ns, dev string, qlen int) {
		t.Helper()
		var q []struct {
			Kind   string `json:"kind"`
			Parent string `json:"parent"`
		}
		out, err := command(ctx, "", "tc", "-n", ns, "-j", "qdisc", "show", "dev", dev)
		if err == nil {
			err = json.Unmarshal([]byte(out), &q)
		}
		if err != nil {
			t.Fatalf("%s %s: %v", ns, dev, err)
		}
		if len(q) != 2 || q[0].Kind != "tbf" || q[1].Kind != "pfifo_fast" || q[1].Parent != "1:1" {
			t.Errorf("%s %s: qdiscs %+v, want a pfifo_fast under the root tbf", ns, dev, q)
		}
		var l []struct {
			TxQLen int `json:"txqlen"`
		}
		out, err = command(ctx, "", "ip", "-n", ns, "-j", "link", "show", "dev", dev)
		if err == nil {
			err = json.Unmarshal([]byte(out), &l)
		}
		if err != nil || len(l) != 1 || l[0].TxQLen != qlen {
			t.Errorf("%s %s: link %+v (%v), want txqueuelen %d", ns, dev, l, err, qlen)
		}
	}
	for _, n := range st.Hosts {
		check(n.NS, nodeIface, st.HostQueuePackets)
		check(st.Switch.NS, n.Port, st.HostQueuePackets)
	}
	for _, n := range st.MemNodes {
		check(n.NS, nodeIface, st.QueuePackets)
		check(st.Switch.NS, n.Port, st.QueuePackets)
	}

	var out lockedBuilder
	if err := Run(ctx, st, helperCmd(t, "prio", st), &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	pos := -1
	for line := range strings.Lines(out.String()) {
		if _, v, ok := strings.Cut(strings.TrimSpace(line), "control_position "); ok {
			pos, _ = strconv.Atoi(v)
		}
	}
	t.Logf("the Control datagram arrived after %d of %d data datagrams", pos, prioBurst)
	// In one queue it would arrive last (prioBurst); ahead of it may be
	// what the tbf's bucket let go at once and the frame on the wire, at
	// each of the two links.
	if pos < 0 || pos > prioBurst/2 {
		t.Errorf("Control datagram arrived after %d of %d data datagrams, want at most %d\n%s", pos, prioBurst, prioBurst/2, out.String())
	}
}

// helperPrio is the "prio" rank program. Rank 1 answers rank 0's hellos
// until the burst begins, then prints how many data datagrams arrived
// before the Control one. Rank 0 sends hellos until answered, then the
// burst in one WriteBatch.
func helperPrio(ctx context.Context, rank int, hosts []string) error {
	if len(hosts) < 2 {
		return fmt.Errorf("prio: %d hosts, want 2", len(hosts))
	}
	peer := netip.AddrPortFrom(netip.MustParseAddr(hosts[1]), prioPort)
	switch rank {
	case 1:
		pc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(peer))
		if err != nil {
			return err
		}
		defer pc.Close()
		deadline, _ := ctx.Deadline()
		pc.SetReadDeadline(deadline)
		buf := make([]byte, netio.MaxDatagram)
		data := 0
		for {
			n, from, err := pc.ReadFromUDPAddrPort(buf)
			if err != nil {
				return err
			}
			switch {
			case n == 1 && buf[0] == 'h':
				if _, err := pc.WriteToUDPAddrPort([]byte{'r'}, from); err != nil {
					return err
				}
			case buf[0] == 'd':
				data++
			case buf[0] == 'c':
				fmt.Println("control_position", data)
				return nil
			}
		}
	case 0:
		c, err := netio.ListenUDP(net.JoinHostPort(hosts[0], "0"), netio.UDPConfig{})
		if err != nil {
			return err
		}
		defer c.Close()
		answered := make(chan error, 1)
		go func() {
			ds := []netio.Datagram{{Buf: make([]byte, 0, netio.MaxDatagram)}}
			_, err := c.ReadBatch(ds)
			answered <- err
		}()
		hello := []netio.Datagram{{Addr: peer, Buf: []byte{'h'}}}
	wait:
		for {
			if err := c.WriteBatch(hello); err != nil {
				return err
			}
			select {
			case err := <-answered:
				if err != nil {
					return err
				}
				break wait
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		ds := make([]netio.Datagram, prioBurst+1)
		for i := range prioBurst {
			ds[i] = netio.Datagram{Addr: peer, Buf: make([]byte, prioSize)}
			ds[i].Buf[0] = 'd'
		}
		ds[prioBurst] = netio.Datagram{Addr: peer, Buf: []byte{'c'}, Control: true}
		return c.WriteBatch(ds)
	}
	return nil
}
