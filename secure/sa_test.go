package secure

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ndma/ndma/wire"
)

func testKeys(t testing.TB, info string) Keys {
	t.Helper()
	k, err := DeriveKeys([]byte("a handshake secret of 32 bytes!!"), nil, info)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// testKey is the region key in test packets.
const testKey = 0x1122334455667788

// packet is an encoded WRITE with payload, room for the tag.
func packet(t testing.TB, payload []byte) []byte {
	t.Helper()
	h := wire.Header{Version: wire.Version, Op: wire.OpWrite, MsgID: 7, Key: testKey, Addr: 4096, Operand1: 0xabcdef0123, MsgLen: uint32(len(payload))}
	b, err := wire.AppendPacket(make([]byte, 0, wire.HeaderLen+len(payload)+wire.TagLen), &h, payload)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func pair(t testing.TB, suite Suite, encrypt bool) (*SendSA, *RecvSA) {
	t.Helper()
	k := testKeys(t, "a to b")
	s, err := NewSendSA(9, suite, k, encrypt)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRecvSA(9, suite, k, encrypt)
	if err != nil {
		t.Fatal(err)
	}
	return s, r
}

// open parses and opens a sealed datagram as a receiver does.
func open(r *RecvSA, pkt []byte) ([]byte, error) {
	var h wire.Header
	if _, _, err := wire.Parse(pkt, &h); err != nil {
		return nil, err
	}
	return r.Open(&h, pkt)
}

// TestSealOpen: for both suites, encrypted and authenticated-only, a
// sealed packet is a valid wire packet with FlagAuth, the SA id and the
// sequence bits; encrypted, its payload is not in clear; opened, it gives
// the payload back.
func TestSealOpen(t *testing.T) {
	for _, suite := range []Suite{AESGCM, ChaCha20Poly1305} {
		for _, encrypt := range []bool{true, false} {
			t.Run(fmt.Sprintf("%v/encrypt=%v", suite, encrypt), func(t *testing.T) {
				s, r := pair(t, suite, encrypt)
				payload := bytes.Repeat([]byte("secret region bytes "), 50)
				for i := range 3 {
					in := packet(t, payload)
					if i == 1 {
						in = in[:len(in):len(in)] // no room for the tag
					}
					pkt, err := s.Seal(in)
					if err != nil {
						t.Fatal(err)
					}
					var h wire.Header
					if _, tag, err := wire.Parse(pkt, &h); err != nil || len(tag) != wire.TagLen {
						t.Fatalf("sealed packet: %v, tag %d bytes", err, len(tag))
					}
					if h.Flags&wire.FlagAuth == 0 || h.SAID != 9 || h.SASeq != uint32(i+1) {
						t.Fatalf("sealed header: flags %v, SAID %d, seq %d", h.Flags, h.SAID, h.SASeq)
					}
					if clear := bytes.Contains(pkt, []byte("secret region")); clear == encrypt {
						t.Fatalf("payload in clear: %v, want %v", clear, !encrypt)
					}
					keyBytes := binary.BigEndian.AppendUint64(nil, testKey)
					if clear := bytes.Contains(pkt, keyBytes); clear == encrypt || h.Key == testKey == encrypt {
						t.Fatalf("region key in clear: %v, want %v", clear, !encrypt)
					}
					got, err := r.Open(&h, pkt)
					if err != nil || !bytes.Equal(got, payload) {
						t.Fatalf("open: %v, payload equal %v", err, bytes.Equal(got, payload))
					}
					// The header's encrypted fields are back in place.
					be := binary.BigEndian
					if k, a, o := be.Uint64(pkt[56:]), be.Uint64(pkt[48:]), be.Uint64(pkt[64:]); k != testKey || a != 4096 || o != 0xabcdef0123 {
						t.Fatalf("opened header: key %#x, addr %d, operand1 %#x", k, a, o)
					}
				}
			})
		}
	}
}

// TestOpenRefuses: a changed byte anywhere (header, payload, tag), a
// wrong key, a replay and a packet for another SA are refused, and a
// refused packet does not move the window.
func TestOpenRefuses(t *testing.T) {
	for _, encrypt := range []bool{true, false} {
		s, r := pair(t, AESGCM, encrypt)
		sealed, err := s.Seal(packet(t, []byte("payload of a write")))
		if err != nil {
			t.Fatal(err)
		}
		for _, pos := range []int{1, 4, 16, 24, 40 - 0, 48, 56, 64, 80, 89, wire.HeaderLen, wire.HeaderLen + 5, len(sealed) - 1} {
			pkt := bytes.Clone(sealed)
			pkt[pos] ^= 0x20
			// Keep the CRC right, as a forger would, so that the
			// AEAD is what refuses it.
			wire.Seal(pkt[:len(pkt)-wire.TagLen])
			if _, err := open(r, pkt); err == nil {
				t.Errorf("encrypt=%v: byte %d changed: accepted", encrypt, pos)
			}
		}
		if r.win.Top() != 0 {
			t.Fatalf("refused packets moved the window to %d", r.win.Top())
		}
		other, _ := NewRecvSA(9, AESGCM, testKeys(t, "another key"), encrypt)
		if _, err := open(other, bytes.Clone(sealed)); !errors.Is(err, ErrAuth) {
			t.Errorf("wrong key: %v, want ErrAuth", err)
		}
		wrongSA, _ := NewRecvSA(10, AESGCM, testKeys(t, "a to b"), encrypt)
		if _, err := open(wrongSA, bytes.Clone(sealed)); !errors.Is(err, ErrNotSealed) {
			t.Errorf("another SA's packet: %v, want ErrNotSealed", err)
		}
		if _, err := open(r, bytes.Clone(sealed)); err != nil {
			t.Fatalf("the original: %v", err)
		}
		if _, err := open(r, bytes.Clone(sealed)); !errors.Is(err, ErrReplay) {
			t.Errorf("replay: %v, want ErrReplay", err)
		}
		plain := packet(t, []byte("x"))
		var h wire.Header
		if _, _, err := wire.Parse(plain, &h); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Open(&h, plain); !errors.Is(err, ErrNotSealed) {
			t.Errorf("unsealed packet: %v, want ErrNotSealed", err)
		}
	}
}

// TestReorderAndWrap: packets arriving out of order within the window
// open once each; one behind the window is refused; sequence numbers
// whose low 32 bits wrap are inferred right, and a packet sealed with a
// sequence the receiver infers otherwise fails authentication.
func TestReorderAndWrap(t *testing.T) {
	s, r := pair(t, ChaCha20Poly1305, true)
	s.seq = 1<<32 - 100 // near the wrap of the low bits
	r.win.top, r.win.blocks = s.seq, [windowBlocks]uint64{}
	var pkts [][]byte
	for range 300 {
		p, err := s.Seal(packet(t, []byte{1, 2, 3}))
		if err != nil {
			t.Fatal(err)
		}
		pkts = append(pkts, p)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(pkts), func(i, j int) { pkts[i], pkts[j] = pkts[j], pkts[i] })
	for i, p := range pkts {
		if _, err := open(r, bytes.Clone(p)); err != nil {
			t.Fatalf("packet %d (reordered, across the wrap): %v", i, err)
		}
	}
	if want := uint64(1<<32 + 200); r.win.Top() != want {
		t.Fatalf("window top %d, want %d", r.win.Top(), want)
	}
	for _, p := range pkts[:5] {
		if _, err := open(r, bytes.Clone(p)); !errors.Is(err, ErrReplay) {
			t.Fatalf("replay after the wrap: %v", err)
		}
	}
	// Ahead, then a packet now just behind the window: refused by the
	// window. One further behind is taken for the next epoch of the low
	// bits (RFC 4303) and fails authentication: refused all the same.
	older, _ := s.Seal(packet(t, []byte{3}))
	s.seq += 100
	old, _ := s.Seal(packet(t, []byte{4}))
	s.seq += WindowSize - 64 - 1
	ahead, _ := s.Seal(packet(t, []byte{5}))
	if _, err := open(r, ahead); err != nil {
		t.Fatal(err)
	}
	if _, err := open(r, old); !errors.Is(err, ErrReplay) {
		t.Fatalf("packet just behind the window: %v, want ErrReplay", err)
	}
	if _, err := open(r, older); err == nil {
		t.Fatal("packet far behind the window accepted")
	}
}

// TestExhausted: an SA never reuses a nonce: at the end of its sequence
// numbers Seal refuses.
func TestExhausted(t *testing.T) {
	s, _ := pair(t, AESGCM, true)
	s.seq = maxSeq - 1
	if _, err := s.Seal(packet(t, []byte{1})); err != nil {
		t.Fatal(err)
	}
	if !s.NeedsRekey() {
		t.Fatal("NeedsRekey false at the end of the sequence numbers")
	}
	if _, err := s.Seal(packet(t, []byte{1})); !errors.Is(err, ErrExhausted) {
		t.Fatalf("seal past the last sequence number: %v", err)
	}
}

// TestDeriveKeys: the same inputs give the same keys; another label,
// salt or secret gives others.
func TestDeriveKeys(t *testing.T) {
	a := testKeys(t, "a to b")
	if a != testKeys(t, "a to b") {
		t.Fatal("DeriveKeys is not deterministic")
	}
	b := testKeys(t, "b to a")
	c, _ := DeriveKeys([]byte("a handshake secret of 32 bytes!!"), []byte("salt"), "a to b")
	d, _ := DeriveKeys([]byte("another secret"), nil, "a to b")
	for _, o := range []Keys{b, c, d} {
		if o.Key == a.Key || o.Salt == a.Salt {
			t.Fatal("different inputs gave the same key or salt")
		}
	}
}

func BenchmarkSealOpen(b *testing.B) {
	for _, suite := range []Suite{AESGCM, ChaCha20Poly1305} {
		for _, size := range []int{64, 8192} {
			b.Run(fmt.Sprintf("%v/%d", suite, size), func(b *testing.B) {
				s, r := pair(b, suite, true)
				payload := make([]byte, size)
				buf := make([]byte, 0, wire.HeaderLen+size+wire.TagLen)
				var h wire.Header
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					pkt, _ := wire.AppendPacket(buf, &wire.Header{Version: wire.Version, Op: wire.OpWrite, MsgLen: uint32(size)}, payload)
					pkt, err := s.Seal(pkt)
					if err != nil {
						b.Fatal(err)
					}
					if _, _, err := wire.Parse(pkt, &h); err != nil {
						b.Fatal(err)
					}
					if _, err := r.Open(&h, pkt); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
