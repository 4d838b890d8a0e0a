package secure

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"testing"

	"github.com/ndma/ndma/wire/ctrl"
	"github.com/ndma/ndma/wire/ctrl/ctrltest"
)

var ctrlTestToken = []byte("fabric-test-token")

// ctrlSign appends the reference tag (computed here with crypto/hmac, not
// with the code under test) to a copy of body.
func ctrlSign(body, token []byte) []byte {
	h := hmac.New(sha256.New, token)
	h.Write(body)
	return append(bytes.Clone(body), h.Sum(nil)[:CtrlTagLen]...)
}

func TestCtrlRoundTrip(t *testing.T) {
	samples := ctrltest.Samples()
	// reused has been filled by every sample before, so its slices have
	// capacity and stale contents the decoder must overwrite.
	var reused ctrl.Msg
	for _, s := range samples {
		b, err := AppendCtrl(nil, &s.Msg, ctrlTestToken)
		if err != nil {
			t.Fatalf("%s: AppendCtrl: %v", s.Name, err)
		}
		if err := ParseCtrl(b, &reused, ctrlTestToken); err != nil {
			t.Fatalf("%s: warm-up ParseCtrl: %v", s.Name, err)
		}
	}
	for _, s := range samples {
		t.Run(s.Name, func(t *testing.T) {
			prefix := []byte("prefix")
			b, err := AppendCtrl(bytes.Clone(prefix), &s.Msg, ctrlTestToken)
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
			var fresh ctrl.Msg
			if err := ParseCtrl(b, &fresh, ctrlTestToken); err != nil {
				t.Fatal(err)
			}
			if !ctrltest.Equal(fresh, s.Msg) {
				t.Fatalf("fresh decode:\n got %+v\nwant %+v", fresh, s.Msg)
			}
			if err := ParseCtrl(b, &reused, ctrlTestToken); err != nil {
				t.Fatal(err)
			}
			if !ctrltest.Equal(reused, s.Msg) {
				t.Fatalf("reused decode:\n got %+v\nwant %+v", reused, s.Msg)
			}
			again, err := AppendCtrl(nil, &reused, ctrlTestToken)
			if err != nil || !bytes.Equal(again, b) {
				t.Fatalf("re-encode differs (err %v)", err)
			}
		})
	}
}

func TestCtrlTamper(t *testing.T) {
	for _, s := range ctrltest.Samples() {
		b, err := AppendCtrl(nil, &s.Msg, ctrlTestToken)
		if err != nil {
			t.Fatal(err)
		}
		var m ctrl.Msg
		for i := range b {
			for _, x := range []byte{0x01, 0x80, 0xFF} {
				c := bytes.Clone(b)
				c[i] ^= x
				if err := ParseCtrl(c, &m, ctrlTestToken); !errors.Is(err, ErrCtrlAuth) {
					t.Fatalf("%s: byte %d ^ %#x: err %v, want ErrCtrlAuth", s.Name, i, x, err)
				}
			}
		}
		// Removing or adding bytes moves the tag: also an auth failure.
		if err := ParseCtrl(b[1:], &m, ctrlTestToken); !errors.Is(err, ErrCtrlAuth) {
			t.Fatalf("%s: first byte cut: %v", s.Name, err)
		}
		if err := ParseCtrl(append(bytes.Clone(b), 0), &m, ctrlTestToken); !errors.Is(err, ErrCtrlAuth) {
			t.Fatalf("%s: byte appended: %v", s.Name, err)
		}
		for _, tok := range [][]byte{nil, []byte("fabric-test-tokeN"), []byte("fabric-test-toke")} {
			if err := ParseCtrl(b, &m, tok); !errors.Is(err, ErrCtrlAuth) {
				t.Fatalf("%s: token %q: err %v, want ErrCtrlAuth", s.Name, tok, err)
			}
		}
	}
}

func TestCtrlEmptyToken(t *testing.T) {
	m := ctrl.Msg{Type: ctrl.Lookup, MTU: 9000, Service: "kv"}
	b, err := AppendCtrl(nil, &m, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := ctrlSign(b[:len(b)-CtrlTagLen], nil); !bytes.Equal(b, want) {
		t.Fatal("nil-token tag differs from HMAC with an empty key")
	}
	var got ctrl.Msg
	if err := ParseCtrl(b, &got, []byte{}); err != nil {
		t.Fatalf("empty token does not verify a nil-token message: %v", err)
	}
	if err := ParseCtrl(b, &got, ctrlTestToken); !errors.Is(err, ErrCtrlAuth) {
		t.Fatalf("set token accepted a nil-token message: %v", err)
	}
}

func TestCtrlShorterThanTag(t *testing.T) {
	var m ctrl.Msg
	for n := 0; n < CtrlTagLen; n++ {
		err := ParseCtrl(make([]byte, n), &m, ctrlTestToken)
		if !errors.Is(err, ctrl.ErrMalformed) || errors.Is(err, ErrCtrlAuth) {
			t.Fatalf("%d bytes: err %v, want ctrl.ErrMalformed", n, err)
		}
	}
}

// TestCtrlParseAllocs checks that parsing into a reused ctrl.Msg allocates
// nothing once its slices have grown and the MAC is warm.
func TestCtrlParseAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector (sync.Pool)")
	}
	for _, m := range []ctrl.Msg{
		{Type: ctrl.Heartbeat, Resp: true, Epoch: 3, Dead: []uint16{1, 2, 3, 4}},
		{Type: ctrl.Join, Resp: true, Group: 1, Member: 2, Epoch: 3, Members: ctrltest.Members()},
		{Type: ctrl.Lookup, MTU: 9000, Service: "kv"},
		{Type: ctrl.Register, MTU: 9000, Service: "kv", Size: 3, Rank: ctrl.RankAny, Ranges: []ctrl.Range{{End: 9, Replicas: []int32{1, 2}}}},
		{Type: ctrl.Register, Resp: true, Group: 1, Member: 2},
	} {
		b, err := AppendCtrl(nil, &m, ctrlTestToken)
		if err != nil {
			t.Fatal(err)
		}
		var got ctrl.Msg
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
	m := ctrl.Msg{Type: ctrl.Heartbeat, Group: 1, Member: 2}
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

func BenchmarkParseCtrlHeartbeatResp(b *testing.B) {
	m := ctrl.Msg{Type: ctrl.Heartbeat, Resp: true, Epoch: 3, Dead: []uint16{1, 2}}
	msg, err := AppendCtrl(nil, &m, ctrlTestToken)
	if err != nil {
		b.Fatal(err)
	}
	var got ctrl.Msg
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		if err := ParseCtrl(msg, &got, ctrlTestToken); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendCtrlHeartbeat(b *testing.B) {
	m := ctrl.Msg{Type: ctrl.Heartbeat, Group: 1, Member: 2}
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := AppendCtrl(buf[:0], &m, ctrlTestToken); err != nil {
			b.Fatal(err)
		}
	}
}
