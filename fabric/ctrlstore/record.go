package ctrlstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net/netip"

	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
	"github.com/ndma/ndma/wire/poolmap"
)

// Record is one pool region as the switch's map holds it.
type Record struct {
	Region uint32
	// Key is the region's key (a capability), or 0 while the switch does
	// not know it (a region rebuilt from the nodes' reports before any
	// client used it): Digest then identifies it.
	Key    uint64
	Digest [ctrl.PoolDigestLen]byte // ctrl.PoolKeyDigest(Region, Key)
	// Pool is the region's shape: Size, Stripe, Columns, Replicas and
	// Perm (the other fields are not recorded).
	Pool  ctrl.PoolSpec
	Epoch uint64
	// Homes, Lost and Rebuilding have Pool.Columns entries each, by
	// column.
	Homes            []ctrl.PoolHome
	Lost, Rebuilding []bool
	// Fences is the region's fences in increasing id order, at most
	// wire.MaxFences.
	Fences []wire.Fence
}

// Limits of a record.
const (
	// MaxRegions is the most region records a store holds: what the
	// switch's map holds.
	MaxRegions = ctrl.MaxPoolRegions
	// MaxRecordLen is the longest encoded record, in bytes: every column
	// with an IPv6 home and every fence.
	MaxRecordLen = recordHead + poolmap.MaxColumns*maxHome + 2 + wire.MaxFences*fenceLen + 4
)

const (
	recordMagic   = "NDMR"
	recordVersion = 1
	// magic, version, region, key, digest, epoch, size, stripe,
	// columns, replicas, perm
	recordHead     = 4 + 1 + 4 + 8 + ctrl.PoolDigestLen + 8 + 8 + 8 + 2 + 1 + 1
	maxHome        = 1 + 16 + 2 + 8 + 1 // address length, address, port, base, flags
	fenceLen       = 4 + 8
	flagLost       = 1
	flagRebuilding = 2
)

// ErrRecord is wrapped by every error ParseRecord returns.
var ErrRecord = errors.New("ctrlstore: bad region record")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// AppendRecord appends r's encoding to dst (docs/PROTOCOL.md, "Region
// records"): the magic "NDMR", version 1, the fields in order, big
// endian, and a CRC32C of everything before it. r must be valid (as
// ParseRecord checks).
func AppendRecord(dst []byte, r *Record) []byte {
	start := len(dst)
	dst = append(dst, recordMagic...)
	dst = append(dst, recordVersion)
	dst = binary.BigEndian.AppendUint32(dst, r.Region)
	dst = binary.BigEndian.AppendUint64(dst, r.Key)
	dst = append(dst, r.Digest[:]...)
	dst = binary.BigEndian.AppendUint64(dst, r.Epoch)
	dst = binary.BigEndian.AppendUint64(dst, r.Pool.Size)
	dst = binary.BigEndian.AppendUint64(dst, r.Pool.Stripe)
	dst = binary.BigEndian.AppendUint16(dst, uint16(r.Pool.Columns))
	dst = append(dst, byte(r.Pool.Replicas), r.Pool.Perm)
	for c, h := range r.Homes {
		a := h.Addr.Addr().Unmap().AsSlice()
		dst = append(dst, byte(len(a)))
		dst = append(dst, a...)
		dst = binary.BigEndian.AppendUint16(dst, h.Addr.Port())
		dst = binary.BigEndian.AppendUint64(dst, h.Base)
		var f byte
		if r.Lost[c] {
			f |= flagLost
		}
		if r.Rebuilding[c] {
			f |= flagRebuilding
		}
		dst = append(dst, f)
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(r.Fences)))
	for _, f := range r.Fences {
		dst = binary.BigEndian.AppendUint32(dst, f.ID)
		dst = binary.BigEndian.AppendUint64(dst, f.Token)
	}
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// ParseRecord decodes a record AppendRecord encoded. It refuses, with an
// error wrapping ErrRecord, anything else: a short or long value, another
// magic or version, a checksum that does not match, a shape
// poolmap.NewLayout refuses, permissions outside wire.PermAll, a home
// without a valid address, a column extent that overflows, fences out of
// order or too many, a digest that does not match a non-zero key.
func ParseRecord(b []byte) (*Record, error) {
	if len(b) < recordHead+2+4 || len(b) > MaxRecordLen {
		return nil, fmt.Errorf("%w: %d bytes, want %d to %d", ErrRecord, len(b), recordHead+6, MaxRecordLen)
	}
	body := b[:len(b)-4]
	if got, want := crc32.Checksum(body, castagnoli), binary.BigEndian.Uint32(b[len(body):]); got != want {
		return nil, fmt.Errorf("%w: checksum %#08x, want %#08x", ErrRecord, got, want)
	}
	if string(body[:4]) != recordMagic || body[4] != recordVersion {
		return nil, fmt.Errorf("%w: magic %q version %d, want %q version %d", ErrRecord, body[:4], body[4], recordMagic, recordVersion)
	}
	d := decoder{b: body[5:]}
	r := &Record{Region: d.u32(), Key: d.u64()}
	copy(r.Digest[:], d.take(ctrl.PoolDigestLen))
	r.Epoch = d.u64()
	r.Pool = ctrl.PoolSpec{Region: r.Region, Size: d.u64(), Stripe: d.u64(), Columns: int(d.u16())}
	r.Pool.Replicas, r.Pool.Perm = int(d.u8()), d.u8()
	l, err := poolmap.NewLayout(r.Pool.Size, r.Pool.Stripe, r.Pool.Columns, r.Pool.Replicas)
	switch {
	case r.Region == 0:
		return nil, fmt.Errorf("%w: region 0", ErrRecord)
	case err != nil:
		return nil, fmt.Errorf("%w: region %d: %w", ErrRecord, r.Region, err)
	case r.Pool.Perm == 0 || wire.Perm(r.Pool.Perm)&^wire.PermAll != 0:
		return nil, fmt.Errorf("%w: region %d: permissions %#x", ErrRecord, r.Region, r.Pool.Perm)
	case r.Key != 0 && ctrl.PoolKeyDigest(r.Region, r.Key) != r.Digest:
		return nil, fmt.Errorf("%w: region %d: the key does not match the digest", ErrRecord, r.Region)
	}
	k := r.Pool.Columns
	r.Homes, r.Lost, r.Rebuilding = make([]ctrl.PoolHome, k), make([]bool, k), make([]bool, k)
	for c := range k {
		if err := d.home(r, c, l.ColumnBytes(c)); err != nil {
			return nil, fmt.Errorf("%w: region %d column %d: %w", ErrRecord, r.Region, c, err)
		}
	}
	if n := int(d.u16()); n > wire.MaxFences || n*fenceLen > len(d.b) {
		return nil, fmt.Errorf("%w: region %d: %d fences", ErrRecord, r.Region, n)
	} else if n > 0 {
		r.Fences = make([]wire.Fence, n)
		for i := range r.Fences {
			r.Fences[i] = wire.Fence{ID: d.u32(), Token: d.u64()}
			if i > 0 && r.Fences[i].ID <= r.Fences[i-1].ID {
				return nil, fmt.Errorf("%w: region %d: fences out of order", ErrRecord, r.Region)
			}
		}
	}
	if d.short || len(d.b) != 0 {
		return nil, fmt.Errorf("%w: region %d: length does not match its columns and fences", ErrRecord, r.Region)
	}
	return r, nil
}

// decoder reads big-endian fields; past the end it reads zeros and sets
// short.
type decoder struct {
	b     []byte
	short bool
}

func (d *decoder) take(n int) []byte {
	if n > len(d.b) {
		d.short, d.b = true, nil
		return make([]byte, n)
	}
	s := d.b[:n]
	d.b = d.b[n:]
	return s
}

func (d *decoder) u8() uint8   { return d.take(1)[0] }
func (d *decoder) u16() uint16 { return binary.BigEndian.Uint16(d.take(2)) }
func (d *decoder) u32() uint32 { return binary.BigEndian.Uint32(d.take(4)) }
func (d *decoder) u64() uint64 { return binary.BigEndian.Uint64(d.take(8)) }

// home reads column c's home (its extent length n bytes) into r.
func (d *decoder) home(r *Record, c int, n uint64) error {
	alen := int(d.u8())
	if alen != 4 && alen != 16 {
		return fmt.Errorf("address length %d", alen)
	}
	a, _ := netip.AddrFromSlice(d.take(alen))
	port, base, f := d.u16(), d.u64(), d.u8()
	switch {
	case d.short:
		return errors.New("short")
	case a.IsUnspecified() || a.Is4In6() || port == 0:
		return fmt.Errorf("address %v", netip.AddrPortFrom(a, port))
	case base+n < base:
		return fmt.Errorf("extent at %d of %d bytes overflows", base, n)
	case f&^(flagLost|flagRebuilding) != 0 || f == flagRebuilding:
		return fmt.Errorf("flags %#x", f)
	}
	r.Homes[c] = ctrl.PoolHome{Addr: netip.AddrPortFrom(a, port), Base: base}
	r.Lost[c], r.Rebuilding[c] = f&flagLost != 0, f&flagRebuilding != 0
	return nil
}

// AppendChecksum appends the CRC32C of b to it, as AppendRecord ends a
// record (for tests and tools that build records by hand).
func AppendChecksum(b []byte) []byte {
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}
