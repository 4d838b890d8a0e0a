package fabric

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ndma/ndma/wire/ctrl"
)

func anycastRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

func mustNewSelector(t testing.TB, p ctrl.Policy, n int, ranges []ctrl.KeyRange) *Selector {
	t.Helper()
	s, err := NewSelector(p, n, ranges)
	if err != nil {
		t.Fatalf("NewSelector(%v, %d): %v", p, n, err)
	}
	return s
}

func TestPolicyStringParse(t *testing.T) {
	for _, p := range []ctrl.Policy{ctrl.PolicyLeastOutstanding, ctrl.PolicyRoundRobin, ctrl.PolicyKeyAffinity} {
		got, err := ParsePolicy(p.String())
		if err != nil || got != p {
			t.Errorf("ParsePolicy(%q) = %v, %v; want %v", p.String(), got, err, p)
		}
	}
	for _, s := range []string{"", "random", "Round-Robin"} {
		if _, err := ParsePolicy(s); !errors.Is(err, ErrSelectorConfig) {
			t.Errorf("ParsePolicy(%q) error = %v, want ErrSelectorConfig", s, err)
		}
	}
	if got := ctrl.Policy(0).String(); got != "Policy(0)" {
		t.Errorf("Policy(0).String() = %q", got)
	}
}

// anycastSim drives a selector with one new request per virtual tick. Each
// request is in flight for a random service time of 1..2*mean-1 ticks
// (times slowFactor on the slow member, if slow >= 0), then Done.
type anycastSim struct {
	s          *Selector
	rng        *rand.Rand
	mean       int
	slow       int
	slowFactor int
	inflight   []simReq
	count      []int
}

type simReq struct{ member, due int }

func (m *anycastSim) run(t *testing.T, seed uint64, requests int) {
	t.Helper()
	for now := range requests {
		// Complete everything due by now (swap-remove keeps the loop O(in flight)).
		for i := 0; i < len(m.inflight); {
			if r := m.inflight[i]; r.due <= now {
				m.s.Done(r.member)
				m.inflight[i] = m.inflight[len(m.inflight)-1]
				m.inflight = m.inflight[:len(m.inflight)-1]
				continue
			}
			i++
		}
		member, err := m.s.Pick(0)
		if err != nil {
			t.Fatalf("seed %d: request %d: Pick: %v", seed, now, err)
		}
		m.count[member]++
		service := 1 + m.rng.IntN(2*m.mean-1)
		if member == m.slow {
			service *= m.slowFactor
		}
		m.inflight = append(m.inflight, simReq{member, now + service})
	}
	// Cross-check the selector's counts with the simulation's.
	want := make([]int, len(m.count))
	for _, r := range m.inflight {
		want[r.member]++
	}
	for i, w := range want {
		if got := m.s.Outstanding(i); got != w {
			t.Fatalf("seed %d: Outstanding(%d) = %d, simulation has %d in flight", seed, i, got, w)
		}
	}
}

func TestLeastOutstandingBalance(t *testing.T) {
	const members, requests = 4, 100_000
	for _, seed := range []uint64{1, 2, 3} {
		s := mustNewSelector(t, ctrl.PolicyLeastOutstanding, members, nil)
		m := &anycastSim{s: s, rng: anycastRand(seed), mean: 16, slow: -1, count: make([]int, members)}
		m.run(t, seed, requests)
		lo, hi := slices.Min(m.count), slices.Max(m.count)
		t.Logf("seed %d: per member %v", seed, m.count)
		if lo == 0 || float64(hi)/float64(lo) > 1.1 {
			t.Fatalf("seed %d: per-member requests %v: max/min = %d/%d > 1.1", seed, m.count, hi, lo)
		}
		st := s.Stats()
		if st.Picks != requests || st.Failovers != 0 {
			t.Fatalf("seed %d: stats %+v", seed, st)
		}
		for i, c := range m.count {
			if st.PerMember[i] != uint64(c) {
				t.Fatalf("seed %d: Stats.PerMember = %v, want %v", seed, st.PerMember, m.count)
			}
		}
	}
}

func TestLeastOutstandingSlowMember(t *testing.T) {
	const members, requests, slow = 4, 100_000, 2
	for _, seed := range []uint64{1, 2, 3} {
		s := mustNewSelector(t, ctrl.PolicyLeastOutstanding, members, nil)
		m := &anycastSim{s: s, rng: anycastRand(seed), mean: 16, slow: slow, slowFactor: 4, count: make([]int, members)}
		m.run(t, seed, requests)
		others := slices.Delete(slices.Clone(m.count), slow, slow+1)
		t.Logf("seed %d: per member %v (member %d slow)", seed, m.count, slow)
		// A member 4x slower holds each request 4x longer; least outstanding
		// must send it clearly fewer than any other member.
		if lo := slices.Min(others); float64(m.count[slow]) > 0.75*float64(lo) {
			t.Fatalf("seed %d: slow member %d got %d requests, others %v: want < 0.75 * %d", seed, slow, m.count[slow], others, lo)
		}
		if lo, hi := slices.Min(others), slices.Max(others); float64(hi)/float64(lo) > 1.1 {
			t.Fatalf("seed %d: fast members unbalanced: %v", seed, others)
		}
	}
}

func TestLeastOutstandingTieRotation(t *testing.T) {
	s := mustNewSelector(t, ctrl.PolicyLeastOutstanding, 3, nil)
	// Every request done at once: all members always tie, so picks rotate.
	for i := range 9 {
		m, err := s.Pick(0)
		if err != nil || m != i%3 {
			t.Fatalf("pick %d = %d, %v; want %d", i, m, err, i%3)
		}
		s.Done(m)
	}
	// With load: after 0, 1, 2 each hold one, Done(1) makes 1 the least.
	s.Pick(0) // 0
	s.Pick(0) // 1
	s.Pick(0) // 2
	s.Done(1)
	s.Pick(0) // least is 1 (0 outstanding)
	if got := s.Outstanding(1); got != 1 {
		t.Fatalf("Outstanding(1) = %d, want 1", got)
	}
	s.Done(2)
	s.Done(1)
	s.Pick(0) // 1 and 2 tie at 0; 2 got there first
	if got := s.Outstanding(2); got != 1 {
		t.Fatalf("tie not broken first in, first out: outstanding %d %d %d", s.Outstanding(0), s.Outstanding(1), s.Outstanding(2))
	}
}

func TestRoundRobin(t *testing.T) {
	s := mustNewSelector(t, ctrl.PolicyRoundRobin, 4, nil)
	expect := func(want ...int) {
		t.Helper()
		for i, w := range want {
			m, err := s.Pick(uint64(i))
			if err != nil || m != w {
				t.Fatalf("pick %d = %d, %v; want %d (sequence %v)", i, m, err, w, want)
			}
		}
	}
	expect(0, 1, 2, 3, 0, 1)
	s.SetAlive(3, false)
	expect(2, 0, 1, 2, 0)
	s.SetAlive(0, false)
	s.SetAlive(2, false)
	expect(1, 1, 1)
	s.SetAlive(3, true)
	expect(3, 1, 3)
	s.SetAlive(1, false)
	s.SetAlive(3, false)
	if m, err := s.Pick(0); !errors.Is(err, ErrNoMember) || m != -1 {
		t.Fatalf("all dead: Pick = %d, %v; want -1, ErrNoMember", m, err)
	}
	s.SetAlive(0, true)
	expect(0, 0)
	// Round robin still counts outstanding.
	if got := s.Outstanding(0); got != 2 {
		t.Fatalf("Outstanding(0) = %d, want 2", got)
	}
}

// kaRanges is an ownership table over the whole key space: 16 equal slices,
// each with a gap of 1/16 at its end, slice i owned by i%4 with replica
// (i+1)%4. It is returned shuffled, to exercise sorting.
func kaRanges(rng *rand.Rand) []ctrl.KeyRange {
	const width = 1 << 60
	var rs []ctrl.KeyRange
	for i := range uint64(16) {
		rs = append(rs, ctrl.KeyRange{
			Start:    i * width,
			End:      i*width + width - width/16,
			Owner:    int(i % 4),
			Replicas: []int{int((i + 1) % 4)},
		})
	}
	rng.Shuffle(len(rs), func(i, j int) { rs[i], rs[j] = rs[j], rs[i] })
	return rs
}

// kaRefRange is the naive reference lookup: a linear scan.
func kaRefRange(rs []ctrl.KeyRange, key uint64) (ctrl.KeyRange, bool) {
	for _, r := range rs {
		if key >= r.Start && key < r.End {
			return r, true
		}
	}
	return ctrl.KeyRange{}, false
}

func TestKeyAffinity(t *testing.T) {
	const seed, requests, victim = 7, 100_000, 1
	rng := anycastRand(seed)
	rs := kaRanges(rng)
	s := mustNewSelector(t, ctrl.PolicyKeyAffinity, 4, rs)
	keys := make([]uint64, requests)
	for i := range keys {
		keys[i] = rng.Uint64()
	}

	// phase picks every key and checks it against the reference, with
	// victim dead or alive. It returns how many picks failed over.
	phase := func(name string, victimAlive bool) (failovers int) {
		t.Helper()
		for _, k := range keys {
			r, ok := kaRefRange(rs, k)
			m, err := s.Pick(k)
			if !ok {
				if !errors.Is(err, ErrNoOwner) || m != -1 {
					t.Fatalf("seed %d: %s: key %#x in no range: Pick = %d, %v; want ErrNoOwner", seed, name, k, m, err)
				}
				if o := s.Owner(k); o != -1 {
					t.Fatalf("seed %d: %s: Owner(%#x) = %d, want -1", seed, name, k, o)
				}
				continue
			}
			if err != nil {
				t.Fatalf("seed %d: %s: Pick(%#x): %v", seed, name, k, err)
			}
			if o := s.Owner(k); o != r.Owner {
				t.Fatalf("seed %d: %s: Owner(%#x) = %d, want %d", seed, name, k, o, r.Owner)
			}
			want := r.Owner
			if r.Owner == victim && !victimAlive {
				want = r.Replicas[0]
				failovers++
			}
			if m != want {
				t.Fatalf("seed %d: %s: key %#x (owner %d) went to %d, want %d", seed, name, k, r.Owner, m, want)
			}
			s.Done(m)
		}
		return failovers
	}

	phase("all alive", true)
	if st := s.Stats(); st.Failovers != 0 {
		t.Fatalf("Failovers = %d with all alive", st.Failovers)
	}
	s.SetAlive(victim, false)
	fo := phase("owner dead", false)
	if st := s.Stats(); st.Failovers != uint64(fo) || fo < requests/8 {
		t.Fatalf("Failovers = %d, want %d (about a quarter of %d)", st.Failovers, fo, requests)
	}
	s.SetAlive(victim, true)
	phase("owner back", true)
	st := s.Stats()
	if st.Failovers != uint64(fo) {
		t.Fatalf("Failovers grew to %d after the owner came back, want %d", st.Failovers, fo)
	}
	var sum uint64
	for _, c := range st.PerMember {
		sum += c
	}
	if sum != st.Picks {
		t.Fatalf("PerMember %v sums to %d, Picks %d", st.PerMember, sum, st.Picks)
	}

	// Owner and its only replica dead: ErrNoOwner for its keys; other keys
	// are still served.
	s.SetAlive(victim, false)
	s.SetAlive(victim+1, false)
	for _, k := range keys[:1000] {
		r, ok := kaRefRange(rs, k)
		if !ok {
			continue
		}
		m, err := s.Pick(k)
		switch {
		case r.Owner == victim:
			if !errors.Is(err, ErrNoOwner) {
				t.Fatalf("key %#x, owner and replica dead: Pick = %d, %v; want ErrNoOwner", k, m, err)
			}
		case r.Owner == victim+1: // replica victim+2 is alive
			if err != nil || m != r.Replicas[0] {
				t.Fatalf("key %#x: Pick = %d, %v; want replica %d", k, m, err, r.Replicas[0])
			}
		default:
			if err != nil || m != r.Owner {
				t.Fatalf("key %#x: Pick = %d, %v; want owner %d", k, m, err, r.Owner)
			}
		}
	}
	for m := range 4 {
		s.SetAlive(m, false)
	}
	if m, err := s.Pick(keys[0]); !errors.Is(err, ErrNoMember) || m != -1 {
		t.Fatalf("all dead: Pick = %d, %v; want ErrNoMember", m, err)
	}
}

func TestKeyAffinityFailoverOrderAndSetRanges(t *testing.T) {
	s := mustNewSelector(t, ctrl.PolicyKeyAffinity, 4, []ctrl.KeyRange{{Start: 10, End: 20, Owner: 0, Replicas: []int{2, 1}}})
	pick := func(key uint64) int {
		t.Helper()
		m, err := s.Pick(key)
		if err != nil {
			t.Fatalf("Pick(%d): %v", key, err)
		}
		return m
	}
	if m := pick(10); m != 0 {
		t.Fatalf("Pick(10) = %d, want 0", m)
	}
	s.SetAlive(0, false)
	if m := pick(19); m != 2 {
		t.Fatalf("owner dead: Pick = %d, want first replica 2", m)
	}
	s.SetAlive(2, false)
	if m := pick(15); m != 1 {
		t.Fatalf("owner and first replica dead: Pick = %d, want 1", m)
	}
	for _, k := range []uint64{0, 9, 20, ^uint64(0)} {
		if _, err := s.Pick(k); !errors.Is(err, ErrNoOwner) {
			t.Fatalf("Pick(%d) outside the range: %v, want ErrNoOwner", k, err)
		}
	}
	if st := s.Stats(); st.Picks != 3 || st.Failovers != 2 {
		t.Fatalf("stats %+v, want 3 picks, 2 failovers", st)
	}

	// The selector owns its copy: changing the caller's slice changes nothing.
	rs := []ctrl.KeyRange{{Start: 0, End: 100, Owner: 3, Replicas: []int{1}}}
	if err := s.SetRanges(rs); err != nil {
		t.Fatal(err)
	}
	rs[0].Owner, rs[0].Replicas[0] = 0, 2
	s.SetAlive(3, false)
	if m := pick(50); m != 1 {
		t.Fatalf("after SetRanges: Pick = %d, want replica 1", m)
	}
	// A rejected table leaves the old one in place.
	if err := s.SetRanges([]ctrl.KeyRange{{Start: 5, End: 5}}); !errors.Is(err, ErrRanges) {
		t.Fatalf("SetRanges(empty range) = %v, want ErrRanges", err)
	}
	if o := s.Owner(50); o != 3 {
		t.Fatalf("Owner(50) = %d after a rejected SetRanges, want 3", o)
	}
}

func TestSelectorValidation(t *testing.T) {
	ok := []ctrl.KeyRange{{Start: 0, End: 10, Owner: 0, Replicas: []int{1}}}
	cases := []struct {
		name   string
		p      ctrl.Policy
		n      int
		ranges []ctrl.KeyRange
		want   error
	}{
		{"n zero", ctrl.PolicyRoundRobin, 0, nil, ErrSelectorConfig},
		{"n negative", ctrl.PolicyLeastOutstanding, -1, nil, ErrSelectorConfig},
		{"n too large", ctrl.PolicyRoundRobin, MaxSelectorMembers + 1, nil, ErrSelectorConfig},
		{"policy zero", 0, 4, nil, ErrSelectorConfig},
		{"policy unknown", ctrl.PolicyKeyAffinity + 1, 4, nil, ErrSelectorConfig},
		{"ranges for round robin", ctrl.PolicyRoundRobin, 2, ok, ErrRanges},
		{"ranges for least outstanding", ctrl.PolicyLeastOutstanding, 2, ok, ErrRanges},
		{"key affinity without ranges", ctrl.PolicyKeyAffinity, 2, nil, ErrRanges},
		{"empty range", ctrl.PolicyKeyAffinity, 2, []ctrl.KeyRange{{Start: 5, End: 5}}, ErrRanges},
		{"inverted range", ctrl.PolicyKeyAffinity, 2, []ctrl.KeyRange{{Start: 6, End: 5}}, ErrRanges},
		{"overlap", ctrl.PolicyKeyAffinity, 2, []ctrl.KeyRange{{Start: 10, End: 20}, {Start: 0, End: 11, Owner: 1}}, ErrRanges},
		{"same start", ctrl.PolicyKeyAffinity, 2, []ctrl.KeyRange{{Start: 0, End: 20}, {Start: 0, End: 1}}, ErrRanges},
		{"owner out of range", ctrl.PolicyKeyAffinity, 2, []ctrl.KeyRange{{Start: 0, End: 1, Owner: 2}}, ErrRanges},
		{"owner negative", ctrl.PolicyKeyAffinity, 2, []ctrl.KeyRange{{Start: 0, End: 1, Owner: -1}}, ErrRanges},
		{"replica out of range", ctrl.PolicyKeyAffinity, 2, []ctrl.KeyRange{{Start: 0, End: 1, Replicas: []int{5}}}, ErrRanges},
		{"replica is owner", ctrl.PolicyKeyAffinity, 2, []ctrl.KeyRange{{Start: 0, End: 1, Replicas: []int{0}}}, ErrRanges},
		{"replica twice", ctrl.PolicyKeyAffinity, 3, []ctrl.KeyRange{{Start: 0, End: 1, Replicas: []int{1, 1}}}, ErrRanges},
	}
	for _, c := range cases {
		s, err := NewSelector(c.p, c.n, c.ranges)
		if !errors.Is(err, c.want) || s != nil {
			t.Errorf("%s: NewSelector = %v, %v; want nil, %v", c.name, s, err, c.want)
		}
	}
	// Valid edge cases.
	for _, c := range []struct {
		p      ctrl.Policy
		n      int
		ranges []ctrl.KeyRange
	}{
		{ctrl.PolicyRoundRobin, 1, nil},
		{ctrl.PolicyLeastOutstanding, MaxSelectorMembers, nil},
		{ctrl.PolicyRoundRobin, 3, []ctrl.KeyRange{}},
		{ctrl.PolicyKeyAffinity, 2, []ctrl.KeyRange{{Start: 10, End: 20, Owner: 1}, {Start: 0, End: 10}, {Start: 30, End: ^uint64(0), Replicas: []int{1}}}},
	} {
		if _, err := NewSelector(c.p, c.n, c.ranges); err != nil {
			t.Errorf("NewSelector(%v, %d, %v): %v", c.p, c.n, c.ranges, err)
		}
	}
	s := mustNewSelector(t, ctrl.PolicyRoundRobin, 2, nil)
	if err := s.SetRanges(ok); !errors.Is(err, ErrRanges) {
		t.Errorf("SetRanges on round robin = %v, want ErrRanges", err)
	}
	if s.Owner(0) != -1 {
		t.Errorf("Owner on round robin = %d, want -1", s.Owner(0))
	}
}

func TestDoneAndDeadReset(t *testing.T) {
	for _, p := range []ctrl.Policy{ctrl.PolicyLeastOutstanding, ctrl.PolicyRoundRobin, ctrl.PolicyKeyAffinity} {
		var rs []ctrl.KeyRange
		if p == ctrl.PolicyKeyAffinity {
			rs = []ctrl.KeyRange{{Start: 0, End: 100, Owner: 0, Replicas: []int{1}}}
		}
		s := mustNewSelector(t, p, 2, rs)
		s.Done(0)
		s.Done(0)
		if got := s.Outstanding(0); got != 0 {
			t.Fatalf("%v: Outstanding after extra Done = %d", p, got)
		}
		for range 3 {
			if _, err := s.Pick(0); err != nil {
				t.Fatalf("%v: Pick: %v", p, err)
			}
		}
		total := s.Outstanding(0) + s.Outstanding(1)
		if total != 3 {
			t.Fatalf("%v: outstanding total %d, want 3", p, total)
		}
		for range 5 {
			s.Done(0)
			s.Done(1)
		}
		if s.Outstanding(0) != 0 || s.Outstanding(1) != 0 {
			t.Fatalf("%v: outstanding %d/%d after extra Done", p, s.Outstanding(0), s.Outstanding(1))
		}
		s.Pick(0)
		s.Pick(0)
		s.Pick(0)
		s.SetAlive(0, false)
		if s.Alive(0) || s.Outstanding(0) != 0 {
			t.Fatalf("%v: dead member: alive %v, outstanding %d", p, s.Alive(0), s.Outstanding(0))
		}
		s.Done(0) // late reply from the dead member
		s.SetAlive(0, true)
		if !s.Alive(0) || s.Outstanding(0) != 0 {
			t.Fatalf("%v: revived member: alive %v, outstanding %d", p, s.Alive(0), s.Outstanding(0))
		}
		// Out-of-range indices are ignored.
		s.Done(-1)
		s.Done(2)
		s.SetAlive(7, false)
		if s.Alive(-1) || s.Alive(2) || s.Outstanding(9) != 0 {
			t.Fatalf("%v: out-of-range member reported alive or loaded", p)
		}
	}
}

// refSelector is a naive reference for least outstanding and round robin:
// full scans, no incremental bookkeeping. For least outstanding, ties go to
// the member whose load changed (or that came alive) longest ago: stamp.
type refSelector struct {
	policy ctrl.Policy
	alive  []bool
	out    []int
	stamp  []int
	clock  int
	next   int
}

func newRefSelector(p ctrl.Policy, n int) *refSelector {
	r := &refSelector{policy: p, alive: make([]bool, n), out: make([]int, n), stamp: make([]int, n), clock: n}
	for i := range n {
		r.alive[i], r.stamp[i] = true, i
	}
	return r
}

func (r *refSelector) touch(m int) { r.stamp[m] = r.clock; r.clock++ }

func (r *refSelector) done(m int) {
	if r.alive[m] && r.out[m] > 0 {
		r.out[m]--
		r.touch(m)
	}
}

func (r *refSelector) setAlive(m int, alive bool) {
	if r.alive[m] != alive {
		r.alive[m], r.out[m] = alive, 0
		r.touch(m)
	}
}

func (r *refSelector) pick() int {
	n := len(r.alive)
	best := -1
	for k := range n {
		i := (r.next + k) % n
		if !r.alive[i] {
			continue
		}
		if r.policy == ctrl.PolicyRoundRobin {
			best = i
			break
		}
		if best < 0 || r.out[i] < r.out[best] || r.out[i] == r.out[best] && r.stamp[i] < r.stamp[best] {
			best = i
		}
	}
	if best >= 0 {
		r.out[best]++
		r.touch(best)
		r.next = (best + 1) % n
	}
	return best
}

func TestSelectorMatchesReference(t *testing.T) {
	for _, p := range []ctrl.Policy{ctrl.PolicyLeastOutstanding, ctrl.PolicyRoundRobin} {
		for seed := uint64(1); seed <= 20; seed++ {
			rng := anycastRand(seed)
			n := 1 + rng.IntN(9)
			s := mustNewSelector(t, p, n, nil)
			ref := newRefSelector(p, n)
			for step := range 20_000 {
				m := rng.IntN(n)
				switch op := rng.IntN(100); {
				case op < 45:
					got, err := s.Pick(0)
					want := ref.pick()
					if want < 0 && !errors.Is(err, ErrNoMember) || want >= 0 && (err != nil || got != want) {
						t.Fatalf("%v seed %d step %d: Pick = %d, %v; reference %d", p, seed, step, got, err, want)
					}
				case op < 90:
					s.Done(m)
					ref.done(m)
				default:
					alive := rng.IntN(3) > 0
					s.SetAlive(m, alive)
					ref.setAlive(m, alive)
				}
				for i := range n {
					if s.Outstanding(i) != ref.out[i] || s.Alive(i) != ref.alive[i] {
						t.Fatalf("%v seed %d step %d: member %d: outstanding %d alive %v; reference %d %v",
							p, seed, step, i, s.Outstanding(i), s.Alive(i), ref.out[i], ref.alive[i])
					}
				}
			}
		}
	}
}

func TestPickDoneAllocs(t *testing.T) {
	rng := anycastRand(1)
	for _, p := range []ctrl.Policy{ctrl.PolicyLeastOutstanding, ctrl.PolicyRoundRobin, ctrl.PolicyKeyAffinity} {
		var rs []ctrl.KeyRange
		if p == ctrl.PolicyKeyAffinity {
			rs = kaRanges(rng)
		}
		s := mustNewSelector(t, p, 4, rs)
		s.SetAlive(1, false) // exercise failover and skipping too
		keys := make([]uint64, 64)
		for i := range keys {
			keys[i] = uint64(i) << 58 // all inside ranges
		}
		i := 0
		allocs := testing.AllocsPerRun(1000, func() {
			m, err := s.Pick(keys[i%len(keys)])
			i++
			if err != nil {
				panic(err)
			}
			s.Done(m)
		})
		if allocs != 0 {
			t.Errorf("%v: %v allocs per Pick+Done, want 0", p, allocs)
		}
	}
}

// benchSelectorPick runs Pick/Done with a window of inflight requests in
// flight, the oldest completing as each new one is picked.
func benchSelectorPick(b *testing.B, s *Selector, keys []uint64, inflight int) {
	window := make([]int, inflight)
	for i := range window {
		window[i] = -1
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		slot := i % len(window)
		if window[slot] >= 0 {
			s.Done(window[slot])
		}
		m, err := s.Pick(keys[i%len(keys)])
		if err != nil {
			b.Fatal(err)
		}
		window[slot] = m
		i++
	}
}

func BenchmarkPickLeastOutstanding(b *testing.B) {
	for _, c := range []struct{ members, inflight int }{{4, 32}, {64, 32}, {4096, 32}, {4096, 4096 * 8}} {
		b.Run(fmt.Sprintf("members=%d/inflight=%d", c.members, c.inflight), func(b *testing.B) {
			benchSelectorPick(b, mustNewSelector(b, ctrl.PolicyLeastOutstanding, c.members, nil), []uint64{0}, c.inflight)
		})
	}
}

func BenchmarkPickKeyAffinity(b *testing.B) {
	for _, nr := range []int{16, 4096} {
		b.Run(fmt.Sprintf("ranges=%d", nr), func(b *testing.B) {
			const members = 64
			width := ^uint64(0) / uint64(nr)
			rs := make([]ctrl.KeyRange, nr)
			for i := range rs {
				rs[i] = ctrl.KeyRange{Start: uint64(i) * width, End: uint64(i+1) * width, Owner: i % members, Replicas: []int{(i + 1) % members}}
			}
			rng := anycastRand(1)
			keys := make([]uint64, 1024)
			for i := range keys {
				keys[i] = rng.Uint64N(uint64(nr) * width)
			}
			benchSelectorPick(b, mustNewSelector(b, ctrl.PolicyKeyAffinity, members, rs), keys, 32)
		})
	}
}
