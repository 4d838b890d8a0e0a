package testbed

import (
	"errors"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
	}{
		{"100mbit", 100e6},
		{"100Mbit", 100e6},
		{"1gbit", 1e9},
		{"2.5gbit", 2.5e9},
		{"12.5mbps", 100e6},
		{"64kbit", 64e3},
		{"8000bit", 8000},
		{"1000bps", 8000},
		{"1tbit", 1e12},
	} {
		got, err := ParseRate(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "100", "mbit", "-1mbit", "+1mbit", "1kbitx", "fastmbit", "nanmbit", "infmbit", "1bit", "2000tbit"} {
		if got, err := ParseRate(in); !errors.Is(err, ErrConfig) {
			t.Errorf("ParseRate(%q) = %d, %v; want an error wrapping ErrConfig", in, got, err)
		}
	}
}

func TestFormatRate(t *testing.T) {
	for _, tc := range []struct {
		in   uint64
		want string
	}{{100e6, "100mbit"}, {1e9, "1gbit"}, {2.5e9, "2500mbit"}, {1500, "1500bit"}, {64e3, "64kbit"}} {
		if got := FormatRate(tc.in); got != tc.want {
			t.Errorf("FormatRate(%d) = %q, want %q", tc.in, got, tc.want)
		}
		if back, err := ParseRate(FormatRate(tc.in)); err == nil && back != tc.in {
			t.Errorf("ParseRate(FormatRate(%d)) = %d", tc.in, back)
		}
	}
}

func TestValidatePrefix(t *testing.T) {
	for _, p := range []string{"ndmatb", "a", "tb_2", "A1", strings.Repeat("x", MaxPrefixLen)} {
		if err := ValidatePrefix(p); err != nil {
			t.Errorf("ValidatePrefix(%q) = %v", p, err)
		}
	}
	for _, p := range []string{"", "1tb", "_tb", "tb-2", "tb/..", "tb.x", "tb 2", strings.Repeat("x", MaxPrefixLen+1)} {
		if err := ValidatePrefix(p); !errors.Is(err, ErrConfig) {
			t.Errorf("ValidatePrefix(%q) = %v, want ErrConfig", p, err)
		}
	}
}

func TestOwnedNS(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"tb-sw", true},
		{"tb-h0", true},
		{"tb-h17", true},
		{"tb-m3", true},
		{"tb-s2", true},
		{"tb-g0", true},
		{"tb-probe123", true},
		{"tb-l0", true},
		{"tb-l15", true},
		{"tb-l", false},
		{"tb-s", false},
		{"tb-sx", false},
		{"tb-h", false},
		{"tb-hx", false},
		{"tb-sw2", false},
		{"tb-probe", false},
		{"tb2-sw", false},
		{"tb-x-sw", false},
		{"xtb-sw", false},
		{"tb", false},
		{"other", false},
	} {
		if got := ownedNS("tb", tc.name); got != tc.want {
			t.Errorf("ownedNS(tb, %q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	var c Config
	subnet, rate, err := c.validate()
	if err != nil {
		t.Fatal(err)
	}
	if c.Prefix != DefaultPrefix || c.Hosts != DefaultHosts || c.MTU != DefaultMTU || c.Rate != DefaultRate ||
		c.Latency != DefaultLatency || c.MemSize != DefaultMemSize || c.StateDir == "" || c.Binary == "" || c.Switches != 1 {
		t.Errorf("defaults not applied: %+v", c)
	}
	if subnet != netip.MustParsePrefix(DefaultSubnet) || rate != 100e6 {
		t.Errorf("subnet %v rate %d", subnet, rate)
	}
	// Two 9014-byte frames beat 1 ms at 100 Mbit/s (12500 bytes).
	if c.Burst != 2*(9000+14) {
		t.Errorf("Burst = %d, want %d", c.Burst, 2*(9000+14))
	}
	c = Config{Rate: "10gbit"}
	if _, _, err := c.validate(); err != nil || c.Burst != 10e9/8/1000 {
		t.Errorf("10gbit: Burst = %d, %v; want 1 ms of it", c.Burst, err)
	}
	// Host links get their own rate and bucket.
	c = Config{HostRate: "10gbit"}
	if _, _, err := c.validate(); err != nil || c.hostRateBits != 10e9 || c.hostBurst != 10e9/8/1000 || c.Burst != 2*(9000+14) {
		t.Errorf("HostRate 10gbit: %d bit/s, burst %d (links %d), %v", c.hostRateBits, c.hostBurst, c.Burst, err)
	}
}

// TestConfigGoMaxProcs: automatic is one P per process when the
// processes outnumber the CPUs; -1 leaves Go's default; a count stays.
func TestConfigGoMaxProcs(t *testing.T) {
	if got := autoGoMaxProcs(9, 2); got != 1 {
		t.Errorf("9 processes on 2 CPUs: %d, want 1", got)
	}
	if got := autoGoMaxProcs(9, 16); got != 0 {
		t.Errorf("9 processes on 16 CPUs: %d, want 0 (Go's default)", got)
	}
	c := Config{Hosts: 3, MemNodes: 1}
	if _, _, err := c.validate(); err != nil || c.GoMaxProcs != autoGoMaxProcs(5, runtime.NumCPU()) {
		t.Errorf("automatic: %d, %v; want %d", c.GoMaxProcs, err, autoGoMaxProcs(5, runtime.NumCPU()))
	}
	c = Config{GoMaxProcs: -1}
	if _, _, err := c.validate(); err != nil || c.GoMaxProcs != 0 {
		t.Errorf("-1: %d, %v; want 0 (not set)", c.GoMaxProcs, err)
	}
	c = Config{GoMaxProcs: 3}
	if _, _, err := c.validate(); err != nil || c.GoMaxProcs != 3 {
		t.Errorf("3: %d, %v", c.GoMaxProcs, err)
	}
}

// TestConfigPeakRate: twice each link's rate by default, up to
// MaxPeakRate; none; or one rate above every link's.
func TestConfigPeakRate(t *testing.T) {
	for _, tc := range []struct {
		cfg              Config
		links, hostLinks uint64
	}{
		{Config{}, 200e6, 0},
		{Config{HostRate: "1gbit"}, 200e6, 2e9},
		{Config{Rate: "10gbit"}, 0, 0}, // 20 Gbit/s is finer than tbf times
		{Config{PeakRate: "None"}, 0, 0},
		{Config{PeakRate: "none", HostRate: "1gbit"}, 0, 0},
		{Config{PeakRate: "1gbit", HostRate: "500mbit"}, 1e9, 1e9},
		{Config{PeakRate: "101mbit"}, 101e6, 0},
	} {
		c := tc.cfg
		if _, _, err := c.validate(); err != nil || c.peakBits != tc.links || c.hostPeakBits != tc.hostLinks {
			t.Errorf("%+v: peak %d, hosts %d, %v; want %d, %d", tc.cfg, c.peakBits, c.hostPeakBits, err, tc.links, tc.hostLinks)
		}
	}
	// A tree's uplinks: the links' rate unless UplinkRate says, their own
	// bucket and peak.
	c := Config{Hosts: 4, Leaves: 2}
	if _, _, err := c.validate(); err != nil || c.uplinkRateBits != 100e6 || c.uplinkBurst != c.Burst || c.uplinkPeakBits != 200e6 {
		t.Errorf("leaves: uplinks %d bit/s, burst %d, peak %d, %v; want the links'", c.uplinkRateBits, c.uplinkBurst, c.uplinkPeakBits, err)
	}
	c = Config{Hosts: 4, Leaves: 2, UplinkRate: "10gbit", PeakRate: "none"}
	if _, _, err := c.validate(); err != nil || c.uplinkRateBits != 10e9 || c.uplinkBurst != 10e9/8/1000 || c.uplinkPeakBits != 0 {
		t.Errorf("leaves, 10gbit uplinks: %d bit/s, burst %d, peak %d, %v", c.uplinkRateBits, c.uplinkBurst, c.uplinkPeakBits, err)
	}
	if b := peakBucket(9000); b < 9014 || b > 2*9014 {
		t.Errorf("peak bucket at MTU 9000: %d bytes, want one frame and a bit", b)
	}
}

func TestQueuePackets(t *testing.T) {
	for _, tc := range []struct {
		rate    uint64
		burst   int
		latency time.Duration
		mtu     int
		want    int
	}{
		{100e6, 18028, 20 * time.Millisecond, 9000, 30},  // 268,028 B of 9,014-byte frames
		{1e9, 125000, 20 * time.Millisecond, 9000, 292},  // 2,625,000 B
		{100e6, 12500, 20 * time.Millisecond, 1500, 174}, // 262,500 B of 1,514-byte frames
		{8000, 1000, time.Millisecond, 1500, 2},          // less than one frame: two
	} {
		if got := queuePackets(tc.rate, tc.burst, tc.latency, tc.mtu); got != tc.want {
			t.Errorf("queuePackets(%d, %d, %v, %d) = %d, want %d", tc.rate, tc.burst, tc.latency, tc.mtu, got, tc.want)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		field string
		cfg   Config
	}{
		{"Prefix", Config{Prefix: "a-b"}},
		{"Hosts", Config{Hosts: -1}},
		{"Hosts", Config{Hosts: 600, MemNodes: 600}},
		{"MTU", Config{MTU: 100}},
		{"MTU", Config{MTU: 70000}},
		{"Rate", Config{Rate: "fast"}},
		{"HostRate", Config{HostRate: "0mbit"}},
		{"Burst", Config{Burst: 100}},
		{"PeakRate", Config{PeakRate: "fast"}},
		{"PeakRate", Config{PeakRate: "100mbit"}},                      // not above the rate
		{"PeakRate", Config{PeakRate: "150mbit", HostRate: "200mbit"}}, // not above the hosts' rate
		{"PeakRate", Config{PeakRate: "20gbit", Rate: "5gbit"}},        // above MaxPeakRate
		{"Latency", Config{Latency: time.Microsecond}},
		{"Subnet", Config{Subnet: "8.8.8.0/24"}},
		{"Subnet", Config{Subnet: "fd00::/64"}},
		{"Subnet", Config{Subnet: "10.0.0.1/16"}},
		{"Subnet", Config{Subnet: "10.0.0.0/29", Hosts: 8}},
		{"Subnet", Config{Subnet: "nonsense"}},
		{"MemSize", Config{MemSize: -1}},
		{"GoMaxProcs", Config{GoMaxProcs: -2}},
		{"Switches", Config{Switches: -1}},
		{"Switches", Config{Switches: MaxSwitches + 1}},
		{"UplinkRate", Config{UplinkRate: "10mbit"}},                                          // no leaves
		{"UplinkRate", Config{Hosts: 4, Leaves: 2, UplinkRate: "x"}},                          // not a rate
		{"PeakRate", Config{Hosts: 4, Leaves: 2, UplinkRate: "300mbit", PeakRate: "250mbit"}}, // not above the uplinks'
		{"Subnet", Config{Subnet: "10.0.0.0/29", Hosts: 4, Leaves: 2}},                        // 1 + 4 + 2 nodes
		{"Binary", Config{Binary: "/nonexistent/ndma"}},
		{"Binary", Config{Binary: "/"}},
	} {
		_, _, err := tc.cfg.validate()
		fe, ok := errors.AsType[*FieldError](err)
		if !ok || fe.Field != tc.field {
			t.Errorf("%+v: got %v, want a FieldError for %s", tc.cfg, err, tc.field)
		}
	}
}

func TestNodeAddr(t *testing.T) {
	p := netip.MustParsePrefix("10.77.0.0/16")
	for n, want := range map[int]string{1: "10.77.0.1", 2: "10.77.0.2", 256: "10.77.1.0", 300: "10.77.1.44"} {
		if got := nodeAddr(p, n).String(); got != want {
			t.Errorf("nodeAddr(%v, %d) = %s, want %s", p, n, got, want)
		}
	}
}

func TestRunErrorMessage(t *testing.T) {
	e1 := errors.New("exit status 1")
	one := &RunError{Ranks: []RankError{{Rank: 2, Err: e1}}}
	if got, want := one.Error(), "testbed: rank 2 failed: exit status 1"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	two := &RunError{Ranks: []RankError{{Rank: 0, Err: e1}, {Rank: 3, Err: errors.New("signal: killed")}}}
	if got, want := two.Error(), "testbed: ranks 0, 3 failed: rank 0: exit status 1; rank 3: signal: killed"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if !errors.Is(two, e1) {
		t.Error("RunError does not unwrap to its ranks' errors")
	}
}
