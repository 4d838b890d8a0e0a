package endpoint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/internal/simhost"
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// simCore puts c on simnet (internal/simhost): onDone, if set, gets each
// completed op; refill, if set, posts more work before each Poll, and
// then completions have the host polled again at once.
func simCore(c *Core, onDone func(now time.Time, op *Op), refill func(now time.Time)) *simhost.Host[*Op] {
	return &simhost.Host[*Op]{Core: c, Done: onDone, Before: refill, Repoll: refill != nil}
}

const (
	slotSize   = 24 << 10
	slotsPer   = 8
	counterOff = 0 // shared FetchAdd counter
)

// client runs a random workload against its own slots of the region and
// checks every result against a model.
type client struct {
	t           *testing.T
	id          int
	core        *Core
	server      netip.AddrPort
	key         uint64
	rng         *rand.Rand
	model       [slotsPer][]byte
	busy        [slotsPer]bool
	casWord     uint64
	remain      int
	inflight    int
	added       uint64 // sum of this client's FetchAdds
	ok, refused int
	seed        int64
}

func (c *client) base(slot int) uint64 {
	// word 0: shared counter; then per client a CAS word, then slots.
	return 64 + uint64(c.id)*(8+slotsPer*slotSize) + 8 + uint64(slot)*slotSize
}

func (c *client) casAddr() uint64 { return 64 + uint64(c.id)*(8+slotsPer*slotSize) }

type pending struct {
	slot  int
	want  []byte // expected memory of the slot after a mutating op, or read result
	kind  Kind
	bad   wire.Status
	delta uint64
}

func (c *client) refill(now time.Time) {
	for c.remain > 0 && c.inflight < slotsPer {
		slot := -1
		for i := range c.busy {
			if !c.busy[i] {
				slot = i
				break
			}
		}
		if slot < 0 {
			return
		}
		op, p := c.nextOp(slot)
		op.Token = 0
		pend[op] = p
		if err := c.core.Post(now, op); err != nil {
			c.t.Fatalf("seed %d: post: %v", c.seed, err)
		}
		c.busy[slot] = true
		c.inflight++
		c.remain--
	}
}

var pend = map[*Op]*pending{}

func (c *client) nextOp(slot int) (*Op, *pending) {
	r := c.rng
	m := c.model[slot]
	op := &Op{Peer: c.server, Key: c.key}
	p := &pending{slot: slot}
	switch k := r.IntN(10); {
	case k < 3: // write
		off := r.IntN(slotSize)
		n := r.IntN(slotSize - off + 1)
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		op.Kind, op.Addr, op.Buf = KindWrite, c.base(slot)+uint64(off), data
		p.want = append([]byte(nil), m...)
		copy(p.want[off:], data)
	case k < 6: // read
		off := r.IntN(slotSize)
		n := r.IntN(slotSize - off + 1)
		op.Kind, op.Addr, op.Buf = KindRead, c.base(slot)+uint64(off), make([]byte, n)
		p.want = append([]byte(nil), m[off:off+n]...)
	case k < 7: // vector i64 add / f64 max
		n := 8 * r.IntN(slotSize/8+1)
		data := make([]byte, n)
		p.want = append([]byte(nil), m...)
		if r.IntN(2) == 0 {
			op.Dtype, op.Alu = wire.DtypeI64, wire.AluAdd
			for i := 0; i < n; i += 8 {
				v := r.Uint64()
				binary.LittleEndian.PutUint64(data[i:], v)
				binary.LittleEndian.PutUint64(p.want[i:], binary.LittleEndian.Uint64(p.want[i:])+v)
			}
		} else {
			op.Dtype, op.Alu = wire.DtypeF64, wire.AluMax
			for i := 0; i < n; i += 8 {
				v := r.NormFloat64()
				binary.LittleEndian.PutUint64(data[i:], math.Float64bits(v))
				old := math.Float64frombits(binary.LittleEndian.Uint64(p.want[i:]))
				if v > old || math.IsNaN(old) {
					// memnode's rule for max: replace when b > a
					if v > old {
						binary.LittleEndian.PutUint64(p.want[i:], math.Float64bits(v))
					}
				}
			}
		}
		op.Kind, op.Addr, op.Buf = KindVector, c.base(slot), data
	case k < 8: // fetch-add on the shared counter
		d := uint64(r.IntN(1000) + 1)
		op.Kind, op.Addr, op.Add = KindFetchAdd, counterOff, d
		p.delta = d
	case k < 9 && slot == 0: // CAS increment of our word (slot 0 only: one CAS in flight)
		op.Kind, op.Addr, op.Compare, op.Swap = KindCAS, c.casAddr(), c.casWord, c.casWord+1
	case k < 9:
		op.Kind, op.Addr, op.Buf = KindRead, c.base(slot), make([]byte, slotSize)
		p.want = append([]byte(nil), m...)
	default: // refusals
		if r.IntN(2) == 0 {
			op.Kind, op.Key, op.Addr, op.Buf = KindRead, c.key^1, 0, make([]byte, 8)
			p.bad = wire.StatusBadKey
		} else {
			op.Kind, op.Addr, op.Buf = KindWrite, 1<<40, []byte{1}
			p.bad = wire.StatusOutOfBounds
		}
	}
	p.kind = op.Kind
	return op, p
}

func (c *client) done(now time.Time, op *Op) {
	p := pend[op]
	delete(pend, op)
	c.busy[p.slot] = false
	c.inflight--
	if p.bad != 0 {
		if !errors.Is(op.Err, p.bad) {
			c.t.Fatalf("seed %d: %v: want %v, got %v", c.seed, op.Kind, p.bad, op.Err)
		}
		var oe *OpError
		if !errors.As(op.Err, &oe) || oe.Peer != c.server {
			c.t.Fatalf("seed %d: error not an *OpError naming the peer: %v", c.seed, op.Err)
		}
		c.refused++
		return
	}
	if op.Err != nil {
		c.t.Fatalf("seed %d: client %d %v: %v", c.seed, c.id, op.Kind, op.Err)
	}
	c.ok++
	switch p.kind {
	case KindWrite, KindVector:
		c.model[p.slot] = p.want
	case KindRead:
		if !bytes.Equal(op.Buf, p.want) {
			c.t.Fatalf("seed %d: client %d read of %d bytes at %#x returned wrong data", c.seed, c.id, len(op.Buf), op.Addr)
		}
	case KindFetchAdd:
		c.added += p.delta
	case KindCAS:
		if op.Old != c.casWord {
			c.t.Fatalf("seed %d: CAS saw %d, want %d", c.seed, op.Old, c.casWord)
		}
		c.casWord++
	}
}

func runWorkload(t *testing.T, seed int64, l simnet.LinkConfig, clients, opsEach int) {
	t.Logf("seed %d", seed)
	net := simnet.New(seed)
	tcfg := transport.Config{MTU: 9000, Seed: uint64(seed), DeadTimeout: 5 * time.Minute}
	store, _ := memnode.NewStore(memnode.Config{})
	size := 64 + clients*(8+slotsPer*slotSize)
	key, err := store.Alloc(size, wire.PermAll, 0)
	if err != nil {
		t.Fatal(err)
	}
	srvCore, err := NewCore(Config{Transport: tcfg, Store: store, OpTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	srvAddr := netip.MustParseAddrPort("10.0.0.1:7000")
	net.Attach(srvAddr, simCore(srvCore, nil, nil), l, l)
	cs := make([]*client, clients)
	for i := range cs {
		tcfg.Seed = uint64(seed) + uint64(i) + 1
		core, err := NewCore(Config{Transport: tcfg, OpTimeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		c := &client{t: t, id: i, core: core, server: srvAddr, key: key, rng: rand.New(rand.NewPCG(uint64(seed), uint64(i))), remain: opsEach, seed: seed}
		for s := range c.model {
			c.model[s] = make([]byte, slotSize)
		}
		cs[i] = c
		net.Attach(netip.AddrPortFrom(netip.MustParseAddr("10.0.1.1"), uint16(1000+i)), simCore(core, c.done, c.refill), l, l)
	}
	err = net.RunUntil(func() bool {
		for _, c := range cs {
			if c.remain > 0 || c.inflight > 0 {
				return false
			}
		}
		return true
	}, time.Hour)
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	// Nothing may be retained once the work is done: every request and
	// response acknowledged, no op or partial request left behind.
	cores := []*Core{srvCore}
	for _, c := range cs {
		cores = append(cores, c.core)
	}
	if err := net.RunUntil(func() bool {
		for _, c := range cores {
			if !c.Idle() {
				return false
			}
		}
		return true
	}, time.Hour); err != nil {
		t.Fatalf("seed %d: state left behind: %v", seed, err)
	}
	if len(pend) != 0 {
		t.Fatalf("seed %d: %d ops never completed", seed, len(pend))
	}
	var sum uint64
	total := 0
	for _, c := range cs {
		sum += c.added
		total += c.ok + c.refused
	}
	// Check the shared counter and each client's memory through a final
	// direct look at the store.
	res := store.Exec(&wire.Header{Op: wire.OpRead, Key: key, Addr: counterOff, Operand1: 8}, nil)
	if got := binary.LittleEndian.Uint64(res.Data); got != sum {
		t.Fatalf("seed %d: counter %d, want %d (lost or doubled fetch-adds)", seed, got, sum)
	}
	for _, c := range cs {
		for s := range c.model {
			res := store.Exec(&wire.Header{Op: wire.OpRead, Key: key, Addr: c.base(s), Operand1: slotSize}, nil)
			if !bytes.Equal(res.Data, c.model[s]) {
				t.Fatalf("seed %d: client %d slot %d memory differs from model", seed, c.id, s)
			}
		}
	}
	if total != clients*opsEach {
		t.Fatalf("completed %d of %d", total, clients*opsEach)
	}
	t.Logf("%d ops in %v virtual; server %+v", total, net.Elapsed(), srvCore.Stats().Transport)
}

// TestMixedOpsUnderLoss runs thousands of mixed operations from several
// clients against one store over impaired links.
func TestMixedOpsUnderLoss(t *testing.T) {
	for _, loss := range []float64{0, 0.01, 0.10, 0.30} {
		t.Run(fmt.Sprintf("loss=%v", loss), func(t *testing.T) {
			l := simnet.LinkConfig{Rate: 10e9, Latency: 5 * time.Microsecond, Loss: loss}
			if loss > 0 {
				l.Reorder, l.Dup, l.Corrupt = 0.02, 0.02, 0.01
			}
			ops := 1000
			if loss >= 0.3 {
				ops = 300
			}
			runWorkload(t, int64(42+loss*100), l, 4, ops)
		})
	}
}

// TestTimeoutReleasesRequest: an op whose peer never answers fails with
// ErrTimeout at its deadline, and the transport lets go of the request (no
// retransmissions of a buffer the caller now owns again).
func TestTimeoutReleasesRequest(t *testing.T) {
	net := simnet.New(5)
	l := simnet.LinkConfig{Rate: 1e9, Latency: 5 * time.Microsecond}
	core, err := NewCore(Config{Transport: transport.Config{Seed: 5}})
	if err != nil {
		t.Fatal(err)
	}
	var got []*Op
	addr := netip.MustParseAddrPort("10.0.0.2:1")
	dead := netip.MustParseAddrPort("10.0.0.3:1")
	net.Attach(addr, simCore(core, func(_ time.Time, op *Op) { got = append(got, op) }, nil), l, l)
	op := &Op{Kind: KindWrite, Peer: dead, Key: 1, Buf: make([]byte, 100000), Timeout: 50 * time.Millisecond}
	if err := core.Post(net.Now(), op); err != nil {
		t.Fatal(err)
	}
	net.Wake(addr)
	if err := net.RunUntil(func() bool { return len(got) == 1 }, time.Second); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(op.Err, ErrTimeout) || net.Elapsed() > 60*time.Millisecond {
		t.Fatalf("err %v after %v", op.Err, net.Elapsed())
	}
	if !core.Idle() {
		t.Fatalf("request still held by the transport after the op timed out")
	}
}
