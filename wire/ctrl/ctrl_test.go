package ctrl_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
	"github.com/ndma/ndma/wire/ctrl/ctrltest"
	"github.com/ndma/ndma/wire/poolmap"
)

func TestRoundTrip(t *testing.T) {
	samples := ctrltest.Samples()
	// reused has been filled by every sample before, so its slices have
	// capacity and stale contents the decoder must overwrite.
	var reused ctrl.Msg
	for _, s := range samples {
		b, err := ctrl.Append(nil, &s.Msg)
		if err != nil {
			t.Fatalf("%s: Append: %v", s.Name, err)
		}
		if err := ctrl.Parse(b, &reused); err != nil {
			t.Fatalf("%s: warm-up Parse: %v", s.Name, err)
		}
	}
	for _, s := range samples {
		t.Run(s.Name, func(t *testing.T) {
			prefix := []byte("prefix")
			b, err := ctrl.Append(bytes.Clone(prefix), &s.Msg)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(b, prefix) {
				t.Fatal("Append overwrote dst")
			}
			b = b[len(prefix):]
			var fresh ctrl.Msg
			if err := ctrl.Parse(b, &fresh); err != nil {
				t.Fatal(err)
			}
			if !ctrltest.Equal(fresh, s.Msg) {
				t.Fatalf("fresh decode:\n got %+v\nwant %+v", fresh, s.Msg)
			}
			if err := ctrl.Parse(b, &reused); err != nil {
				t.Fatal(err)
			}
			if !ctrltest.Equal(reused, s.Msg) {
				t.Fatalf("reused decode:\n got %+v\nwant %+v", reused, s.Msg)
			}
			again, err := ctrl.Append(nil, &reused)
			if err != nil || !bytes.Equal(again, b) {
				t.Fatalf("re-encode differs (err %v)", err)
			}
		})
	}
}

// TestUnusedFields checks that fields a type does not use are neither
// encoded nor left behind by the decoder.
func TestUnusedFields(t *testing.T) {
	full := ctrl.Msg{
		Type: ctrl.Destroy, Job: "j", Service: "s", Size: 3, Rank: 1, Group: 5, Member: 6,
		Epoch: 7, Policy: 8, Ranges: []ctrl.Range{{Owner: 1}}, Members: ctrltest.Members(), Dead: []uint16{1},
	}
	b, err := ctrl.Append(nil, &full)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 2+4 {
		t.Fatalf("destroy request is %d bytes, want %d", len(b), 2+4)
	}
	got := full
	if err := ctrl.Parse(b, &got); err != nil {
		t.Fatal(err)
	}
	if want := (ctrl.Msg{Type: ctrl.Destroy, Group: 5}); !ctrltest.Equal(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

// TestGolden pins the byte layout documented in doc.go (and in
// docs/PROTOCOL.md): the message without its tag.
func TestGolden(t *testing.T) {
	cases := []struct {
		m    ctrl.Msg
		body []byte
	}{
		{ctrl.Msg{Type: ctrl.Heartbeat, Group: 0x01020304, Member: 0x0506},
			[]byte{4, 0, 1, 2, 3, 4, 5, 6}},
		{ctrl.Msg{Type: ctrl.Heartbeat, Resp: true, Epoch: 0x0102030405060708, Dead: []uint16{9, 0x0A0B}},
			[]byte{4, 1, 1, 2, 3, 4, 5, 6, 7, 8, 0, 2, 0, 9, 0x0A, 0x0B}},
		{ctrl.Msg{Type: ctrl.Join, MTU: 9000, Job: "ab", Size: 0x0102, Rank: ctrl.RankAny},
			[]byte{1, 0, 2, 'a', 'b', 1, 2, 0xFF, 0xFF, 0x23, 0x28}},
		{ctrl.Msg{Type: ctrl.Join, Resp: true, Group: 1, Member: 2, Epoch: 3, Members: []ctrl.MemberInfo{
			{ID: 7, Addr: netip.MustParseAddrPort("10.1.2.3:258")},
			{ID: 8, Addr: netip.MustParseAddrPort("[2001:db8::1]:4")},
		}}, []byte{1, 1, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 2,
			0, 7, 4, 10, 1, 2, 3, 1, 2,
			0, 8, 6, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 4}},
		{ctrl.Msg{Type: ctrl.Register, MTU: 9000, Service: "s", Policy: 3, Size: 0x0102, Rank: 2, Ranges: []ctrl.Range{
			{Start: 1, End: 2, Owner: -1, Replicas: []int32{5}},
		}}, []byte{5, 0, 1, 's', 3, 1, 2, 0, 2, 0, 1,
			0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0xFF, 0xFF, 0xFF, 0xFF, 1, 0, 0, 0, 5, 0x23, 0x28}},
		{ctrl.Msg{Type: ctrl.Register, MTU: 9000, Service: "ab", Size: 1, Rank: ctrl.RankAny},
			[]byte{5, 0, 2, 'a', 'b', 0, 0, 1, 0xFF, 0xFF, 0, 0, 0x23, 0x28}},
		{ctrl.Msg{Type: ctrl.Register, Resp: true, Group: 0x01020304, Member: 0x0506},
			[]byte{5, 1, 1, 2, 3, 4, 5, 6}},
		{ctrl.Msg{Type: ctrl.Leave, Resp: true}, []byte{2, 1}},
		{ctrl.Msg{Type: ctrl.Lookup, MTU: 9000, Service: "kv"}, []byte{6, 0, 2, 'k', 'v', 0x23, 0x28}},
		{ctrl.Msg{Type: ctrl.JoinStatus, Job: "ab"}, []byte{17, 0, 2, 'a', 'b'}},
		// Size 10, ranks 0, 3 and 9 joined.
		{ctrl.Msg{Type: ctrl.JoinStatus, Resp: true, Size: 10, Joined: []byte{0b1001, 0b10}}, []byte{17, 1, 0, 10, 0b1001, 0b10}},
		{ctrl.Msg{Type: ctrl.JoinStatus, Resp: true}, []byte{17, 1, 0, 0}},
	}
	for _, c := range cases {
		b, err := ctrl.Append(nil, &c.m)
		if err != nil {
			t.Fatalf("%v: %v", c.m.Type, err)
		}
		if want := c.body; !bytes.Equal(b, want) {
			t.Errorf("%v resp=%v:\n got % x\nwant % x", c.m.Type, c.m.Resp, b, want)
		}
	}
}

func TestJoinedRanks(t *testing.T) {
	m := ctrl.Msg{Type: ctrl.JoinStatus, Resp: true, Size: 17, Joined: []byte{0b1000_0001, 0, 0b1}}
	if got, want := m.JoinedRanks(), []int{0, 7, 16}; !reflect.DeepEqual(got, want) {
		t.Errorf("JoinedRanks = %v, want %v", got, want)
	}
	if got := (&ctrl.Msg{Type: ctrl.JoinStatus, Resp: true, Size: 3, Joined: []byte{0}}).JoinedRanks(); got != nil {
		t.Errorf("JoinedRanks of none = %v", got)
	}
}

// TestTruncated parses every proper prefix of every sample, and every
// sample with bytes appended: all must be malformed, never accepted.
func TestTruncated(t *testing.T) {
	var m ctrl.Msg
	for _, s := range ctrltest.Samples() {
		b, err := ctrl.Append(nil, &s.Msg)
		if err != nil {
			t.Fatal(err)
		}
		for n := 0; n < len(b); n++ {
			err := ctrl.Parse(b[:n], &m)
			if !errors.Is(err, ctrl.ErrMalformed) {
				t.Fatalf("%s cut to %d of %d bytes: err %v, want ErrMalformed", s.Name, n, len(b), err)
			}
		}
		for _, extra := range [][]byte{{0}, {1, 2, 3}} {
			err := ctrl.Parse(append(bytes.Clone(b), extra...), &m)
			if !errors.Is(err, ctrl.ErrMalformed) {
				t.Fatalf("%s + %d trailing bytes: err %v, want ctrl.ErrMalformed", s.Name, len(extra), err)
			}
		}
	}
}

func TestEncodeBounds(t *testing.T) {
	long := strings.Repeat("n", ctrl.MaxName+1)
	v4 := ctrl.MemberInfo{ID: 1, Addr: netip.MustParseAddrPort("10.0.0.1:1")}
	cases := []struct {
		name string
		m    ctrl.Msg
	}{
		{"type 0", ctrl.Msg{}},
		{"type 12", ctrl.Msg{Type: 12}},
		{"poolnode key 0", ctrl.Msg{Type: ctrl.PoolNode, Capacity: 1}},
		{"poolnode key 0", ctrl.Msg{Type: ctrl.PoolNode, Capacity: 1}},
		{"pool size 0", ctrl.Msg{Type: ctrl.PoolCreate, Pool: ctrl.PoolSpec{Stripe: 64, Replicas: 1, Perm: 1}}},
		{"pool size 2^48+1", ctrl.Msg{Type: ctrl.PoolCreate, Pool: ctrl.PoolSpec{Size: poolmap.MaxRegionSize + 1, Stripe: 64, Replicas: 1, Perm: 1}}},
		{"pool stripe 32", ctrl.Msg{Type: ctrl.PoolCreate, Pool: ctrl.PoolSpec{Size: 1, Stripe: 32, Replicas: 1, Perm: 1}}},
		{"pool stripe 100", ctrl.Msg{Type: ctrl.PoolCreate, Pool: ctrl.PoolSpec{Size: 1, Stripe: 100, Replicas: 1, Perm: 1}}},
		{"pool columns 257", ctrl.Msg{Type: ctrl.PoolCreate, Pool: ctrl.PoolSpec{Size: 1, Stripe: 64, Columns: 257, Replicas: 1, Perm: 1}}},
		{"pool columns 0 in a response", ctrl.Msg{Type: ctrl.PoolOpen, Resp: true, Pool: ctrl.PoolSpec{Size: 1, Stripe: 64, Replicas: 1, Perm: 1}}},
		{"pool replicas 3", ctrl.Msg{Type: ctrl.PoolCreate, Pool: ctrl.PoolSpec{Size: 1, Stripe: 64, Replicas: 3, Perm: 1}}},
		{"pool perm 0", ctrl.Msg{Type: ctrl.PoolCreate, Pool: ctrl.PoolSpec{Size: 1, Stripe: 64, Replicas: 1}}},
		{"pool perm 0x10", ctrl.Msg{Type: ctrl.PoolCreate, Pool: ctrl.PoolSpec{Size: 1, Stripe: 64, Replicas: 1, Perm: 0x10}}},
		{"pool nodes 1025", ctrl.Msg{Type: ctrl.PoolStat, Resp: true, PoolNodes: make([]ctrl.PoolNodeInfo, ctrl.MaxPoolNodes+1)}},
		{"pool node invalid addr", ctrl.Msg{Type: ctrl.PoolStat, Resp: true, PoolNodes: []ctrl.PoolNodeInfo{{ID: 1}}}},
		{"pool node name too long", ctrl.Msg{Type: ctrl.PoolStat, Resp: true, PoolNodes: []ctrl.PoolNodeInfo{{ID: 1, Addr: netip.MustParseAddrPort("10.0.0.9:4791"), Name: strings.Repeat("m", ctrl.MaxName+1)}}}},
		{"pool report key not its digest's", ctrl.Msg{Type: ctrl.PoolReport, Reports: []ctrl.GrantReport{{Region: 9, Column: 0, Pool: ctrl.PoolSpec{Size: 4096, Stripe: 4096, Columns: 1, Replicas: 1, Perm: 3},
			Length: 4096, Digest: ctrl.PoolKeyDigest(9, 77), Key: 78, Homes: []ctrl.PoolHome{{Addr: netip.MustParseAddrPort("10.0.0.3:4791")}}}}}},
		{"pool rebuild fences out of order", ctrl.Msg{Type: ctrl.PoolRebuild, Region: 9, Key: 77, Length: 4096, Pool: ctrl.PoolSpec{Size: 4096, Stripe: 4096, Columns: 1, Replicas: 1, Perm: 3},
			Homes: []ctrl.PoolHome{{Addr: netip.MustParseAddrPort("10.0.0.3:4791")}}, Fences: []wire.Fence{{ID: 2, Token: 1}, {ID: 2, Token: 3}}}},
		{"pool rebuild fence token 0", ctrl.Msg{Type: ctrl.PoolRebuild, Region: 9, Key: 77, Length: 4096, Pool: ctrl.PoolSpec{Size: 4096, Stripe: 4096, Columns: 1, Replicas: 1, Perm: 3},
			Homes: []ctrl.PoolHome{{Addr: netip.MustParseAddrPort("10.0.0.3:4791")}}, Fences: []wire.Fence{{ID: 2}}}},
		{"pool rebuild fences 1025", ctrl.Msg{Type: ctrl.PoolRebuild, Region: 9, Key: 77, Length: 4096, Pool: ctrl.PoolSpec{Size: 4096, Stripe: 4096, Columns: 1, Replicas: 1, Perm: 3},
			Homes: []ctrl.PoolHome{{Addr: netip.MustParseAddrPort("10.0.0.3:4791")}}, Fences: make([]wire.Fence, wire.MaxFences+1)}},
		{"pool regions 4097", ctrl.Msg{Type: ctrl.PoolStat, Resp: true, PoolRegions: make([]ctrl.PoolSpec, ctrl.MaxPoolRegions+1)}},
		{"job too long", ctrl.Msg{Type: ctrl.Join, MTU: 9000, Job: long, Size: 1, Rank: 0}},
		{"job empty", ctrl.Msg{Type: ctrl.Join, MTU: 9000, Size: 1, Rank: 0}},
		{"size 0", ctrl.Msg{Type: ctrl.Join, MTU: 9000, Job: "j", Size: 0, Rank: ctrl.RankAny}},
		{"size 4097", ctrl.Msg{Type: ctrl.Join, MTU: 9000, Job: "j", Size: ctrl.MaxSize + 1, Rank: ctrl.RankAny}},
		{"size negative", ctrl.Msg{Type: ctrl.Join, MTU: 9000, Job: "j", Size: -1, Rank: ctrl.RankAny}},
		{"rank -2", ctrl.Msg{Type: ctrl.Join, MTU: 9000, Job: "j", Size: 4, Rank: -2}},
		{"rank = size", ctrl.Msg{Type: ctrl.Join, MTU: 9000, Job: "j", Size: 4, Rank: 4}},
		{"members 4097", ctrl.Msg{Type: ctrl.Join, Resp: true, Members: make([]ctrl.MemberInfo, ctrl.MaxMembers+1)}},
		{"member invalid addr", ctrl.Msg{Type: ctrl.Lookup, Resp: true, Members: []ctrl.MemberInfo{v4, {ID: 2}}}},
		{"member zone", ctrl.Msg{Type: ctrl.Join, Resp: true, Members: []ctrl.MemberInfo{
			{ID: 2, Addr: netip.MustParseAddrPort("[fe80::1%eth0]:5")}}}},
		{"dead 4097", ctrl.Msg{Type: ctrl.Heartbeat, Resp: true, Dead: make([]uint16, ctrl.MaxMembers+1)}},
		{"service too long", ctrl.Msg{Type: ctrl.Register, MTU: 9000, Service: long, Size: 1, Rank: ctrl.RankAny}},
		{"service empty", ctrl.Msg{Type: ctrl.Register, MTU: 9000, Size: 1, Rank: ctrl.RankAny}},
		{"lookup service empty", ctrl.Msg{Type: ctrl.Lookup, MTU: 9000}},
		{"lookup service too long", ctrl.Msg{Type: ctrl.Lookup, MTU: 9000, Service: long}},
		{"register size 0", ctrl.Msg{Type: ctrl.Register, MTU: 9000, Service: "s", Size: 0, Rank: ctrl.RankAny}},
		{"register size 4097", ctrl.Msg{Type: ctrl.Register, MTU: 9000, Service: "s", Size: ctrl.MaxSize + 1, Rank: ctrl.RankAny}},
		{"register size negative", ctrl.Msg{Type: ctrl.Register, MTU: 9000, Service: "s", Size: -1, Rank: ctrl.RankAny}},
		{"register size 65535", ctrl.Msg{Type: ctrl.Register, MTU: 9000, Service: "s", Size: 0xFFFF, Rank: ctrl.RankAny}},
		{"join mtu 0", ctrl.Msg{Type: ctrl.Join, Job: "j", Size: 1, Rank: 0}},
		{"join mtu below minimum", ctrl.Msg{Type: ctrl.Join, MTU: ctrl.MinMTU - 1, Job: "j", Size: 1, Rank: 0}},
		{"join mtu above maximum", ctrl.Msg{Type: ctrl.Join, MTU: ctrl.MaxMTU + 1, Job: "j", Size: 1, Rank: 0}},
		{"register mtu 0", ctrl.Msg{Type: ctrl.Register, Service: "s", Size: 1, Rank: ctrl.RankAny}},
		{"lookup mtu 65536", ctrl.Msg{Type: ctrl.Lookup, MTU: 65536, Service: "s"}},
		{"register rank = size", ctrl.Msg{Type: ctrl.Register, MTU: 9000, Service: "s", Size: 4, Rank: 4}},
		{"register rank > size", ctrl.Msg{Type: ctrl.Register, MTU: 9000, Service: "s", Size: 4, Rank: 100}},
		{"register rank 4096", ctrl.Msg{Type: ctrl.Register, MTU: 9000, Service: "s", Size: ctrl.MaxSize, Rank: ctrl.MaxSize}},
		{"register rank 0xFFFF", ctrl.Msg{Type: ctrl.Register, MTU: 9000, Service: "s", Size: ctrl.MaxSize, Rank: 0xFFFF}},
		{"register rank -2", ctrl.Msg{Type: ctrl.Register, MTU: 9000, Service: "s", Size: 4, Rank: -2}},
		{"ranges 4097", ctrl.Msg{Type: ctrl.Register, MTU: 9000, Service: "s", Size: 1, Ranges: make([]ctrl.Range, ctrl.MaxRanges+1)}},
		{"replicas 9", ctrl.Msg{Type: ctrl.Register, MTU: 9000, Service: "s", Size: 1, Ranges: []ctrl.Range{
			{}, {Replicas: make([]int32, ctrl.MaxReplicas+1)}}}},
		{"joinstatus job empty", ctrl.Msg{Type: ctrl.JoinStatus}},
		{"joinstatus job too long", ctrl.Msg{Type: ctrl.JoinStatus, Job: long}},
		{"joinstatus size 4097", ctrl.Msg{Type: ctrl.JoinStatus, Resp: true, Size: ctrl.MaxSize + 1, Joined: make([]byte, (ctrl.MaxSize+8)/8)}},
		{"joinstatus size negative", ctrl.Msg{Type: ctrl.JoinStatus, Resp: true, Size: -1}},
		{"joinstatus set too short", ctrl.Msg{Type: ctrl.JoinStatus, Resp: true, Size: 9, Joined: []byte{1}}},
		{"joinstatus set too long", ctrl.Msg{Type: ctrl.JoinStatus, Resp: true, Size: 8, Joined: []byte{1, 0}}},
		{"joinstatus rank past size", ctrl.Msg{Type: ctrl.JoinStatus, Resp: true, Size: 3, Joined: []byte{0b1000}}},
	}
	for _, c := range cases {
		dst := []byte("keep")
		b, err := ctrl.Append(dst, &c.m)
		if !errors.Is(err, ctrl.ErrMalformed) {
			t.Errorf("%s: err %v, want ctrl.ErrMalformed", c.name, err)
		}
		if string(b) != "keep" {
			t.Errorf("%s: dst changed to %q", c.name, b)
		}
	}
	// The limits themselves are accepted.
	ok := []ctrl.Msg{
		{Type: ctrl.Join, Resp: true, Members: make([]ctrl.MemberInfo, ctrl.MaxMembers)},
		{Type: ctrl.Heartbeat, Resp: true, Dead: make([]uint16, ctrl.MaxMembers)},
		{Type: ctrl.Register, MTU: ctrl.MaxMTU, Service: "s", Size: ctrl.MaxSize, Rank: ctrl.MaxSize - 1, Ranges: make([]ctrl.Range, ctrl.MaxRanges)},
		{Type: ctrl.Register, MTU: ctrl.MinMTU, Service: "s", Size: 1, Rank: 0},
		{Type: ctrl.Register, MTU: 9000, Service: "s", Size: 1, Rank: ctrl.RankAny},
	}
	for i := range ok[0].Members {
		ok[0].Members[i] = ctrl.MemberInfo{ID: uint16(i), Addr: netip.AddrPortFrom(netip.IPv6Loopback(), uint16(i))}
	}
	for i := range ok[2].Ranges {
		ok[2].Ranges[i].Replicas = make([]int32, ctrl.MaxReplicas)
	}
	for _, m := range ok {
		b, err := ctrl.Append(nil, &m)
		if err != nil {
			t.Fatalf("%v at the limit: %v", m.Type, err)
		}
		var got ctrl.Msg
		if err := ctrl.Parse(b, &got); err != nil || !ctrltest.Equal(got, m) {
			t.Fatalf("%v at the limit: err %v or decode differs", m.Type, err)
		}
	}
}

// ctrlBody builds a message body from bytes and integers: byte, uint16,
// uint32 and uint64 values are appended big-endian, strings and []byte as
// they are.
func ctrlBody(parts ...any) []byte {
	var b []byte
	be := binary.BigEndian
	for _, p := range parts {
		switch v := p.(type) {
		case byte:
			b = append(b, v)
		case uint16:
			b = be.AppendUint16(b, v)
		case uint32:
			b = be.AppendUint32(b, v)
		case uint64:
			b = be.AppendUint64(b, v)
		case string:
			b = append(b, v...)
		case []byte:
			b = append(b, v...)
		default:
			panic("ctrlBody: unsupported part")
		}
	}
	return b
}

func TestDecodeBounds(t *testing.T) {
	const req, resp = byte(0), byte(1)
	name65 := strings.Repeat("n", 65)
	member4 := ctrlBody(uint16(1), byte(4), "\x0a\x00\x00\x01", uint16(80))
	range0 := ctrlBody(uint64(0), uint64(1), uint32(0), byte(0))
	cases := []struct {
		name string
		body []byte
	}{
		{"empty", nil},
		{"type only", ctrlBody(byte(ctrl.Leave))},
		{"type 0", ctrlBody(byte(0), req)},
		{"type 12", ctrlBody(byte(12), req)},
		{"poolnode key 0", ctrlBody(byte(ctrl.PoolNode), req, uint64(0), uint64(1))},
		{"poolcreate stripe 100", ctrlBody(byte(ctrl.PoolCreate), req, uint64(1), uint64(100), uint16(0), byte(1), byte(1))},
		{"poolcreate truncated", ctrlBody(byte(ctrl.PoolCreate), req, uint64(1), uint64(64))},
		{"poolstat alive 2", ctrlBody(byte(ctrl.PoolStat), resp, uint16(1), member4, uint64(1), uint64(0), byte(2), uint16(0))},
		{"poolstat nodes past end", ctrlBody(byte(ctrl.PoolStat), resp, uint16(3), member4, uint64(1), uint64(0), byte(1), uint16(0))},
		{"poolstat region columns 0", ctrlBody(byte(ctrl.PoolStat), resp, uint16(0), uint16(1), uint32(1), uint64(1), uint64(64), uint16(0), byte(1), byte(1))},
		{"type 255", ctrlBody(byte(255), resp)},
		{"joinstatus job empty", ctrlBody(byte(ctrl.JoinStatus), req, byte(0))},
		{"joinstatus size 4097", ctrlBody(byte(ctrl.JoinStatus), resp, uint16(4097), string(make([]byte, 513)))},
		{"joinstatus set truncated", ctrlBody(byte(ctrl.JoinStatus), resp, uint16(9), byte(1))},
		{"joinstatus set too long", ctrlBody(byte(ctrl.JoinStatus), resp, uint16(8), byte(1), byte(0))},
		{"joinstatus rank past size", ctrlBody(byte(ctrl.JoinStatus), resp, uint16(3), byte(0b1000))},
		{"flag bit 1", ctrlBody(byte(ctrl.Leave), byte(2), uint32(1), uint16(1))},
		{"flag bit 7", ctrlBody(byte(ctrl.Leave), byte(0x81))},
		{"job 65 bytes", ctrlBody(byte(ctrl.Join), req, byte(65), name65, uint16(1), uint16(0))},
		{"job empty", ctrlBody(byte(ctrl.Join), req, byte(0), uint16(1), uint16(0))},
		{"job length past end", ctrlBody(byte(ctrl.Join), req, byte(10), "abc")},
		{"size 0", ctrlBody(byte(ctrl.Join), req, byte(1), "j", uint16(0), uint16(0xFFFF))},
		{"size 4097", ctrlBody(byte(ctrl.Join), req, byte(1), "j", uint16(4097), uint16(0xFFFF))},
		{"rank = size", ctrlBody(byte(ctrl.Join), req, byte(1), "j", uint16(4), uint16(4))},
		{"rank 0xFFFE", ctrlBody(byte(ctrl.Join), req, byte(1), "j", uint16(4096), uint16(0xFFFE))},
		{"members 4097", ctrlBody(byte(ctrl.Join), resp, uint32(1), uint16(2), uint64(3), uint16(4097),
			bytes.Repeat(member4, 4097))},
		{"members count past end", ctrlBody(byte(ctrl.Lookup), resp, uint32(1), uint16(2), member4)},
		{"member family 0", ctrlBody(byte(ctrl.Lookup), resp, uint32(1), uint16(1), uint16(1), byte(0),
			"\x0a\x00\x00\x01", uint16(80))},
		{"member family 5", ctrlBody(byte(ctrl.Lookup), resp, uint32(1), uint16(1), uint16(1), byte(5),
			"\x0a\x00\x00\x01", uint16(80))},
		{"member v6 short", ctrlBody(byte(ctrl.Lookup), resp, uint32(1), uint16(1), uint16(1), byte(6),
			"\x0a\x00\x00\x01", uint16(80))},
		{"dead 4097", ctrlBody(byte(ctrl.Heartbeat), resp, uint64(1), uint16(4097), make([]byte, 2*4097))},
		{"dead past end", ctrlBody(byte(ctrl.Heartbeat), resp, uint64(1), uint16(3), uint16(1), uint16(2))},
		{"service 65 bytes", ctrlBody(byte(ctrl.Lookup), req, byte(65), name65)},
		{"service empty", ctrlBody(byte(ctrl.Lookup), req, byte(0))},
		{"register size 0", ctrlBody(byte(ctrl.Register), req, byte(1), "s", byte(0), uint16(0), uint16(0xFFFF), uint16(0))},
		{"register size 4097", ctrlBody(byte(ctrl.Register), req, byte(1), "s", byte(0), uint16(4097), uint16(0xFFFF), uint16(0))},
		{"register size 0xFFFF", ctrlBody(byte(ctrl.Register), req, byte(1), "s", byte(0), uint16(0xFFFF), uint16(0xFFFF), uint16(0))},
		{"register size past end", ctrlBody(byte(ctrl.Register), req, byte(1), "s", byte(0), byte(1))},
		{"register rank = size", ctrlBody(byte(ctrl.Register), req, byte(1), "s", byte(0), uint16(4), uint16(4), uint16(0))},
		{"register rank > size", ctrlBody(byte(ctrl.Register), req, byte(1), "s", byte(0), uint16(1), uint16(2), uint16(0))},
		{"register rank 4096", ctrlBody(byte(ctrl.Register), req, byte(1), "s", byte(0), uint16(4096), uint16(4096), uint16(0))},
		{"register rank 0xFFFE", ctrlBody(byte(ctrl.Register), req, byte(1), "s", byte(0), uint16(4096), uint16(0xFFFE), uint16(0))},
		{"register pre-size layout", ctrlBody(byte(ctrl.Register), req, byte(1), "s", byte(0), uint16(0), uint16(0))},
		{"ranges 4097", ctrlBody(byte(ctrl.Register), req, byte(1), "s", byte(0), uint16(1), uint16(0xFFFF), uint16(4097),
			bytes.Repeat(range0, 4097))},
		{"ranges count past end", ctrlBody(byte(ctrl.Register), req, byte(1), "s", byte(0), uint16(1), uint16(0), uint16(2), range0)},
		{"replicas 9", ctrlBody(byte(ctrl.Register), req, byte(1), "s", byte(0), uint16(1), uint16(0xFFFF), uint16(1),
			uint64(0), uint64(1), uint32(0), byte(9), make([]byte, 4*9))},
		{"replicas past end", ctrlBody(byte(ctrl.Register), req, byte(1), "s", byte(0), uint16(1), uint16(0xFFFF), uint16(1),
			uint64(0), uint64(1), uint32(0), byte(2), uint32(1))},
		{"join mtu missing", ctrlBody(byte(ctrl.Join), req, byte(1), "j", uint16(4), uint16(0))},
		{"join mtu 0", ctrlBody(byte(ctrl.Join), req, byte(1), "j", uint16(4), uint16(0), uint16(0))},
		{"join mtu 159", ctrlBody(byte(ctrl.Join), req, byte(1), "j", uint16(4), uint16(0), uint16(ctrl.MinMTU-1))},
		{"join mtu 65508", ctrlBody(byte(ctrl.Join), req, byte(1), "j", uint16(4), uint16(0), uint16(ctrl.MaxMTU+1))},
		{"join trailing after mtu", ctrlBody(byte(ctrl.Join), req, byte(1), "j", uint16(4), uint16(0), uint16(9000), byte(0))},
		{"register mtu 0", ctrlBody(byte(ctrl.Register), req, byte(1), "s", byte(0), uint16(1), uint16(0), uint16(0), uint16(0))},
		{"lookup mtu missing", ctrlBody(byte(ctrl.Lookup), req, byte(2), "kv")},
		{"lookup mtu 65535", ctrlBody(byte(ctrl.Lookup), req, byte(2), "kv", uint16(0xFFFF))},
		{"leave resp with fields", ctrlBody(byte(ctrl.Leave), resp, uint32(1))},
		{"destroy trailing", ctrlBody(byte(ctrl.Destroy), req, uint32(1), byte(0))},
	}
	for _, c := range cases {
		var m ctrl.Msg
		err := ctrl.Parse(c.body, &m)
		if !errors.Is(err, ctrl.ErrMalformed) {
			t.Errorf("%s: err %v, want ctrl.ErrMalformed", c.name, err)
		}
	}
	// The same bodies at the limits parse.
	good := [][]byte{
		ctrlBody(byte(ctrl.Join), req, byte(64), name65[:64], uint16(4096), uint16(4095), uint16(9000)),
		ctrlBody(byte(ctrl.Join), resp, uint32(1), uint16(2), uint64(3), uint16(4096), bytes.Repeat(member4, 4096)),
		ctrlBody(byte(ctrl.Heartbeat), resp, uint64(1), uint16(4096), make([]byte, 2*4096)),
		ctrlBody(byte(ctrl.Register), req, byte(1), "s", byte(0), uint16(4096), uint16(4095), uint16(4096), bytes.Repeat(range0, 4096), uint16(ctrl.MaxMTU)),
		ctrlBody(byte(ctrl.Register), req, byte(1), "s", byte(0), uint16(1), uint16(0xFFFF), uint16(1),
			uint64(0), uint64(1), uint32(0), byte(8), make([]byte, 4*8), uint16(ctrl.MinMTU)),
		ctrlBody(byte(ctrl.Register), req, byte(64), name65[:64], byte(0xFF), uint16(1), uint16(0), uint16(0), uint16(1500)),
		ctrlBody(byte(ctrl.Lookup), req, byte(2), "kv", uint16(9000)),
	}
	for i, body := range good {
		var m ctrl.Msg
		if err := ctrl.Parse(body, &m); err != nil {
			t.Errorf("good body %d: %v", i, err)
		}
	}
}

// TestParseAllocs checks that parsing into a reused ctrl.Msg allocates
// nothing once its slices have grown.
func TestParseAllocs(t *testing.T) {
	for _, m := range []ctrl.Msg{
		{Type: ctrl.Heartbeat, Resp: true, Epoch: 3, Dead: []uint16{1, 2, 3, 4}},
		{Type: ctrl.Join, Resp: true, Group: 1, Member: 2, Epoch: 3, Members: ctrltest.Members()},
		{Type: ctrl.Lookup, MTU: 9000, Service: "kv"},
		{Type: ctrl.Register, MTU: 9000, Service: "kv", Size: 3, Rank: ctrl.RankAny, Ranges: []ctrl.Range{{End: 9, Replicas: []int32{1, 2}}}},
		{Type: ctrl.Register, Resp: true, Group: 1, Member: 2},
	} {
		b, err := ctrl.Append(nil, &m)
		if err != nil {
			t.Fatal(err)
		}
		var got ctrl.Msg
		if err := ctrl.Parse(b, &got); err != nil {
			t.Fatal(err)
		}
		allocs := testing.AllocsPerRun(100, func() {
			if err := ctrl.Parse(b, &got); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("Parse %v resp=%v: %v allocs per run, want 0", m.Type, m.Resp, allocs)
		}
	}
}

func TestAppendAllocs(t *testing.T) {
	m := ctrl.Msg{Type: ctrl.Heartbeat, Group: 1, Member: 2}
	buf := make([]byte, 0, 64)
	if _, err := ctrl.Append(buf, &m); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := ctrl.Append(buf[:0], &m); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Append into a large enough buffer: %v allocs per run, want 0", allocs)
	}
}

func TestTypeString(t *testing.T) {
	want := map[ctrl.Type]string{
		0: "ctrl(0)", ctrl.Join: "join", ctrl.Leave: "leave", ctrl.Destroy: "destroy",
		ctrl.Heartbeat: "heartbeat", ctrl.Register: "register", ctrl.Lookup: "lookup", ctrl.PoolNode: "poolnode",
		ctrl.PoolStat: "poolstat", ctrl.PoolGrant: "poolgrant", ctrl.PoolRevoke: "poolrevoke", ctrl.PoolRebuilt: "poolrebuilt", ctrl.JoinStatus: "joinstatus", 255: "ctrl(255)",
	}
	for typ, s := range want {
		if got := typ.String(); got != s {
			t.Errorf("Type(%d).String() = %q, want %q", uint8(typ), got, s)
		}
	}
}

// FuzzCtrl checks that Parse never panics, fails only with ErrMalformed,
// and that whatever it accepts re-encodes to the same bytes. The input is
// a message without its tag (what secure.ParseCtrl hands Parse once the
// tag checks), so that the field decoder itself is fuzzed.
func FuzzCtrl(f *testing.F) {
	for _, s := range ctrltest.Samples() {
		b, err := ctrl.Append(nil, &s.Msg)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	// reused keeps its state from one input to the next (inputs run one
	// at a time in a worker) and starts filled by a large message, so
	// decoding into it exercises the reuse of slices and names.
	var reused ctrl.Msg
	big := ctrl.Msg{Type: ctrl.Register, MTU: 9000, Service: "kv", Size: 2, Rank: 1, Ranges: []ctrl.Range{
		{End: 1, Replicas: []int32{1, 2, 3}}, {Owner: 2, Replicas: []int32{4}},
	}}
	bb, err := ctrl.Append(nil, &big)
	if err != nil {
		f.Fatal(err)
	}
	if err := ctrl.Parse(bb, &reused); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m ctrl.Msg
		err := ctrl.Parse(b, &m)
		if err != nil {
			if !errors.Is(err, ctrl.ErrMalformed) {
				t.Fatalf("unexpected error class: %v", err)
			}
			return
		}
		out, err := ctrl.Append(nil, &m)
		if err != nil {
			t.Fatalf("accepted message does not re-encode: %v", err)
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("re-encode differs:\n got % x\nwant % x", out, b)
		}
		if err := ctrl.Parse(b, &reused); err != nil || !ctrltest.Equal(reused, m) {
			t.Fatalf("decode into a used Msg differs (err %v)", err)
		}
	})
}

// TestMTULimits: the MTU a Join, Register or Lookup may carry is what a
// transport accepts as its MTU.
func TestMTULimits(t *testing.T) {
	if ctrl.MinMTU != transport.MinMTU || ctrl.MaxMTU != transport.MaxMTU {
		t.Errorf("ctrl MTU %d..%d, transport MTU %d..%d", ctrl.MinMTU, ctrl.MaxMTU, transport.MinMTU, transport.MaxMTU)
	}
}
