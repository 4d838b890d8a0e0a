package netio

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"
)

// Defaults applied by ListenUDP to zero-valued UDPConfig fields.
const (
	// DefaultBatchSize is the number of datagrams per ReadBatch/WriteBatch
	// system call when UDPConfig.BatchSize is zero.
	DefaultBatchSize = 64
	// MaxBatchSize is the largest UDPConfig.BatchSize accepted; it is the
	// kernel's limit on messages per recvmmsg/sendmmsg call (UIO_MAXIOV).
	MaxBatchSize = 1024
	// DefaultSocketBuffer is the kernel receive and send buffer size
	// requested when UDPConfig.SocketBuffer is zero, in bytes.
	DefaultSocketBuffer = 8 << 20
	// MaxBusyPoll is the largest UDPConfig.BusyPoll accepted.
	MaxBusyPoll = 10 * time.Millisecond
	// DefaultControlTOS is the IP type-of-service byte (IPv6 traffic
	// class) of datagrams marked Control when UDPConfig.ControlTOS is
	// zero: IPTOS_LOWDELAY, which Linux maps to priority
	// TC_PRIO_INTERACTIVE, the first band of the pfifo_fast and prio
	// qdiscs' default priority map.
	DefaultControlTOS = 0x10
)

// EnvDisableGSO names the environment variable that, when set to a true
// value accepted by strconv.ParseBool ("1", "true", ...), disables both UDP
// GSO and GRO for every UDPConn opened afterwards, whatever UDPConfig says.
// It exists to rule offloads in or out when diagnosing a host.
const EnvDisableGSO = "NDMA_DISABLE_GSO"

// EnvControlTOS names the environment variable that, when set, replaces
// UDPConfig.ControlTOS for every UDPConn opened afterwards: a TOS byte
// from 0 to 255, decimal or 0x-prefixed hexadecimal ("0xb8"), 0 or "off"
// to send Control datagrams unmarked. It suits a network whose priority
// queues act on another code point than IPTOS_LOWDELAY, and reaches
// every NDMA process at once (switch, memory nodes, ranks).
const EnvControlTOS = "NDMA_CONTROL_TOS"

var (
	// ErrInvalidConfig is wrapped by the error ListenUDP returns for a
	// UDPConfig that fails validation, and by the error for a malformed
	// EnvDisableGSO value.
	ErrInvalidConfig = errors.New("netio: invalid UDP configuration")
	// ErrShortBuffer is wrapped by the error ReadBatch returns when a
	// Datagram's Buf has capacity below MaxDatagram.
	ErrShortBuffer = errors.New("netio: receive buffer capacity below MaxDatagram")
	// ErrUnsupportedAddr is wrapped by the error WriteBatch returns when a
	// destination is invalid or of an address family the socket cannot
	// reach (an IPv6 destination on an IPv4 socket). Nothing in that batch
	// is sent.
	ErrUnsupportedAddr = errors.New("netio: unsupported destination address")
)

// UDPConfig configures ListenUDP. The zero value is ready to use; each
// field documents its zero-value default.
type UDPConfig struct {
	// BatchSize is the largest number of messages per recvmmsg/sendmmsg
	// system call (one datagram each, except that with GSO or GRO a
	// message carries up to 64), and what BatchSize() reports. Zero means
	// DefaultBatchSize (64); at most MaxBatchSize.
	BatchSize int
	// SocketBuffer is the size requested for both the kernel receive
	// (SO_RCVBUF) and send (SO_SNDBUF) buffers, in bytes. Zero means
	// DefaultSocketBuffer (8 MiB). On Linux the ...FORCE variants are tried
	// first so that root can exceed net.core.rmem_max/wmem_max; if the
	// kernel refuses, it silently falls back to the capped variants.
	SocketBuffer int
	// DisableGSO turns off UDP generic segmentation offload on send
	// (Linux). False means GSO is used when the kernel supports it.
	DisableGSO bool
	// DisableGRO turns off UDP generic receive offload (Linux). False means
	// GRO is used when the kernel supports it; the conn then receives into
	// BatchSize internal 64 KiB buffers and copies each datagram into the
	// caller's, instead of receiving into the caller's buffers directly.
	DisableGRO bool
	// BusyPoll is how long ReadBatch keeps polling an empty socket
	// before it sleeps until a datagram arrives (Linux; at most
	// MaxBusyPoll). Zero, the default, sleeps at once. Polling takes the
	// wake-up of a sleeping thread off the receive path (several
	// microseconds per datagram, tens on a busy virtual machine) at the
	// price of the CPU the poll burns: up to BusyPoll of one core after
	// every receive. Between polls the reader yields to the process's
	// other goroutines, and it does not poll while the machine has more
	// runnable threads than CPUs (sampled from /proc/loadavg every 10
	// ms), where its spinning would delay a process with work.
	BusyPoll time.Duration
	// ReusePort sets SO_REUSEPORT before binding (Linux only): several
	// sockets of one process bound to the same address then share its
	// traffic, the kernel spreading it by flow (source and destination
	// address and port), so that each can have a reader of its own.
	// Every socket bound to the address must set it; the kernel admits
	// only sockets of the same user to the group.
	ReusePort bool
	// ControlTOS is the IP type-of-service byte (the IPv6 traffic class)
	// WriteBatch sets on datagrams marked Control (Linux; a per-message
	// IP_TOS or IPV6_TCLASS control message), so that a priority queue on
	// the path can send acknowledgments ahead of queued data. Zero means
	// DefaultControlTOS; negative sends Control datagrams unmarked, like
	// the rest; at most 255. Other datagrams keep the socket's TOS (0).
	// EnvControlTOS, when set, replaces it.
	ControlTOS int
	// Logger receives diagnostics (offload probing and fallbacks, dropped
	// datagrams at debug level). Nil means discard.
	Logger *slog.Logger
}

// validate reports the first invalid field of c.
func (c *UDPConfig) validate() error {
	switch {
	case c.BatchSize < 0:
		return fmt.Errorf("%w: BatchSize %d is negative", ErrInvalidConfig, c.BatchSize)
	case c.BatchSize > MaxBatchSize:
		return fmt.Errorf("%w: BatchSize %d exceeds %d", ErrInvalidConfig, c.BatchSize, MaxBatchSize)
	case c.SocketBuffer < 0:
		return fmt.Errorf("%w: SocketBuffer %d is negative", ErrInvalidConfig, c.SocketBuffer)
	case c.SocketBuffer > math.MaxInt32:
		return fmt.Errorf("%w: SocketBuffer %d exceeds %d bytes", ErrInvalidConfig, c.SocketBuffer, math.MaxInt32)
	case c.BusyPoll < 0:
		return fmt.Errorf("%w: BusyPoll %v is negative", ErrInvalidConfig, c.BusyPoll)
	case c.BusyPoll > MaxBusyPoll:
		return fmt.Errorf("%w: BusyPoll %v exceeds %v", ErrInvalidConfig, c.BusyPoll, MaxBusyPoll)
	case c.BusyPoll > 0 && !busyPollSupported:
		return fmt.Errorf("%w: BusyPoll is supported on Linux only", ErrInvalidConfig)
	case c.ControlTOS > 255:
		return fmt.Errorf("%w: ControlTOS %#x exceeds 0xff", ErrInvalidConfig, c.ControlTOS)
	case c.ReusePort && runtime.GOOS != "linux":
		return fmt.Errorf("%w: ReusePort is supported on Linux only", ErrInvalidConfig)
	}
	return nil
}

// withDefaults returns c with zero fields replaced by their defaults and
// the EnvDisableGSO override applied. c must be valid.
func (c UDPConfig) withDefaults() (UDPConfig, error) {
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.SocketBuffer == 0 {
		c.SocketBuffer = DefaultSocketBuffer
	}
	if c.ControlTOS == 0 {
		c.ControlTOS = DefaultControlTOS
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if v, ok := os.LookupEnv(EnvDisableGSO); ok && v != "" {
		off, err := strconv.ParseBool(v)
		if err != nil {
			return c, fmt.Errorf("%w: %s=%q is not a boolean", ErrInvalidConfig, EnvDisableGSO, v)
		}
		if off {
			c.DisableGSO = true
			c.DisableGRO = true
		}
	}
	if v, ok := os.LookupEnv(EnvControlTOS); ok && v != "" {
		tos, err := strconv.ParseInt(v, 0, 0)
		switch {
		case v == "off":
			c.ControlTOS = -1
		case err != nil || tos < 0 || tos > 255:
			return c, fmt.Errorf("%w: %s=%q: want a TOS byte from 0 to 255 (such as 0x10) or off", ErrInvalidConfig, EnvControlTOS, v)
		case tos == 0:
			c.ControlTOS = -1
		default:
			c.ControlTOS = int(tos)
		}
	}
	return c, nil
}

// UDPStats is a snapshot of a UDPConn's counters. Datagram counts are of
// individual UDP payloads, whether or not the kernel moved them coalesced;
// byte counts are payload bytes, excluding IP and UDP headers.
type UDPStats struct {
	// DatagramsSent and BytesSent count datagrams the kernel accepted.
	DatagramsSent uint64
	BytesSent     uint64
	// DatagramsReceived and BytesReceived count datagrams delivered to
	// ReadBatch callers.
	DatagramsReceived uint64
	BytesReceived     uint64
	// GSOSends counts send messages that carried more than one datagram as
	// one UDP_SEGMENT super-datagram.
	GSOSends uint64
	// GROReceives counts received buffers in which the kernel had
	// coalesced more than one datagram (UDP_GRO).
	GROReceives uint64
	// SendDrops counts datagrams WriteBatch dropped because the kernel
	// refused that datagram (unreachable route, EMSGSIZE, ENOBUFS, a
	// firewall's EPERM, a destination not routable from the socket's
	// address such as another host from a loopback-bound socket, ...),
	// which WriteBatch treats as network loss. Unroutable destinations
	// are also logged, at most once a minute.
	SendDrops uint64
	// ReceiveDrops counts datagrams discarded on receive because they did
	// not fit the receive buffer (over MaxDatagram, possible over IPv6).
	// A GRO buffer the kernel truncated counts once, however many
	// datagrams it held.
	ReceiveDrops uint64
	// ReadSleeps counts ReadBatch calls that found the socket empty and
	// waited in Go's poller for a datagram (a thread wake-up each);
	// BusyPollHits counts those that found one by polling it
	// (UDPConfig.BusyPoll) instead. Linux only.
	ReadSleeps, BusyPollHits uint64
	// DirectReceives counts the datagrams of DatagramsReceived that a
	// DirectReader read (a caller's goroutine, not the conn's reader);
	// DirectWaits the times a DirectReader's Wait slept. Linux only.
	DirectReceives, DirectWaits uint64
	// GSOEnabled reports whether sends currently use UDP GSO. It turns
	// false for good if the kernel or device rejects a GSO send.
	GSOEnabled bool
	// GROEnabled reports whether the socket receives with UDP GRO.
	GROEnabled bool
}

// udpCounters are a UDPConn's live counters. The reader and the writer
// each add once per batch; Stats may load them from any goroutine.
type udpCounters struct {
	datagramsSent, bytesSent         atomic.Uint64
	datagramsReceived, bytesReceived atomic.Uint64
	gsoSends, groReceives            atomic.Uint64
	sendDrops, receiveDrops          atomic.Uint64
	readSleeps, busyPollHits         atomic.Uint64
	directReceives, directWaits      atomic.Uint64
}

func (c *udpCounters) snapshot() UDPStats {
	return UDPStats{
		DatagramsSent:     c.datagramsSent.Load(),
		BytesSent:         c.bytesSent.Load(),
		DatagramsReceived: c.datagramsReceived.Load(),
		BytesReceived:     c.bytesReceived.Load(),
		GSOSends:          c.gsoSends.Load(),
		GROReceives:       c.groReceives.Load(),
		SendDrops:         c.sendDrops.Load(),
		ReceiveDrops:      c.receiveDrops.Load(),
		ReadSleeps:        c.readSleeps.Load(),
		BusyPollHits:      c.busyPollHits.Load(),
		DirectReceives:    c.directReceives.Load(),
		DirectWaits:       c.directWaits.Load(),
	}
}

// checkReadBufs returns an ErrShortBuffer error if any Buf in ds has
// capacity below MaxDatagram.
func checkReadBufs(ds []Datagram) error {
	for i := range ds {
		if c := cap(ds[i].Buf); c < MaxDatagram {
			return fmt.Errorf("%w: ds[%d].Buf has capacity %d, need %d", ErrShortBuffer, i, c, MaxDatagram)
		}
	}
	return nil
}

// checkDests returns an ErrUnsupportedAddr error if any destination in ds
// is invalid, has port zero, or is IPv6 while the socket is IPv4-only.
func checkDests(ds []Datagram, ipv4Only bool) error {
	for i := range ds {
		a := ds[i].Addr
		ip := a.Addr()
		if !ip.IsValid() || a.Port() == 0 || (ipv4Only && !ip.Unmap().Is4()) {
			return fmt.Errorf("%w: ds[%d].Addr %v", ErrUnsupportedAddr, i, a)
		}
	}
	return nil
}

// localAddrPort normalises a bound address: an IPv4-mapped IPv6 address is
// reported as plain IPv4.
func localAddrPort(a netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
}

// unroutableLogEvery is how often at most a UDPConn warns about
// datagrams the kernel would not route from the socket's address.
const unroutableLogEvery = time.Minute

// unroutableLog rate-limits the warning for datagrams the kernel refuses
// to send from the socket's address to their destination (EINVAL: a
// socket bound to a loopback address cannot reach another host). Every
// such datagram is dropped and counted in SendDrops; the warning goes out
// for the first, then at most once per unroutableLogEvery with the number
// dropped since. Owned by the writer.
type unroutableLog struct {
	next    time.Time
	dropped uint64
}

func (u *unroutableLog) drop(log *slog.Logger, local, dest netip.AddrPort, n int, err error) {
	u.dropped += uint64(n)
	now := time.Now()
	if now.Before(u.next) {
		return
	}
	u.next = now.Add(unroutableLogEvery)
	attrs := []any{"local", local, "dest", dest, "dropped", u.dropped, "err", err}
	if local.Addr().IsLoopback() && !dest.Addr().IsLoopback() {
		log.Warn("netio: a socket bound to a loopback address cannot send to another host; datagrams dropped (listen on a routable address or 0.0.0.0)", attrs...)
	} else {
		log.Warn("netio: the kernel refuses to send from this address to that destination; datagrams dropped", attrs...)
	}
	u.dropped = 0
}
