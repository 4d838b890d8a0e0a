package fabric

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/ndma/ndma/wire/poolmap"
)

var ctrlTestToken = []byte("fabric-test-token")

// ctrlSign appends the reference tag (computed here with crypto/hmac, not
// with the code under test) to a copy of body.
func ctrlSign(body, token []byte) []byte {
	h := hmac.New(sha256.New, token)
	h.Write(body)
	return append(bytes.Clone(body), h.Sum(nil)[:CtrlTagLen]...)
}

func ctrlTestMembers() []MemberInfo {
	return []MemberInfo{
		{ID: 0, Addr: netip.MustParseAddrPort("10.0.0.1:4791")},
		{ID: 1, Addr: netip.MustParseAddrPort("[2001:db8::7]:65535")},
		{ID: 2, Addr: netip.MustParseAddrPort("[::ffff:192.0.2.9]:1")},
		{ID: 0xFFFE, Addr: netip.MustParseAddrPort("255.255.255.255:0")},
	}
}

type ctrlSample struct {
	name string
	m    CtrlMsg
}

// ctrlSamples is one request and one response of every type.
func ctrlSamples() []ctrlSample {
	return []ctrlSample{
		{"join-req", CtrlMsg{Type: CtrlJoin, MTU: 9000, Job: "train-42", Size: 8, Rank: 3}},
		{"join-req-any", CtrlMsg{Type: CtrlJoin, MTU: CtrlMaxMTU, Job: strings.Repeat("j", CtrlMaxName), Size: CtrlMaxSize, Rank: CtrlRankAny}},
		{"join-req-last", CtrlMsg{Type: CtrlJoin, MTU: CtrlMinMTU, Job: "x", Size: CtrlMaxSize, Rank: CtrlMaxSize - 1}},
		{"join-resp", CtrlMsg{Type: CtrlJoin, Resp: true, Group: 0xDEADBEEF, Member: 3, Epoch: 1<<63 + 5, Members: ctrlTestMembers()}},
		{"join-resp-empty", CtrlMsg{Type: CtrlJoin, Resp: true, Group: 1}},
		{"leave-req", CtrlMsg{Type: CtrlLeave, Group: 7, Member: 2}},
		{"leave-resp", CtrlMsg{Type: CtrlLeave, Resp: true}},
		{"destroy-req", CtrlMsg{Type: CtrlDestroy, Group: 9}},
		{"destroy-resp", CtrlMsg{Type: CtrlDestroy, Resp: true}},
		{"heartbeat-req", CtrlMsg{Type: CtrlHeartbeat, Group: 7, Member: 0xFFFF}},
		{"heartbeat-resp", CtrlMsg{Type: CtrlHeartbeat, Resp: true, Epoch: 12, Dead: []uint16{1, 5, 0xFFFF}}},
		{"heartbeat-resp-none", CtrlMsg{Type: CtrlHeartbeat, Resp: true, Epoch: 13}},
		{"register-req", CtrlMsg{Type: CtrlRegister, MTU: 9000, Service: "kv", Policy: 2, Size: 4, Rank: 1, Ranges: []CtrlRange{
			{Start: 0, End: 1 << 62, Owner: 1, Replicas: []int32{2, 3}},
			{Start: 1 << 62, End: ^uint64(0), Owner: -1},
			{Start: 5, End: 6, Owner: 0x7FFFFFFF, Replicas: []int32{0, 1, 2, 3, 4, 5, 6, -7}},
		}}},
		{"register-req-any", CtrlMsg{Type: CtrlRegister, MTU: 9000, Service: "cache", Policy: 0, Size: 1, Rank: CtrlRankAny}},
		{"register-req-last", CtrlMsg{Type: CtrlRegister, MTU: 9000, Service: strings.Repeat("s", CtrlMaxName), Policy: 0xFF,
			Size: CtrlMaxSize, Rank: CtrlMaxSize - 1, Ranges: []CtrlRange{{Owner: CtrlMaxSize - 1}}}},
		{"register-resp", CtrlMsg{Type: CtrlRegister, Resp: true, Group: 0x10000, Member: 4}},
		{"lookup-req", CtrlMsg{Type: CtrlLookup, MTU: 9000, Service: "kv"}},
		{"lookup-resp", CtrlMsg{Type: CtrlLookup, Resp: true, Group: 0x10000, Members: ctrlTestMembers()[:2]}},
		{"poolnode-req", CtrlMsg{Type: CtrlPoolNode, Key: 0x1234_5678_9abc_def0, Capacity: 64 << 20}},
		{"poolnode-resp", CtrlMsg{Type: CtrlPoolNode, Resp: true, Node: 3, Epoch: 0xfeed}},
		{"poolcreate-req", CtrlMsg{Type: CtrlPoolCreate, Pool: PoolSpec{Size: 1 << 30, Stripe: 64 << 10, Columns: 0, Replicas: 2, Perm: 0x0f}}},
		{"poolcreate-req-max", CtrlMsg{Type: CtrlPoolCreate, Pool: PoolSpec{Size: poolmap.MaxRegionSize, Stripe: poolmap.MaxStripe, Columns: poolmap.MaxColumns, Replicas: 1, Perm: 1}}},
		{"poolcreate-resp", CtrlMsg{Type: CtrlPoolCreate, Resp: true, Region: 9, Key: ^uint64(0),
			Pool: PoolSpec{Size: 1, Stripe: poolmap.MinStripe, Columns: 1, Replicas: 1, Perm: 3}}},
		{"poolopen-req", CtrlMsg{Type: CtrlPoolOpen, Region: 9, Key: 77}},
		{"poolopen-resp", CtrlMsg{Type: CtrlPoolOpen, Resp: true, Pool: PoolSpec{Size: 4096, Stripe: 4096, Columns: 2, Replicas: 2, Perm: 1}}},
		{"poolfree-req", CtrlMsg{Type: CtrlPoolFree, Region: 9, Key: 77}},
		{"poolfree-resp", CtrlMsg{Type: CtrlPoolFree, Resp: true}},
		{"poolgrant-req", CtrlMsg{Type: CtrlPoolGrant, Region: 9, Key: 77, Node: 1, Epoch: 3, Base: 1 << 40, Length: 64 << 10,
			Pool:  PoolSpec{Size: 1 << 20, Stripe: 64 << 10, Columns: 2, Replicas: 2, Perm: 0x03},
			Homes: []PoolHome{{Addr: netip.MustParseAddrPort("10.0.0.2:4791"), Base: 4096}, {Addr: netip.MustParseAddrPort("[2001:db8::7]:4791"), Base: 1 << 40}}}},
		{"poolepoch-req", CtrlMsg{Type: CtrlPoolEpoch, Region: 9, Key: 77, Epoch: 4}},
		{"poolepoch-resp", CtrlMsg{Type: CtrlPoolEpoch, Resp: true}},
		{"poolreport-req", CtrlMsg{Type: CtrlPoolReport, Final: true, Reports: []PoolReport{
			{Region: 9, Column: 1, Pool: PoolSpec{Size: 1 << 20, Stripe: 64 << 10, Columns: 2, Replicas: 2, Perm: 0x03},
				Base: 1 << 40, Length: 1 << 20, Epoch: 3, Digest: PoolKeyDigest(9, 77), Degraded: true,
				Homes: []PoolHome{{Addr: netip.MustParseAddrPort("10.0.0.2:4791"), Base: 4096}, {Addr: netip.MustParseAddrPort("[2001:db8::7]:4791"), Base: 1 << 40}}},
			{Region: 12, Column: 0, Pool: PoolSpec{Size: 4096, Stripe: 4096, Columns: 1, Replicas: 1, Perm: 0x0f},
				Base: 0, Length: 4096, Epoch: 1, Rebuilding: true, Homes: []PoolHome{{Addr: netip.MustParseAddrPort("10.0.0.3:4791")}}},
		}}},
		{"poolreport-resp", CtrlMsg{Type: CtrlPoolReport, Resp: true}},
		{"poolgrant-resp", CtrlMsg{Type: CtrlPoolGrant, Resp: true}},
		{"poolrevoke-req", CtrlMsg{Type: CtrlPoolRevoke, Region: 9, Key: 77}},
		{"poolrevoke-resp", CtrlMsg{Type: CtrlPoolRevoke, Resp: true}},
		{"poolrebuild-req", CtrlMsg{Type: CtrlPoolRebuild, Region: 9, Key: 77, Node: 2, Base: 4096, Length: 1 << 20, Epoch: 2,
			Pool:  PoolSpec{Size: 3 << 20, Stripe: 64 << 10, Columns: 3, Replicas: 2, Perm: 3},
			Homes: []PoolHome{{Addr: netip.MustParseAddrPort("10.0.0.2:4791")}, {Addr: netip.MustParseAddrPort("10.0.0.3:4791"), Base: 64}, {Addr: netip.MustParseAddrPort("10.0.0.4:4791"), Base: 4096}}}},
		{"poolrebuild-resp", CtrlMsg{Type: CtrlPoolRebuild, Resp: true}},
		{"poolrebuildgo-req", CtrlMsg{Type: CtrlPoolRebuildGo, Region: 9, Key: 77, Node: 2}},
		{"poolrebuilt-req", CtrlMsg{Type: CtrlPoolRebuilt, Region: 9, Key: 77, Node: 2}},
		{"poolrebuilt-failed-req", CtrlMsg{Type: CtrlPoolRebuilt, Region: 9, Key: 77, Node: 0, Failed: true}},
		{"poolrebuilt-resp", CtrlMsg{Type: CtrlPoolRebuilt, Resp: true}},
		{"poolstat-req", CtrlMsg{Type: CtrlPoolStat}},
		{"poolstat-resp", CtrlMsg{Type: CtrlPoolStat, Resp: true,
			PoolNodes: []PoolNodeInfo{
				{ID: 0, Addr: netip.MustParseAddrPort("10.0.0.9:4791"), Capacity: 1 << 30, Used: 4096, Alive: true, Requests: 1 << 40, Bytes: ^uint64(0)},
				{ID: 1, Addr: netip.MustParseAddrPort("[2001:db8::9]:4791"), Capacity: 1, Used: 0},
			},
			PoolRegions: []PoolSpec{{Region: 1, Size: 100, Stripe: 64, Columns: 2, Replicas: 2, Perm: 0x0f, Lost: 1, Rebuilding: 1, Down: 1, Health: HealthUnavailable}}, PoolRefused: 77}},
		{"poolstat-resp-empty", CtrlMsg{Type: CtrlPoolStat, Resp: true}},
		{"joinstatus-req", CtrlMsg{Type: CtrlJoinStatus, Job: "train-42"}},
		{"joinstatus-resp", CtrlMsg{Type: CtrlJoinStatus, Resp: true, Size: 11, Joined: []byte{0b1011_0101, 0b101}}},
		{"joinstatus-resp-max", CtrlMsg{Type: CtrlJoinStatus, Resp: true, Size: CtrlMaxSize, Joined: bytes.Repeat([]byte{0xFF}, CtrlMaxSize/8)}},
		{"joinstatus-resp-none", CtrlMsg{Type: CtrlJoinStatus, Resp: true}},
	}
}

// ctrlNormalize makes empty slices nil so that decoded messages compare
// equal to the literals above with reflect.DeepEqual.
func ctrlNormalize(m CtrlMsg) CtrlMsg {
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
		rs := make([]CtrlRange, len(m.Ranges))
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

func ctrlEqual(a, b CtrlMsg) bool {
	return reflect.DeepEqual(ctrlNormalize(a), ctrlNormalize(b))
}

func TestCtrlRoundTrip(t *testing.T) {
	samples := ctrlSamples()
	// reused has been filled by every sample before, so its slices have
	// capacity and stale contents the decoder must overwrite.
	var reused CtrlMsg
	for _, s := range samples {
		b, err := AppendCtrl(nil, &s.m, ctrlTestToken)
		if err != nil {
			t.Fatalf("%s: AppendCtrl: %v", s.name, err)
		}
		if err := ParseCtrl(b, &reused, ctrlTestToken); err != nil {
			t.Fatalf("%s: warm-up ParseCtrl: %v", s.name, err)
		}
	}
	for _, s := range samples {
		t.Run(s.name, func(t *testing.T) {
			prefix := []byte("prefix")
			b, err := AppendCtrl(bytes.Clone(prefix), &s.m, ctrlTestToken)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(b, prefix) {
				t.Fatal("AppendCtrl overwrote dst")
			}
			b = b[len(prefix):]
			if got := ctrlSign(b[:len(b)-CtrlTagLen], ctrlTestToken); !bytes.Equal(got, b) {
				t.Fatalf("tag differs from HMAC-SHA256 reference")
			}
			var fresh CtrlMsg
			if err := ParseCtrl(b, &fresh, ctrlTestToken); err != nil {
				t.Fatal(err)
			}
			if !ctrlEqual(fresh, s.m) {
				t.Fatalf("fresh decode:\n got %+v\nwant %+v", fresh, s.m)
			}
			if err := ParseCtrl(b, &reused, ctrlTestToken); err != nil {
				t.Fatal(err)
			}
			if !ctrlEqual(reused, s.m) {
				t.Fatalf("reused decode:\n got %+v\nwant %+v", reused, s.m)
			}
			again, err := AppendCtrl(nil, &reused, ctrlTestToken)
			if err != nil || !bytes.Equal(again, b) {
				t.Fatalf("re-encode differs (err %v)", err)
			}
		})
	}
}

// TestCtrlUnusedFields checks that fields a type does not use are neither
// encoded nor left behind by the decoder.
func TestCtrlUnusedFields(t *testing.T) {
	full := CtrlMsg{
		Type: CtrlDestroy, Job: "j", Service: "s", Size: 3, Rank: 1, Group: 5, Member: 6,
		Epoch: 7, Policy: 8, Ranges: []CtrlRange{{Owner: 1}}, Members: ctrlTestMembers(), Dead: []uint16{1},
	}
	b, err := AppendCtrl(nil, &full, ctrlTestToken)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 2+4+CtrlTagLen {
		t.Fatalf("destroy request is %d bytes, want %d", len(b), 2+4+CtrlTagLen)
	}
	got := full
	if err := ParseCtrl(b, &got, ctrlTestToken); err != nil {
		t.Fatal(err)
	}
	if want := (CtrlMsg{Type: CtrlDestroy, Group: 5}); !ctrlEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

// TestCtrlGolden pins the byte layout documented at the top of ctrl.go.
func TestCtrlGolden(t *testing.T) {
	cases := []struct {
		m    CtrlMsg
		body []byte
	}{
		{CtrlMsg{Type: CtrlHeartbeat, Group: 0x01020304, Member: 0x0506},
			[]byte{4, 0, 1, 2, 3, 4, 5, 6}},
		{CtrlMsg{Type: CtrlHeartbeat, Resp: true, Epoch: 0x0102030405060708, Dead: []uint16{9, 0x0A0B}},
			[]byte{4, 1, 1, 2, 3, 4, 5, 6, 7, 8, 0, 2, 0, 9, 0x0A, 0x0B}},
		{CtrlMsg{Type: CtrlJoin, MTU: 9000, Job: "ab", Size: 0x0102, Rank: CtrlRankAny},
			[]byte{1, 0, 2, 'a', 'b', 1, 2, 0xFF, 0xFF, 0x23, 0x28}},
		{CtrlMsg{Type: CtrlJoin, Resp: true, Group: 1, Member: 2, Epoch: 3, Members: []MemberInfo{
			{ID: 7, Addr: netip.MustParseAddrPort("10.1.2.3:258")},
			{ID: 8, Addr: netip.MustParseAddrPort("[2001:db8::1]:4")},
		}}, []byte{1, 1, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 2,
			0, 7, 4, 10, 1, 2, 3, 1, 2,
			0, 8, 6, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 4}},
		{CtrlMsg{Type: CtrlRegister, MTU: 9000, Service: "s", Policy: 3, Size: 0x0102, Rank: 2, Ranges: []CtrlRange{
			{Start: 1, End: 2, Owner: -1, Replicas: []int32{5}},
		}}, []byte{5, 0, 1, 's', 3, 1, 2, 0, 2, 0, 1,
			0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0xFF, 0xFF, 0xFF, 0xFF, 1, 0, 0, 0, 5, 0x23, 0x28}},
		{CtrlMsg{Type: CtrlRegister, MTU: 9000, Service: "ab", Size: 1, Rank: CtrlRankAny},
			[]byte{5, 0, 2, 'a', 'b', 0, 0, 1, 0xFF, 0xFF, 0, 0, 0x23, 0x28}},
		{CtrlMsg{Type: CtrlRegister, Resp: true, Group: 0x01020304, Member: 0x0506},
			[]byte{5, 1, 1, 2, 3, 4, 5, 6}},
		{CtrlMsg{Type: CtrlLeave, Resp: true}, []byte{2, 1}},
		{CtrlMsg{Type: CtrlLookup, MTU: 9000, Service: "kv"}, []byte{6, 0, 2, 'k', 'v', 0x23, 0x28}},
		{CtrlMsg{Type: CtrlJoinStatus, Job: "ab"}, []byte{17, 0, 2, 'a', 'b'}},
		// Size 10, ranks 0, 3 and 9 joined.
		{CtrlMsg{Type: CtrlJoinStatus, Resp: true, Size: 10, Joined: []byte{0b1001, 0b10}}, []byte{17, 1, 0, 10, 0b1001, 0b10}},
		{CtrlMsg{Type: CtrlJoinStatus, Resp: true}, []byte{17, 1, 0, 0}},
	}
	for _, c := range cases {
		b, err := AppendCtrl(nil, &c.m, ctrlTestToken)
		if err != nil {
			t.Fatalf("%v: %v", c.m.Type, err)
		}
		if want := ctrlSign(c.body, ctrlTestToken); !bytes.Equal(b, want) {
			t.Errorf("%v resp=%v:\n got % x\nwant % x", c.m.Type, c.m.Resp, b, want)
		}
	}
}

func TestCtrlJoinedRanks(t *testing.T) {
	m := CtrlMsg{Type: CtrlJoinStatus, Resp: true, Size: 17, Joined: []byte{0b1000_0001, 0, 0b1}}
	if got, want := m.JoinedRanks(), []int{0, 7, 16}; !reflect.DeepEqual(got, want) {
		t.Errorf("JoinedRanks = %v, want %v", got, want)
	}
	if got := (&CtrlMsg{Type: CtrlJoinStatus, Resp: true, Size: 3, Joined: []byte{0}}).JoinedRanks(); got != nil {
		t.Errorf("JoinedRanks of none = %v", got)
	}
}

func TestCtrlTamper(t *testing.T) {
	for _, s := range ctrlSamples() {
		b, err := AppendCtrl(nil, &s.m, ctrlTestToken)
		if err != nil {
			t.Fatal(err)
		}
		var m CtrlMsg
		for i := range b {
			for _, x := range []byte{0x01, 0x80, 0xFF} {
				c := bytes.Clone(b)
				c[i] ^= x
				if err := ParseCtrl(c, &m, ctrlTestToken); !errors.Is(err, ErrCtrlAuth) {
					t.Fatalf("%s: byte %d ^ %#x: err %v, want ErrCtrlAuth", s.name, i, x, err)
				}
			}
		}
		// Removing or adding bytes moves the tag: also an auth failure.
		if err := ParseCtrl(b[1:], &m, ctrlTestToken); !errors.Is(err, ErrCtrlAuth) {
			t.Fatalf("%s: first byte cut: %v", s.name, err)
		}
		if err := ParseCtrl(append(bytes.Clone(b), 0), &m, ctrlTestToken); !errors.Is(err, ErrCtrlAuth) {
			t.Fatalf("%s: byte appended: %v", s.name, err)
		}
		for _, tok := range [][]byte{nil, []byte("fabric-test-tokeN"), []byte("fabric-test-toke")} {
			if err := ParseCtrl(b, &m, tok); !errors.Is(err, ErrCtrlAuth) {
				t.Fatalf("%s: token %q: err %v, want ErrCtrlAuth", s.name, tok, err)
			}
		}
	}
}

func TestCtrlEmptyToken(t *testing.T) {
	m := CtrlMsg{Type: CtrlLookup, MTU: 9000, Service: "kv"}
	b, err := AppendCtrl(nil, &m, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := ctrlSign(b[:len(b)-CtrlTagLen], nil); !bytes.Equal(b, want) {
		t.Fatal("nil-token tag differs from HMAC with an empty key")
	}
	var got CtrlMsg
	if err := ParseCtrl(b, &got, []byte{}); err != nil {
		t.Fatalf("empty token does not verify a nil-token message: %v", err)
	}
	if err := ParseCtrl(b, &got, ctrlTestToken); !errors.Is(err, ErrCtrlAuth) {
		t.Fatalf("set token accepted a nil-token message: %v", err)
	}
}

func TestCtrlShorterThanTag(t *testing.T) {
	var m CtrlMsg
	for n := 0; n < CtrlTagLen; n++ {
		err := ParseCtrl(make([]byte, n), &m, ctrlTestToken)
		if !errors.Is(err, ErrCtrlMalformed) || errors.Is(err, ErrCtrlAuth) {
			t.Fatalf("%d bytes: err %v, want ErrCtrlMalformed", n, err)
		}
	}
}

// TestCtrlTruncated signs every proper prefix of every sample, and every
// sample with a byte appended: all must be malformed, never accepted.
func TestCtrlTruncated(t *testing.T) {
	var m CtrlMsg
	for _, s := range ctrlSamples() {
		b, err := AppendCtrl(nil, &s.m, ctrlTestToken)
		if err != nil {
			t.Fatal(err)
		}
		body := b[:len(b)-CtrlTagLen]
		for n := 0; n < len(body); n++ {
			err := ParseCtrl(ctrlSign(body[:n], ctrlTestToken), &m, ctrlTestToken)
			if !errors.Is(err, ErrCtrlMalformed) {
				t.Fatalf("%s cut to %d of %d bytes: err %v, want ErrCtrlMalformed", s.name, n, len(body), err)
			}
		}
		for _, extra := range [][]byte{{0}, {1, 2, 3}} {
			err := ParseCtrl(ctrlSign(append(bytes.Clone(body), extra...), ctrlTestToken), &m, ctrlTestToken)
			if !errors.Is(err, ErrCtrlMalformed) {
				t.Fatalf("%s + %d trailing bytes: err %v, want ErrCtrlMalformed", s.name, len(extra), err)
			}
		}
	}
}

func TestCtrlEncodeBounds(t *testing.T) {
	long := strings.Repeat("n", CtrlMaxName+1)
	v4 := MemberInfo{ID: 1, Addr: netip.MustParseAddrPort("10.0.0.1:1")}
	cases := []struct {
		name string
		m    CtrlMsg
	}{
		{"type 0", CtrlMsg{}},
		{"type 12", CtrlMsg{Type: 12}},
		{"poolnode key 0", CtrlMsg{Type: CtrlPoolNode, Capacity: 1}},
		{"poolnode key 0", CtrlMsg{Type: CtrlPoolNode, Capacity: 1}},
		{"pool size 0", CtrlMsg{Type: CtrlPoolCreate, Pool: PoolSpec{Stripe: 64, Replicas: 1, Perm: 1}}},
		{"pool size 2^48+1", CtrlMsg{Type: CtrlPoolCreate, Pool: PoolSpec{Size: poolmap.MaxRegionSize + 1, Stripe: 64, Replicas: 1, Perm: 1}}},
		{"pool stripe 32", CtrlMsg{Type: CtrlPoolCreate, Pool: PoolSpec{Size: 1, Stripe: 32, Replicas: 1, Perm: 1}}},
		{"pool stripe 100", CtrlMsg{Type: CtrlPoolCreate, Pool: PoolSpec{Size: 1, Stripe: 100, Replicas: 1, Perm: 1}}},
		{"pool columns 257", CtrlMsg{Type: CtrlPoolCreate, Pool: PoolSpec{Size: 1, Stripe: 64, Columns: 257, Replicas: 1, Perm: 1}}},
		{"pool columns 0 in a response", CtrlMsg{Type: CtrlPoolOpen, Resp: true, Pool: PoolSpec{Size: 1, Stripe: 64, Replicas: 1, Perm: 1}}},
		{"pool replicas 3", CtrlMsg{Type: CtrlPoolCreate, Pool: PoolSpec{Size: 1, Stripe: 64, Replicas: 3, Perm: 1}}},
		{"pool perm 0", CtrlMsg{Type: CtrlPoolCreate, Pool: PoolSpec{Size: 1, Stripe: 64, Replicas: 1}}},
		{"pool perm 0x10", CtrlMsg{Type: CtrlPoolCreate, Pool: PoolSpec{Size: 1, Stripe: 64, Replicas: 1, Perm: 0x10}}},
		{"pool nodes 1025", CtrlMsg{Type: CtrlPoolStat, Resp: true, PoolNodes: make([]PoolNodeInfo, CtrlMaxPoolNodes+1)}},
		{"pool node invalid addr", CtrlMsg{Type: CtrlPoolStat, Resp: true, PoolNodes: []PoolNodeInfo{{ID: 1}}}},
		{"pool regions 4097", CtrlMsg{Type: CtrlPoolStat, Resp: true, PoolRegions: make([]PoolSpec, CtrlMaxPoolRegions+1)}},
		{"job too long", CtrlMsg{Type: CtrlJoin, MTU: 9000, Job: long, Size: 1, Rank: 0}},
		{"job empty", CtrlMsg{Type: CtrlJoin, MTU: 9000, Size: 1, Rank: 0}},
		{"size 0", CtrlMsg{Type: CtrlJoin, MTU: 9000, Job: "j", Size: 0, Rank: CtrlRankAny}},
		{"size 4097", CtrlMsg{Type: CtrlJoin, MTU: 9000, Job: "j", Size: CtrlMaxSize + 1, Rank: CtrlRankAny}},
		{"size negative", CtrlMsg{Type: CtrlJoin, MTU: 9000, Job: "j", Size: -1, Rank: CtrlRankAny}},
		{"rank -2", CtrlMsg{Type: CtrlJoin, MTU: 9000, Job: "j", Size: 4, Rank: -2}},
		{"rank = size", CtrlMsg{Type: CtrlJoin, MTU: 9000, Job: "j", Size: 4, Rank: 4}},
		{"members 4097", CtrlMsg{Type: CtrlJoin, Resp: true, Members: make([]MemberInfo, CtrlMaxMembers+1)}},
		{"member invalid addr", CtrlMsg{Type: CtrlLookup, Resp: true, Members: []MemberInfo{v4, {ID: 2}}}},
		{"member zone", CtrlMsg{Type: CtrlJoin, Resp: true, Members: []MemberInfo{
			{ID: 2, Addr: netip.MustParseAddrPort("[fe80::1%eth0]:5")}}}},
		{"dead 4097", CtrlMsg{Type: CtrlHeartbeat, Resp: true, Dead: make([]uint16, CtrlMaxMembers+1)}},
		{"service too long", CtrlMsg{Type: CtrlRegister, MTU: 9000, Service: long, Size: 1, Rank: CtrlRankAny}},
		{"service empty", CtrlMsg{Type: CtrlRegister, MTU: 9000, Size: 1, Rank: CtrlRankAny}},
		{"lookup service empty", CtrlMsg{Type: CtrlLookup, MTU: 9000}},
		{"lookup service too long", CtrlMsg{Type: CtrlLookup, MTU: 9000, Service: long}},
		{"register size 0", CtrlMsg{Type: CtrlRegister, MTU: 9000, Service: "s", Size: 0, Rank: CtrlRankAny}},
		{"register size 4097", CtrlMsg{Type: CtrlRegister, MTU: 9000, Service: "s", Size: CtrlMaxSize + 1, Rank: CtrlRankAny}},
		{"register size negative", CtrlMsg{Type: CtrlRegister, MTU: 9000, Service: "s", Size: -1, Rank: CtrlRankAny}},
		{"register size 65535", CtrlMsg{Type: CtrlRegister, MTU: 9000, Service: "s", Size: 0xFFFF, Rank: CtrlRankAny}},
		{"join mtu 0", CtrlMsg{Type: CtrlJoin, Job: "j", Size: 1, Rank: 0}},
		{"join mtu below minimum", CtrlMsg{Type: CtrlJoin, MTU: CtrlMinMTU - 1, Job: "j", Size: 1, Rank: 0}},
		{"join mtu above maximum", CtrlMsg{Type: CtrlJoin, MTU: CtrlMaxMTU + 1, Job: "j", Size: 1, Rank: 0}},
		{"register mtu 0", CtrlMsg{Type: CtrlRegister, Service: "s", Size: 1, Rank: CtrlRankAny}},
		{"lookup mtu 65536", CtrlMsg{Type: CtrlLookup, MTU: 65536, Service: "s"}},
		{"register rank = size", CtrlMsg{Type: CtrlRegister, MTU: 9000, Service: "s", Size: 4, Rank: 4}},
		{"register rank > size", CtrlMsg{Type: CtrlRegister, MTU: 9000, Service: "s", Size: 4, Rank: 100}},
		{"register rank 4096", CtrlMsg{Type: CtrlRegister, MTU: 9000, Service: "s", Size: CtrlMaxSize, Rank: CtrlMaxSize}},
		{"register rank 0xFFFF", CtrlMsg{Type: CtrlRegister, MTU: 9000, Service: "s", Size: CtrlMaxSize, Rank: 0xFFFF}},
		{"register rank -2", CtrlMsg{Type: CtrlRegister, MTU: 9000, Service: "s", Size: 4, Rank: -2}},
		{"ranges 4097", CtrlMsg{Type: CtrlRegister, MTU: 9000, Service: "s", Size: 1, Ranges: make([]CtrlRange, CtrlMaxRanges+1)}},
		{"replicas 9", CtrlMsg{Type: CtrlRegister, MTU: 9000, Service: "s", Size: 1, Ranges: []CtrlRange{
			{}, {Replicas: make([]int32, CtrlMaxReplicas+1)}}}},
		{"joinstatus job empty", CtrlMsg{Type: CtrlJoinStatus}},
		{"joinstatus job too long", CtrlMsg{Type: CtrlJoinStatus, Job: long}},
		{"joinstatus size 4097", CtrlMsg{Type: CtrlJoinStatus, Resp: true, Size: CtrlMaxSize + 1, Joined: make([]byte, (CtrlMaxSize+8)/8)}},
		{"joinstatus size negative", CtrlMsg{Type: CtrlJoinStatus, Resp: true, Size: -1}},
		{"joinstatus set too short", CtrlMsg{Type: CtrlJoinStatus, Resp: true, Size: 9, Joined: []byte{1}}},
		{"joinstatus set too long", CtrlMsg{Type: CtrlJoinStatus, Resp: true, Size: 8, Joined: []byte{1, 0}}},
		{"joinstatus rank past size", CtrlMsg{Type: CtrlJoinStatus, Resp: true, Size: 3, Joined: []byte{0b1000}}},
	}
	for _, c := range cases {
		dst := []byte("keep")
		b, err := AppendCtrl(dst, &c.m, ctrlTestToken)
		if !errors.Is(err, ErrCtrlMalformed) {
			t.Errorf("%s: err %v, want ErrCtrlMalformed", c.name, err)
		}
		if string(b) != "keep" {
			t.Errorf("%s: dst changed to %q", c.name, b)
		}
	}
	// The limits themselves are accepted.
	ok := []CtrlMsg{
		{Type: CtrlJoin, Resp: true, Members: make([]MemberInfo, CtrlMaxMembers)},
		{Type: CtrlHeartbeat, Resp: true, Dead: make([]uint16, CtrlMaxMembers)},
		{Type: CtrlRegister, MTU: CtrlMaxMTU, Service: "s", Size: CtrlMaxSize, Rank: CtrlMaxSize - 1, Ranges: make([]CtrlRange, CtrlMaxRanges)},
		{Type: CtrlRegister, MTU: CtrlMinMTU, Service: "s", Size: 1, Rank: 0},
		{Type: CtrlRegister, MTU: 9000, Service: "s", Size: 1, Rank: CtrlRankAny},
	}
	for i := range ok[0].Members {
		ok[0].Members[i] = MemberInfo{ID: uint16(i), Addr: netip.AddrPortFrom(netip.IPv6Loopback(), uint16(i))}
	}
	for i := range ok[2].Ranges {
		ok[2].Ranges[i].Replicas = make([]int32, CtrlMaxReplicas)
	}
	for _, m := range ok {
		b, err := AppendCtrl(nil, &m, ctrlTestToken)
		if err != nil {
			t.Fatalf("%v at the limit: %v", m.Type, err)
		}
		var got CtrlMsg
		if err := ParseCtrl(b, &got, ctrlTestToken); err != nil || !ctrlEqual(got, m) {
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

func TestCtrlDecodeBounds(t *testing.T) {
	const req, resp = byte(0), byte(1)
	name65 := strings.Repeat("n", 65)
	member4 := ctrlBody(uint16(1), byte(4), "\x0a\x00\x00\x01", uint16(80))
	range0 := ctrlBody(uint64(0), uint64(1), uint32(0), byte(0))
	cases := []struct {
		name string
		body []byte
	}{
		{"empty", nil},
		{"type only", ctrlBody(byte(CtrlLeave))},
		{"type 0", ctrlBody(byte(0), req)},
		{"type 12", ctrlBody(byte(12), req)},
		{"poolnode key 0", ctrlBody(byte(CtrlPoolNode), req, uint64(0), uint64(1))},
		{"poolcreate stripe 100", ctrlBody(byte(CtrlPoolCreate), req, uint64(1), uint64(100), uint16(0), byte(1), byte(1))},
		{"poolcreate truncated", ctrlBody(byte(CtrlPoolCreate), req, uint64(1), uint64(64))},
		{"poolstat alive 2", ctrlBody(byte(CtrlPoolStat), resp, uint16(1), member4, uint64(1), uint64(0), byte(2), uint16(0))},
		{"poolstat nodes past end", ctrlBody(byte(CtrlPoolStat), resp, uint16(3), member4, uint64(1), uint64(0), byte(1), uint16(0))},
		{"poolstat region columns 0", ctrlBody(byte(CtrlPoolStat), resp, uint16(0), uint16(1), uint32(1), uint64(1), uint64(64), uint16(0), byte(1), byte(1))},
		{"type 255", ctrlBody(byte(255), resp)},
		{"joinstatus job empty", ctrlBody(byte(CtrlJoinStatus), req, byte(0))},
		{"joinstatus size 4097", ctrlBody(byte(CtrlJoinStatus), resp, uint16(4097), string(make([]byte, 513)))},
		{"joinstatus set truncated", ctrlBody(byte(CtrlJoinStatus), resp, uint16(9), byte(1))},
		{"joinstatus set too long", ctrlBody(byte(CtrlJoinStatus), resp, uint16(8), byte(1), byte(0))},
		{"joinstatus rank past size", ctrlBody(byte(CtrlJoinStatus), resp, uint16(3), byte(0b1000))},
		{"flag bit 1", ctrlBody(byte(CtrlLeave), byte(2), uint32(1), uint16(1))},
		{"flag bit 7", ctrlBody(byte(CtrlLeave), byte(0x81))},
		{"job 65 bytes", ctrlBody(byte(CtrlJoin), req, byte(65), name65, uint16(1), uint16(0))},
		{"job empty", ctrlBody(byte(CtrlJoin), req, byte(0), uint16(1), uint16(0))},
		{"job length past end", ctrlBody(byte(CtrlJoin), req, byte(10), "abc")},
		{"size 0", ctrlBody(byte(CtrlJoin), req, byte(1), "j", uint16(0), uint16(0xFFFF))},
		{"size 4097", ctrlBody(byte(CtrlJoin), req, byte(1), "j", uint16(4097), uint16(0xFFFF))},
		{"rank = size", ctrlBody(byte(CtrlJoin), req, byte(1), "j", uint16(4), uint16(4))},
		{"rank 0xFFFE", ctrlBody(byte(CtrlJoin), req, byte(1), "j", uint16(4096), uint16(0xFFFE))},
		{"members 4097", ctrlBody(byte(CtrlJoin), resp, uint32(1), uint16(2), uint64(3), uint16(4097),
			bytes.Repeat(member4, 4097))},
		{"members count past end", ctrlBody(byte(CtrlLookup), resp, uint32(1), uint16(2), member4)},
		{"member family 0", ctrlBody(byte(CtrlLookup), resp, uint32(1), uint16(1), uint16(1), byte(0),
			"\x0a\x00\x00\x01", uint16(80))},
		{"member family 5", ctrlBody(byte(CtrlLookup), resp, uint32(1), uint16(1), uint16(1), byte(5),
			"\x0a\x00\x00\x01", uint16(80))},
		{"member v6 short", ctrlBody(byte(CtrlLookup), resp, uint32(1), uint16(1), uint16(1), byte(6),
			"\x0a\x00\x00\x01", uint16(80))},
		{"dead 4097", ctrlBody(byte(CtrlHeartbeat), resp, uint64(1), uint16(4097), make([]byte, 2*4097))},
		{"dead past end", ctrlBody(byte(CtrlHeartbeat), resp, uint64(1), uint16(3), uint16(1), uint16(2))},
		{"service 65 bytes", ctrlBody(byte(CtrlLookup), req, byte(65), name65)},
		{"service empty", ctrlBody(byte(CtrlLookup), req, byte(0))},
		{"register size 0", ctrlBody(byte(CtrlRegister), req, byte(1), "s", byte(0), uint16(0), uint16(0xFFFF), uint16(0))},
		{"register size 4097", ctrlBody(byte(CtrlRegister), req, byte(1), "s", byte(0), uint16(4097), uint16(0xFFFF), uint16(0))},
		{"register size 0xFFFF", ctrlBody(byte(CtrlRegister), req, byte(1), "s", byte(0), uint16(0xFFFF), uint16(0xFFFF), uint16(0))},
		{"register size past end", ctrlBody(byte(CtrlRegister), req, byte(1), "s", byte(0), byte(1))},
		{"register rank = size", ctrlBody(byte(CtrlRegister), req, byte(1), "s", byte(0), uint16(4), uint16(4), uint16(0))},
		{"register rank > size", ctrlBody(byte(CtrlRegister), req, byte(1), "s", byte(0), uint16(1), uint16(2), uint16(0))},
		{"register rank 4096", ctrlBody(byte(CtrlRegister), req, byte(1), "s", byte(0), uint16(4096), uint16(4096), uint16(0))},
		{"register rank 0xFFFE", ctrlBody(byte(CtrlRegister), req, byte(1), "s", byte(0), uint16(4096), uint16(0xFFFE), uint16(0))},
		{"register pre-size layout", ctrlBody(byte(CtrlRegister), req, byte(1), "s", byte(0), uint16(0), uint16(0))},
		{"ranges 4097", ctrlBody(byte(CtrlRegister), req, byte(1), "s", byte(0), uint16(1), uint16(0xFFFF), uint16(4097),
			bytes.Repeat(range0, 4097))},
		{"ranges count past end", ctrlBody(byte(CtrlRegister), req, byte(1), "s", byte(0), uint16(1), uint16(0), uint16(2), range0)},
		{"replicas 9", ctrlBody(byte(CtrlRegister), req, byte(1), "s", byte(0), uint16(1), uint16(0xFFFF), uint16(1),
			uint64(0), uint64(1), uint32(0), byte(9), make([]byte, 4*9))},
		{"replicas past end", ctrlBody(byte(CtrlRegister), req, byte(1), "s", byte(0), uint16(1), uint16(0xFFFF), uint16(1),
			uint64(0), uint64(1), uint32(0), byte(2), uint32(1))},
		{"join mtu missing", ctrlBody(byte(CtrlJoin), req, byte(1), "j", uint16(4), uint16(0))},
		{"join mtu 0", ctrlBody(byte(CtrlJoin), req, byte(1), "j", uint16(4), uint16(0), uint16(0))},
		{"join mtu 159", ctrlBody(byte(CtrlJoin), req, byte(1), "j", uint16(4), uint16(0), uint16(CtrlMinMTU-1))},
		{"join mtu 65508", ctrlBody(byte(CtrlJoin), req, byte(1), "j", uint16(4), uint16(0), uint16(CtrlMaxMTU+1))},
		{"join trailing after mtu", ctrlBody(byte(CtrlJoin), req, byte(1), "j", uint16(4), uint16(0), uint16(9000), byte(0))},
		{"register mtu 0", ctrlBody(byte(CtrlRegister), req, byte(1), "s", byte(0), uint16(1), uint16(0), uint16(0), uint16(0))},
		{"lookup mtu missing", ctrlBody(byte(CtrlLookup), req, byte(2), "kv")},
		{"lookup mtu 65535", ctrlBody(byte(CtrlLookup), req, byte(2), "kv", uint16(0xFFFF))},
		{"leave resp with fields", ctrlBody(byte(CtrlLeave), resp, uint32(1))},
		{"destroy trailing", ctrlBody(byte(CtrlDestroy), req, uint32(1), byte(0))},
	}
	for _, c := range cases {
		var m CtrlMsg
		err := ParseCtrl(ctrlSign(c.body, ctrlTestToken), &m, ctrlTestToken)
		if !errors.Is(err, ErrCtrlMalformed) {
			t.Errorf("%s: err %v, want ErrCtrlMalformed", c.name, err)
		}
	}
	// The same bodies at the limits parse.
	good := [][]byte{
		ctrlBody(byte(CtrlJoin), req, byte(64), name65[:64], uint16(4096), uint16(4095), uint16(9000)),
		ctrlBody(byte(CtrlJoin), resp, uint32(1), uint16(2), uint64(3), uint16(4096), bytes.Repeat(member4, 4096)),
		ctrlBody(byte(CtrlHeartbeat), resp, uint64(1), uint16(4096), make([]byte, 2*4096)),
		ctrlBody(byte(CtrlRegister), req, byte(1), "s", byte(0), uint16(4096), uint16(4095), uint16(4096), bytes.Repeat(range0, 4096), uint16(CtrlMaxMTU)),
		ctrlBody(byte(CtrlRegister), req, byte(1), "s", byte(0), uint16(1), uint16(0xFFFF), uint16(1),
			uint64(0), uint64(1), uint32(0), byte(8), make([]byte, 4*8), uint16(CtrlMinMTU)),
		ctrlBody(byte(CtrlRegister), req, byte(64), name65[:64], byte(0xFF), uint16(1), uint16(0), uint16(0), uint16(1500)),
		ctrlBody(byte(CtrlLookup), req, byte(2), "kv", uint16(9000)),
	}
	for i, body := range good {
		var m CtrlMsg
		if err := ParseCtrl(ctrlSign(body, ctrlTestToken), &m, ctrlTestToken); err != nil {
			t.Errorf("good body %d: %v", i, err)
		}
	}
}

// TestCtrlParseAllocs checks that parsing into a reused CtrlMsg allocates
// nothing once its slices have grown and the MAC is warm.
func TestCtrlParseAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector (sync.Pool)")
	}
	for _, m := range []CtrlMsg{
		{Type: CtrlHeartbeat, Resp: true, Epoch: 3, Dead: []uint16{1, 2, 3, 4}},
		{Type: CtrlJoin, Resp: true, Group: 1, Member: 2, Epoch: 3, Members: ctrlTestMembers()},
		{Type: CtrlLookup, MTU: 9000, Service: "kv"},
		{Type: CtrlRegister, MTU: 9000, Service: "kv", Size: 3, Rank: CtrlRankAny, Ranges: []CtrlRange{{End: 9, Replicas: []int32{1, 2}}}},
		{Type: CtrlRegister, Resp: true, Group: 1, Member: 2},
	} {
		b, err := AppendCtrl(nil, &m, ctrlTestToken)
		if err != nil {
			t.Fatal(err)
		}
		var got CtrlMsg
		if err := ParseCtrl(b, &got, ctrlTestToken); err != nil {
			t.Fatal(err)
		}
		allocs := testing.AllocsPerRun(100, func() {
			if err := ParseCtrl(b, &got, ctrlTestToken); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("ParseCtrl %v resp=%v: %v allocs per run, want 0", m.Type, m.Resp, allocs)
		}
	}
}

func TestCtrlAppendAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector (sync.Pool)")
	}
	m := CtrlMsg{Type: CtrlHeartbeat, Group: 1, Member: 2}
	buf := make([]byte, 0, 64)
	if _, err := AppendCtrl(buf, &m, ctrlTestToken); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := AppendCtrl(buf[:0], &m, ctrlTestToken); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("AppendCtrl into a large enough buffer: %v allocs per run, want 0", allocs)
	}
}

func TestCtrlTypeString(t *testing.T) {
	want := map[CtrlType]string{
		0: "ctrl(0)", CtrlJoin: "join", CtrlLeave: "leave", CtrlDestroy: "destroy",
		CtrlHeartbeat: "heartbeat", CtrlRegister: "register", CtrlLookup: "lookup", CtrlPoolNode: "poolnode",
		CtrlPoolStat: "poolstat", CtrlPoolGrant: "poolgrant", CtrlPoolRevoke: "poolrevoke", CtrlPoolRebuilt: "poolrebuilt", CtrlJoinStatus: "joinstatus", 255: "ctrl(255)",
	}
	for typ, s := range want {
		if got := typ.String(); got != s {
			t.Errorf("CtrlType(%d).String() = %q, want %q", uint8(typ), got, s)
		}
	}
}

// FuzzCtrl checks that ParseCtrl never panics, fails only with ErrCtrlAuth
// or ErrCtrlMalformed, and that whatever it accepts re-encodes to the same
// bytes. Each input is tried twice: as a whole message (almost always an
// authentication failure) and as the fields of a message, signed with the
// test token, so that the field decoder itself is fuzzed.
func FuzzCtrl(f *testing.F) {
	for _, s := range ctrlSamples() {
		b, err := AppendCtrl(nil, &s.m, ctrlTestToken)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b[:len(b)-CtrlTagLen])
	}
	// reused keeps its state from one input to the next (inputs run one
	// at a time in a worker) and starts filled by a large message, so
	// decoding into it exercises the reuse of slices and names.
	var reused CtrlMsg
	big := CtrlMsg{Type: CtrlRegister, MTU: 9000, Service: "kv", Size: 2, Rank: 1, Ranges: []CtrlRange{
		{End: 1, Replicas: []int32{1, 2, 3}}, {Owner: 2, Replicas: []int32{4}},
	}}
	bb, err := AppendCtrl(nil, &big, ctrlTestToken)
	if err != nil {
		f.Fatal(err)
	}
	if err := ParseCtrl(bb, &reused, ctrlTestToken); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, msg := range [][]byte{b, ctrlSign(b, ctrlTestToken)} {
			var m CtrlMsg
			err := ParseCtrl(msg, &m, ctrlTestToken)
			if err != nil {
				if !errors.Is(err, ErrCtrlAuth) && !errors.Is(err, ErrCtrlMalformed) {
					t.Fatalf("unexpected error class: %v", err)
				}
				continue
			}
			out, err := AppendCtrl(nil, &m, ctrlTestToken)
			if err != nil {
				t.Fatalf("accepted message does not re-encode: %v", err)
			}
			if !bytes.Equal(out, msg) {
				t.Fatalf("re-encode differs:\n got % x\nwant % x", out, msg)
			}
			if err := ParseCtrl(msg, &reused, ctrlTestToken); err != nil || !ctrlEqual(reused, m) {
				t.Fatalf("decode into a used CtrlMsg differs (err %v)", err)
			}
		}
	})
}

func BenchmarkParseCtrlHeartbeatResp(b *testing.B) {
	m := CtrlMsg{Type: CtrlHeartbeat, Resp: true, Epoch: 3, Dead: []uint16{1, 2}}
	msg, err := AppendCtrl(nil, &m, ctrlTestToken)
	if err != nil {
		b.Fatal(err)
	}
	var got CtrlMsg
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		if err := ParseCtrl(msg, &got, ctrlTestToken); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendCtrlHeartbeat(b *testing.B) {
	m := CtrlMsg{Type: CtrlHeartbeat, Group: 1, Member: 2}
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := AppendCtrl(buf[:0], &m, ctrlTestToken); err != nil {
			b.Fatal(err)
		}
	}
}
