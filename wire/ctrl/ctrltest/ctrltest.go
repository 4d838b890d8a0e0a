// Package ctrltest holds sample control messages for the tests of the
// control codec (package wire/ctrl) and of the layers that seal it
// (package secure): one request and one response of every type.
package ctrltest

import (
	"bytes"
	"net/netip"
	"reflect"
	"strings"

	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
	"github.com/ndma/ndma/wire/poolmap"
)

// Members is a member table with IPv4, IPv6 and IPv4-mapped addresses
// and extreme ids and ports.
func Members() []ctrl.MemberInfo {
	return []ctrl.MemberInfo{
		{ID: 0, Addr: netip.MustParseAddrPort("10.0.0.1:4791")},
		{ID: 1, Addr: netip.MustParseAddrPort("[2001:db8::7]:65535")},
		{ID: 2, Addr: netip.MustParseAddrPort("[::ffff:192.0.2.9]:1")},
		{ID: 0xFFFE, Addr: netip.MustParseAddrPort("255.255.255.255:0")},
	}
}

type Sample struct {
	Name string
	Msg  ctrl.Msg
}

// Samples is one request and one response of every type, with limits
// and edge values (every field at its bounds somewhere).
func Samples() []Sample {
	return []Sample{
		{"join-req", ctrl.Msg{Type: ctrl.Join, MTU: 9000, Job: "train-42", Size: 8, Rank: 3}},
		{"join-req-any", ctrl.Msg{Type: ctrl.Join, MTU: ctrl.MaxMTU, Job: strings.Repeat("j", ctrl.MaxName), Size: ctrl.MaxSize, Rank: ctrl.RankAny}},
		{"join-req-last", ctrl.Msg{Type: ctrl.Join, MTU: ctrl.MinMTU, Job: "x", Size: ctrl.MaxSize, Rank: ctrl.MaxSize - 1}},
		{"join-resp", ctrl.Msg{Type: ctrl.Join, Resp: true, Group: 0xDEADBEEF, Member: 3, Epoch: 1<<63 + 5, Members: Members()}},
		{"join-resp-empty", ctrl.Msg{Type: ctrl.Join, Resp: true, Group: 1}},
		{"joinvia-req", ctrl.Msg{Type: ctrl.JoinVia, MTU: 9000, Job: "train-42", Size: 8, Rank: 3,
			Members: []ctrl.MemberInfo{{ID: 3, Addr: netip.MustParseAddrPort("10.0.1.7:7400")}}}},
		{"joinvia-req-any", ctrl.Msg{Type: ctrl.JoinVia, MTU: ctrl.MinMTU, Job: "x", Size: ctrl.MaxSize, Rank: ctrl.RankAny,
			Members: []ctrl.MemberInfo{{ID: 0xffff, Addr: netip.MustParseAddrPort("[fd00::9]:65535")}}}},
		{"joinvia-resp", ctrl.Msg{Type: ctrl.JoinVia, Resp: true, Group: 0x7fffffff, Member: 5, Epoch: 2, Members: Members()}},
		{"leave-req", ctrl.Msg{Type: ctrl.Leave, Group: 7, Member: 2}},
		{"membergone-req", ctrl.Msg{Type: ctrl.MemberGone, Group: 1 << 31, Member: ctrl.MaxSize - 1}},
		{"membergone-resp", ctrl.Msg{Type: ctrl.MemberGone, Resp: true}},
		{"leave-resp", ctrl.Msg{Type: ctrl.Leave, Resp: true}},
		{"destroy-req", ctrl.Msg{Type: ctrl.Destroy, Group: 9}},
		{"destroy-resp", ctrl.Msg{Type: ctrl.Destroy, Resp: true}},
		{"heartbeat-req", ctrl.Msg{Type: ctrl.Heartbeat, Group: 7, Member: 0xFFFF}},
		{"heartbeat-resp", ctrl.Msg{Type: ctrl.Heartbeat, Resp: true, Epoch: 12, Dead: []uint16{1, 5, 0xFFFF}}},
		{"heartbeat-resp-none", ctrl.Msg{Type: ctrl.Heartbeat, Resp: true, Epoch: 13}},
		{"register-req", ctrl.Msg{Type: ctrl.Register, MTU: 9000, Service: "kv", Policy: 2, Size: 4, Rank: 1, Ranges: []ctrl.Range{
			{Start: 0, End: 1 << 62, Owner: 1, Replicas: []int32{2, 3}},
			{Start: 1 << 62, End: ^uint64(0), Owner: -1},
			{Start: 5, End: 6, Owner: 0x7FFFFFFF, Replicas: []int32{0, 1, 2, 3, 4, 5, 6, -7}},
		}}},
		{"register-req-any", ctrl.Msg{Type: ctrl.Register, MTU: 9000, Service: "cache", Policy: 0, Size: 1, Rank: ctrl.RankAny}},
		{"register-req-last", ctrl.Msg{Type: ctrl.Register, MTU: 9000, Service: strings.Repeat("s", ctrl.MaxName), Policy: 0xFF,
			Size: ctrl.MaxSize, Rank: ctrl.MaxSize - 1, Ranges: []ctrl.Range{{Owner: ctrl.MaxSize - 1}}}},
		{"register-resp", ctrl.Msg{Type: ctrl.Register, Resp: true, Group: 0x10000, Member: 4}},
		{"lookup-req", ctrl.Msg{Type: ctrl.Lookup, MTU: 9000, Service: "kv"}},
		{"lookup-resp", ctrl.Msg{Type: ctrl.Lookup, Resp: true, Group: 0x10000, Members: Members()[:2]}},
		{"poolnode-req", ctrl.Msg{Type: ctrl.PoolNode, Key: 0x1234_5678_9abc_def0, Capacity: 64 << 20}},
		{"poolnode-req-kept", ctrl.Msg{Type: ctrl.PoolNode, Key: 0x1234_5678_9abc_def0, Capacity: 64 << 20, Epoch: 7, Kept: true}},
		{"poolnode-resp", ctrl.Msg{Type: ctrl.PoolNode, Resp: true, Node: 3, Epoch: 0xfeed}},
		{"poolcreate-req", ctrl.Msg{Type: ctrl.PoolCreate, Pool: ctrl.PoolSpec{Size: 1 << 30, Stripe: 64 << 10, Columns: 0, Replicas: 2, Perm: 0x0f}}},
		{"poolcreate-req-max", ctrl.Msg{Type: ctrl.PoolCreate, Pool: ctrl.PoolSpec{Size: poolmap.MaxRegionSize, Stripe: poolmap.MaxStripe, Columns: poolmap.MaxColumns, Replicas: 1, Perm: 1}}},
		{"poolcreate-resp", ctrl.Msg{Type: ctrl.PoolCreate, Resp: true, Region: 9, Key: ^uint64(0),
			Pool: ctrl.PoolSpec{Size: 1, Stripe: poolmap.MinStripe, Columns: 1, Replicas: 1, Perm: 3}}},
		{"poolopen-req", ctrl.Msg{Type: ctrl.PoolOpen, Region: 9, Key: 77}},
		{"poolopen-resp", ctrl.Msg{Type: ctrl.PoolOpen, Resp: true, Pool: ctrl.PoolSpec{Size: 4096, Stripe: 4096, Columns: 2, Replicas: 2, Perm: 1}}},
		{"poolfree-req", ctrl.Msg{Type: ctrl.PoolFree, Region: 9, Key: 77}},
		{"poolfree-resp", ctrl.Msg{Type: ctrl.PoolFree, Resp: true}},
		{"poolgrant-req", ctrl.Msg{Type: ctrl.PoolGrant, Region: 9, Key: 77, Node: 1, Epoch: 3, Base: 1 << 40, Length: 64 << 10,
			Pool:  ctrl.PoolSpec{Size: 1 << 20, Stripe: 64 << 10, Columns: 2, Replicas: 2, Perm: 0x03},
			Homes: []ctrl.PoolHome{{Addr: netip.MustParseAddrPort("10.0.0.2:4791"), Base: 4096}, {Addr: netip.MustParseAddrPort("[2001:db8::7]:4791"), Base: 1 << 40}}}},
		{"poolepoch-req", ctrl.Msg{Type: ctrl.PoolEpoch, Region: 9, Key: 77, Epoch: 4}},
		{"poolepoch-resp", ctrl.Msg{Type: ctrl.PoolEpoch, Resp: true}},
		{"poolreport-req", ctrl.Msg{Type: ctrl.PoolReport, Final: true, Reports: []ctrl.GrantReport{
			{Region: 9, Column: 1, Pool: ctrl.PoolSpec{Size: 1 << 20, Stripe: 64 << 10, Columns: 2, Replicas: 2, Perm: 0x03},
				Base: 1 << 40, Length: 1 << 20, Epoch: 3, Digest: ctrl.PoolKeyDigest(9, 77), Key: 77, Degraded: true,
				Homes: []ctrl.PoolHome{{Addr: netip.MustParseAddrPort("10.0.0.2:4791"), Base: 4096}, {Addr: netip.MustParseAddrPort("[2001:db8::7]:4791"), Base: 1 << 40}}},
			{Region: 12, Column: 0, Pool: ctrl.PoolSpec{Size: 4096, Stripe: 4096, Columns: 1, Replicas: 1, Perm: 0x0f},
				Base: 0, Length: 4096, Epoch: 1, Rebuilding: true, Homes: []ctrl.PoolHome{{Addr: netip.MustParseAddrPort("10.0.0.3:4791")}},
				Fences: []wire.Fence{{ID: 0, Token: 1}, {ID: 7, Token: 5<<32 | 0xbeef}}},
		}}},
		{"poolreport-resp", ctrl.Msg{Type: ctrl.PoolReport, Resp: true}},
		{"poolgrant-resp", ctrl.Msg{Type: ctrl.PoolGrant, Resp: true}},
		{"poolrevoke-req", ctrl.Msg{Type: ctrl.PoolRevoke, Region: 9, Key: 77}},
		{"poolrevoke-resp", ctrl.Msg{Type: ctrl.PoolRevoke, Resp: true}},
		{"poolrebuild-req", ctrl.Msg{Type: ctrl.PoolRebuild, Region: 9, Key: 77, Node: 2, Base: 4096, Length: 1 << 20, Epoch: 2,
			Pool:   ctrl.PoolSpec{Size: 3 << 20, Stripe: 64 << 10, Columns: 3, Replicas: 2, Perm: 3},
			Homes:  []ctrl.PoolHome{{Addr: netip.MustParseAddrPort("10.0.0.2:4791")}, {Addr: netip.MustParseAddrPort("10.0.0.3:4791"), Base: 64}, {Addr: netip.MustParseAddrPort("10.0.0.4:4791"), Base: 4096}},
			Fences: []wire.Fence{{ID: 3, Token: ^uint64(0)}}}},
		{"poolrebuild-resp", ctrl.Msg{Type: ctrl.PoolRebuild, Resp: true}},
		{"poolrebuildgo-req", ctrl.Msg{Type: ctrl.PoolRebuildGo, Region: 9, Key: 77, Node: 2}},
		{"poolrebuilt-req", ctrl.Msg{Type: ctrl.PoolRebuilt, Region: 9, Key: 77, Node: 2}},
		{"poolrebuilt-failed-req", ctrl.Msg{Type: ctrl.PoolRebuilt, Region: 9, Key: 77, Node: 0, Failed: true}},
		{"poolrebuilt-resp", ctrl.Msg{Type: ctrl.PoolRebuilt, Resp: true}},
		{"poolcolumnlost-req", ctrl.Msg{Type: ctrl.PoolColumnLost, Region: 9, Key: 77, Node: 3}},
		{"poolcolumngrant-req", ctrl.Msg{Type: ctrl.PoolColumnGrant, Region: 9, Key: 77, Node: 5}},
		{"poolcolumnrestored-req", ctrl.Msg{Type: ctrl.PoolColumnRestored, Region: 9, Key: 77, Node: 0}},
		{"poolcolumnrestored-resp", ctrl.Msg{Type: ctrl.PoolColumnRestored, Resp: true}},
		{"poolstat-req", ctrl.Msg{Type: ctrl.PoolStat}},
		{"poolstat-resp", ctrl.Msg{Type: ctrl.PoolStat, Resp: true,
			PoolNodes: []ctrl.PoolNodeInfo{
				{ID: 0, Addr: netip.MustParseAddrPort("10.0.0.9:4791"), Capacity: 1 << 30, Used: 4096, Alive: true, Requests: 1 << 40, Bytes: ^uint64(0), Name: "memory-0"},
				{ID: 1, Addr: netip.MustParseAddrPort("[2001:db8::9]:4791"), Capacity: 1, Used: 0},
			},
			PoolRegions: []ctrl.PoolSpec{{Region: 1, Size: 100, Stripe: 64, Columns: 2, Replicas: 2, Perm: 0x0f, Lost: 1, Rebuilding: 1, Down: 1, Health: ctrl.HealthUnavailable}}, PoolRefused: 77}},
		{"poolstat-resp-empty", ctrl.Msg{Type: ctrl.PoolStat, Resp: true}},
		{"joinstatus-req", ctrl.Msg{Type: ctrl.JoinStatus, Job: "train-42"}},
		{"joinstatus-resp", ctrl.Msg{Type: ctrl.JoinStatus, Resp: true, Size: 11, Joined: []byte{0b1011_0101, 0b101}}},
		{"joinstatus-resp-max", ctrl.Msg{Type: ctrl.JoinStatus, Resp: true, Size: ctrl.MaxSize, Joined: bytes.Repeat([]byte{0xFF}, ctrl.MaxSize/8)}},
		{"joinstatus-resp-none", ctrl.Msg{Type: ctrl.JoinStatus, Resp: true}},
	}
}

// Normalize makes empty slices nil so that decoded messages compare
// equal to the literals above with reflect.DeepEqual.
func Normalize(m ctrl.Msg) ctrl.Msg {
	if len(m.Members) == 0 {
		m.Members = nil
	}
	if len(m.Dead) == 0 {
		m.Dead = nil
	}
	if len(m.Joined) == 0 {
		m.Joined = nil
	}
	if len(m.PoolNodes) == 0 {
		m.PoolNodes = nil
	}
	if len(m.Reports) == 0 {
		m.Reports = nil
	}
	if len(m.PoolRegions) == 0 {
		m.PoolRegions = nil
	}
	if len(m.Ranges) == 0 {
		m.Ranges = nil
	} else {
		rs := make([]ctrl.Range, len(m.Ranges))
		copy(rs, m.Ranges)
		for i := range rs {
			if len(rs[i].Replicas) == 0 {
				rs[i].Replicas = nil
			}
		}
		m.Ranges = rs
	}
	return m
}

// Equal reports whether a and b are the same message, empty and nil
// slices alike.
func Equal(a, b ctrl.Msg) bool {
	return reflect.DeepEqual(Normalize(a), Normalize(b))
}
