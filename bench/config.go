package bench

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire"
)

// Tests selects the measurements Run makes.
type Tests uint8

// Test sets. The zero value means TestAll.
const (
	TestLatency   Tests = 1 << iota // READ and WRITE per size, CAS and FetchAdd, and the UDP ping-pong baseline
	TestBandwidth                   // WRITE and READ per size with a window, and the TCP stream baseline
	TestAll       = TestLatency | TestBandwidth
)

// ParseTests parses a comma-separated list of "latency" (or "lat"),
// "bandwidth" (or "bw") and "all".
func ParseTests(s string) (Tests, error) {
	var t Tests
	for item := range strings.SplitSeq(s, ",") {
		switch strings.ToLower(strings.TrimSpace(item)) {
		case "latency", "lat":
			t |= TestLatency
		case "bandwidth", "bw":
			t |= TestBandwidth
		case "all":
			t |= TestAll
		default:
			return 0, fmt.Errorf("%w: test %q: want latency, bandwidth or all", ErrBadValue, item)
		}
	}
	return t, nil
}

// Defaults for zero Config and SimConfig fields.
const (
	DefaultWindow     = 16
	DefaultMTU        = 65000 // loopback: one 64 KiB payload per datagram, almost
	DefaultSimMTU     = 9000  // simnet: a jumbo-frame fabric
	DefaultRegionSize = 64 << 20
	DefaultSimRate    = 10e9 // bits per second
	DefaultSeed       = 1

	// MaxWindow bounds Config.Window and SimConfig.Window.
	MaxWindow = 1024
	// maxUDPPayload is the largest UDP ping-pong datagram.
	maxUDPPayload = netio.MaxDatagram
)

// DefaultLatencySizes are the sizes of the latency test when Config.Sizes
// is nil: 8 B to 64 KiB, powers of two.
var DefaultLatencySizes = PowersOfTwo(8, 64<<10)

// DefaultBandwidthSizes are the sizes of the bandwidth tests when
// Config.Sizes (or SimConfig.Sizes) is nil: 4 KiB to 16 MiB, powers of
// two.
var DefaultBandwidthSizes = PowersOfTwo(4<<10, 16<<20)

// Config configures Run. Zero values select the documented defaults.
type Config struct {
	// Server is the UDP address ("host:port") of an external memory node
	// (ndma memd). Empty starts a memory node in-process on loopback.
	Server string
	// Security, if set, is the identity the benchmark's endpoint seals
	// every datagram under, for a Server that seals (ndma memd with a
	// credential); SecurityOptions its options. Unused without Server.
	Security        *secure.Identity
	SecurityOptions secure.Options
	// Key is the region key at Server; required with Server, unused
	// without it. The benchmark overwrites the region's contents.
	Key uint64
	// RegionSize is the size of the region in bytes: the size allocated
	// for the in-process node, or the size of the region Key names at
	// Server (operations stay inside it). Zero means 64 MiB.
	RegionSize int
	// Tests selects the measurements; zero means TestAll.
	Tests Tests
	// Sizes are the operation sizes in bytes for every selected test.
	// Nil means DefaultLatencySizes for latency and DefaultBandwidthSizes
	// for bandwidth. CAS and FetchAdd are always measured at 8 bytes.
	Sizes []int
	// Iters is the number of measured operations per size. Zero picks by
	// size: 1000 up to 8 KiB, fewer above (at least 200) for latency; 512
	// MiB worth (16 to 20000 operations) for bandwidth.
	Iters int
	// Warmup is the number of unmeasured operations before each latency
	// measurement. Zero means a tenth of the iterations, at least 10.
	Warmup int
	// Window is the number of operations in flight in the bandwidth test.
	// Zero means 16; at most MaxWindow.
	Window int
	// MTU is the transport MTU in bytes, header included, of the
	// benchmark's endpoint and the in-process node. Zero means 65000.
	MTU int
	// BusyPoll is how long the benchmark's endpoint and the in-process
	// node poll their sockets before sleeping (netio.UDPConfig.BusyPoll);
	// zero sleeps at once.
	BusyPoll time.Duration
	// Progress, if not nil, is called after each measurement with the
	// number done and the total.
	Progress func(done, total int)
}

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("bench: invalid config")

func checkSizes(sizes []int, limit int) error {
	for _, s := range sizes {
		if s <= 0 {
			return fmt.Errorf("%w: size %d is not positive", ErrConfig, s)
		}
		if s > limit {
			return fmt.Errorf("%w: size %s exceeds the region (%s)", ErrConfig, FormatSize(s), FormatSize(limit))
		}
	}
	return nil
}

func checkMTU(mtu int) error {
	if mtu < wire.HeaderLen+64 || mtu > netio.MaxDatagram {
		return fmt.Errorf("%w: MTU %d outside [%d, %d]", ErrConfig, mtu, wire.HeaderLen+64, netio.MaxDatagram)
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.RegionSize == 0 {
		c.RegionSize = DefaultRegionSize
	}
	if c.Tests == 0 {
		c.Tests = TestAll
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
}

func (c *Config) validate() error {
	switch {
	case c.Server == "" && c.Key != 0:
		return fmt.Errorf("%w: Key is set without Server", ErrConfig)
	case c.Server != "" && c.Key == 0:
		return fmt.Errorf("%w: Server needs the region Key", ErrConfig)
	case c.RegionSize < 8:
		return fmt.Errorf("%w: RegionSize %d below 8 bytes", ErrConfig, c.RegionSize)
	case c.Tests&^TestAll != 0:
		return fmt.Errorf("%w: unknown Tests bits %#x", ErrConfig, uint8(c.Tests))
	case c.Iters < 0 || c.Warmup < 0:
		return fmt.Errorf("%w: Iters and Warmup must not be negative", ErrConfig)
	case c.Window < 1 || c.Window > MaxWindow:
		return fmt.Errorf("%w: Window %d outside [1, %d]", ErrConfig, c.Window, MaxWindow)
	}
	if err := checkMTU(c.MTU); err != nil {
		return err
	}
	return checkSizes(c.Sizes, c.RegionSize)
}

// latencyIters is the default iteration count of a latency measurement.
func latencyIters(size int) int {
	const base = 1000
	if size <= 8<<10 {
		return base
	}
	return max(200, base*(8<<10)/size)
}

// bandwidthBudget is the payload a default bandwidth measurement moves.
const bandwidthBudget = 512 << 20

// bandwidthIters is the default operation count of a bandwidth
// measurement.
func bandwidthIters(size int) int {
	return min(max(bandwidthBudget/size, 16), 20000)
}

func (c *Config) latIters(size int) int {
	if c.Iters > 0 {
		return c.Iters
	}
	return latencyIters(size)
}

func (c *Config) bwIters(size int) int {
	if c.Iters > 0 {
		return c.Iters
	}
	return bandwidthIters(size)
}

func (c *Config) warmup(iters int) int {
	if c.Warmup > 0 {
		return c.Warmup
	}
	return max(10, iters/10)
}
