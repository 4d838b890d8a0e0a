package stor

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// The decoders of proto.go see bytes from the network: a node parses
// requests from any client or gateway. They must never panic, and what
// they accept must be exactly what the encoders write (a request parses
// only if it is the encoding of what it parses to), so that a node and a
// gateway never read one request two ways. The dispatchers call them with
// the op byte present (they refuse an empty request first), as these do.

var oneOps = [...]uint8{opWriteOne, opGwWrite, opFlushOne, opGwFlush}

// FuzzReadReq checks parseRead (an opRead request) on any bytes after
// the op byte.
func FuzzReadReq(f *testing.F) {
	for _, r := range []readReq{
		{Name: "vol0", Off: 0, Len: 4096, MinVer: 0},
		{Name: "data-01", Off: 1 << 30, Len: MaxIO, MinVer: 7 | resyncRead},
		{Name: string(bytes.Repeat([]byte{'n'}, MaxName)), Off: ^uint64(0), Len: ^uint32(0), MinVer: ^uint64(0)},
	} {
		f.Add(r.append(nil)[1:])
	}
	f.Add([]byte{})
	f.Add([]byte{200, 'x'})
	f.Fuzz(func(t *testing.T, body []byte) {
		req := append([]byte{opRead}, body...)
		r, ok := parseRead(req)
		if !ok {
			return
		}
		if again := r.append(nil); !bytes.Equal(again, req) {
			t.Fatalf("parseRead accepted % x as %+v, which encodes as % x", req, r, again)
		}
	})
}

// FuzzOneReq checks parseOne (opWriteOne, opGwWrite, opFlushOne,
// opGwFlush) on any bytes after the op byte.
func FuzzOneReq(f *testing.F) {
	for i, op := range oneOps {
		r := oneReq{Name: "vol0", Holder: uint64(i) + 1, Ver: 3, Off: 8192, Data: []byte("some data")}
		f.Add(uint8(i), r.append(nil, op)[1:])
	}
	f.Add(uint8(0), []byte{})
	f.Add(uint8(2), []byte{4, 'v', 'o', 'l'})
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		op := oneOps[int(which)%len(oneOps)]
		req := append([]byte{op}, body...)
		r, ok := parseOne(req)
		if !ok {
			return
		}
		if again := r.append(nil, op); !bytes.Equal(again, req) {
			t.Fatalf("parseOne accepted % x as %+v, which encodes as % x", req, r, again)
		}
	})
}

// FuzzProtoRoundTrip encodes requests from any field values (names as
// long as the one-byte length allows; volume names are at most MaxName)
// and checks that each decodes to what was encoded: readReq, every kind
// of oneReq, and the opWrite multicast's header as applyWrite reads it.
// Every answer code has an error, and only CodeOK has none.
func FuzzProtoRoundTrip(f *testing.F) {
	f.Add("vol0", uint64(1), uint64(2), uint64(4096), uint32(512), []byte("data"), uint8(0))
	f.Add("", uint64(0), uint64(0), uint64(0), uint32(0), []byte{}, uint8(255))
	f.Fuzz(func(t *testing.T, name string, holder, ver, off uint64, n uint32, data []byte, code uint8) {
		if (Code(code).Err() == nil) != (Code(code) == CodeOK) {
			t.Fatalf("code %d: error %v", code, Code(code).Err())
		}
		if len(name) > 255 {
			return
		}
		rr := readReq{Name: name, Off: off, Len: n, MinVer: ver}
		if got, ok := parseRead(rr.append(nil)); !ok || got != rr {
			t.Fatalf("readReq %+v parsed back as %+v (ok %v)", rr, got, ok)
		}
		for _, op := range oneOps {
			want := oneReq{Name: name, Holder: holder}
			if op == opWriteOne || op == opGwWrite {
				want.Ver, want.Off, want.Data = ver, off, data
			}
			got, ok := parseOne(want.append(nil, op))
			if !ok || got.Name != want.Name || got.Holder != want.Holder || got.Ver != want.Ver || got.Off != want.Off || !bytes.Equal(got.Data, want.Data) {
				t.Fatalf("op %d: oneReq %+v parsed back as %+v (ok %v)", op, want, got, ok)
			}
		}
		w := appendWrite(nil, ver, off, data)
		if len(w) != writeHdr+len(data) || w[0] != opWrite || binary.BigEndian.Uint64(w[1:]) != ver ||
			binary.BigEndian.Uint64(w[9:]) != off || !bytes.Equal(w[writeHdr:], data) {
			t.Fatalf("appendWrite(%d, %d, % x) = % x", ver, off, data, w)
		}
	})
}
