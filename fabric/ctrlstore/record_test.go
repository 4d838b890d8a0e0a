package ctrlstore

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"

	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
	"github.com/ndma/ndma/wire/poolmap"
)

func testRecord() *Record {
	r := &Record{Region: 7, Key: 0xfeedface12345678, Epoch: 3,
		Pool: ctrl.PoolSpec{Region: 7, Size: 1 << 20, Stripe: 64 << 10, Columns: 3, Replicas: 2, Perm: uint8(wire.PermRead | wire.PermWrite)},
		Homes: []ctrl.PoolHome{
			{Addr: netip.MustParseAddrPort("10.0.0.1:7000"), Base: 0},
			{Addr: netip.MustParseAddrPort("[2001:db8::2]:7001"), Base: 4096},
			{Addr: netip.MustParseAddrPort("10.0.0.3:7002"), Base: 1 << 19},
		},
		Lost:       []bool{false, true, true},
		Rebuilding: []bool{false, false, true},
		Fences:     []wire.Fence{{ID: 1, Token: 5}, {ID: 9, Token: 1 << 40}},
	}
	r.Digest = ctrl.PoolKeyDigest(r.Region, r.Key)
	return r
}

// TestRecordRoundTrip encodes records and decodes them back equal: with
// a key and fences, and without a key (a region known by its digest)
// nor fences.
func TestRecordRoundTrip(t *testing.T) {
	r := testRecord()
	bare := testRecord()
	bare.Key, bare.Fences = 0, nil
	for _, want := range []*Record{r, bare} {
		b := AppendRecord([]byte("prefix"), want)
		got, err := ParseRecord(b[len("prefix"):])
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
		}
	}
}

// TestRecordLimits checks MaxRecordLen against the largest record: every
// column homed on IPv6, every fence.
func TestRecordLimits(t *testing.T) {
	k := poolmap.MaxColumns
	r := &Record{Region: 1, Pool: ctrl.PoolSpec{Size: uint64(k) * 4096, Stripe: 4096, Columns: k, Replicas: 2, Perm: 1},
		Homes: make([]ctrl.PoolHome, k), Lost: make([]bool, k), Rebuilding: make([]bool, k)}
	for c := range r.Homes {
		r.Homes[c] = ctrl.PoolHome{Addr: netip.AddrPortFrom(netip.MustParseAddr("2001:db8::1"), uint16(1000+c)), Base: uint64(c) << 20}
	}
	for i := range wire.MaxFences {
		r.Fences = append(r.Fences, wire.Fence{ID: uint32(i), Token: 1})
	}
	b := AppendRecord(nil, r)
	if len(b) != MaxRecordLen {
		t.Fatalf("largest record %d bytes, MaxRecordLen %d", len(b), MaxRecordLen)
	}
	if _, err := ParseRecord(b); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseRecord(append(b, 0)); !errors.Is(err, ErrRecord) {
		t.Errorf("one byte over the limit: %v", err)
	}
}

// TestRecordRefused checks that corrupt and hostile values are refused
// with ErrRecord: each mutation below is re-checksummed, so the decoder's
// own checks, not the checksum, must catch it.
func TestRecordRefused(t *testing.T) {
	good := AppendRecord(nil, testRecord())
	resum := func(b []byte) []byte { return AppendChecksum(b[:len(b)-4]) }
	cases := map[string][]byte{
		"empty":         nil,
		"truncated":     good[:len(good)-5],
		"flipped bit":   func() []byte { b := clone(good); b[20] ^= 1; return b }(),
		"other magic":   resum(func() []byte { b := clone(good); b[0] = 'X'; return b }()),
		"other version": resum(func() []byte { b := clone(good); b[4] = 2; return b }()),
		"region zero":   resum(func() []byte { b := clone(good); copy(b[5:9], []byte{0, 0, 0, 0}); return b }()),
		"wrong digest":  resum(func() []byte { b := clone(good); b[17] ^= 1; return b }()),
		"trailing byte": resum(append(clone(good[:len(good)-4]), 0, 0, 0, 0, 0)),
	}
	bad := testRecord()
	bad.Pool.Columns = 0
	cases["no columns"] = AppendRecord(nil, bad)
	bad = testRecord()
	bad.Pool.Perm = 0x80
	cases["unknown permission"] = AppendRecord(nil, bad)
	bad = testRecord()
	bad.Fences[1].ID = 1
	cases["fences out of order"] = AppendRecord(nil, bad)
	bad = testRecord()
	bad.Homes[0].Addr = netip.MustParseAddrPort("0.0.0.0:7000")
	cases["unspecified home"] = AppendRecord(nil, bad)
	bad = testRecord()
	bad.Homes[2].Base = ^uint64(0) - 10
	cases["extent overflows"] = AppendRecord(nil, bad)
	bad = testRecord()
	bad.Lost[0], bad.Rebuilding[0] = false, true
	cases["rebuilding but not lost"] = AppendRecord(nil, bad)
	for name, b := range cases {
		if r, err := ParseRecord(b); !errors.Is(err, ErrRecord) {
			t.Errorf("%s: %+v, %v; want ErrRecord", name, r, err)
		}
	}
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

// FuzzParseRecord: any value under a store's prefix decodes to a valid
// record or an error, never a panic; a record that decodes encodes back
// to the same bytes.
func FuzzParseRecord(f *testing.F) {
	f.Add(AppendRecord(nil, testRecord()))
	bare := testRecord()
	bare.Key, bare.Fences = 0, nil
	f.Add(AppendRecord(nil, bare))
	f.Add([]byte("NDMR"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRecord(b)
		if err != nil {
			if !errors.Is(err, ErrRecord) {
				t.Fatalf("error %v does not wrap ErrRecord", err)
			}
			return
		}
		if got := AppendRecord(nil, r); string(got) != string(b) {
			t.Fatalf("decoded %+v encodes to %x, not %x", r, got, b)
		}
	})
}
