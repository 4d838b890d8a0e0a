//go:build linux

package netio

import (
	"net"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// rawBatch is a batchConn that issues recvmmsg and sendmmsg on the
// non-blocking socket as raw system calls, waiting in Go's poller only
// when the socket has nothing to give or no room to take (EAGAIN).
//
// Why not ipv4.PacketConn's: its system calls go through
// syscall.Syscall6, whose entersyscall wakes the runtime's sysmon thread
// whenever the process was idle before the call. A process that sleeps
// between packets (an NDMA rank at 100 Mbit/s gets one 9 KB datagram per
// 0.72 ms) then pays a futex wake, and sysmon a 20 µs sleep and a futex
// wait, per packet: on the 8-host testbed sysmon made ~2,800 context
// switches a second in every rank and a third of its CPU time. A
// non-blocking recvmmsg or sendmmsg returns without sleeping, which is
// what RawSyscall is for; the cost is that the goroutine keeps its P for
// the few microseconds the kernel takes.
//
// Like ipv4.PacketConn it fills Message.N, NN, Flags and (on receive)
// Addr, which points at a *net.UDPAddr owned by rawBatch and valid until
// the next ReadBatch; an IPv6 sender's scope id is reported as its
// interface's name, as net does.
type rawBatch struct {
	rc syscall.RawConn // nil: a DirectReader's, reading fd itself
	fd int
	v6 bool // AF_INET6 socket: sockaddr_in6 names

	// Reader-owned.
	rcall mmsgCall
	// ReadBatchFixed's headers: filled for fixed (its ms[0]) and fixedN
	// messages; the kernel wrote the first fixedDirty on the last call.
	fixed      *ipv4.Message
	fixedN     int
	fixedDirty int
	rhdr       []unix.Mmsghdr
	riov       []unix.Iovec
	rname      []unix.RawSockaddrInet6 // large enough for either family
	raddr      []net.UDPAddr
	rip        [][16]byte
	zones      map[uint32]string // IPv6 scope id → interface name

	// Writer-owned.
	wcall  mmsgCall
	whdr   []unix.Mmsghdr
	wiov   []unix.Iovec
	wname  []unix.RawSockaddrInet6
	scopes map[string]uint32 // IPv6 zone → scope id
}

func newRawBatch(pc *net.UDPConn, v6 bool) (*rawBatch, error) {
	rc, err := pc.SyscallConn()
	if err != nil {
		return nil, err
	}
	r := &rawBatch{rc: rc, v6: v6}
	r.rcall = mmsgCall{trap: unix.SYS_RECVMMSG, name: "recvmmsg"}
	r.wcall = mmsgCall{trap: unix.SYS_SENDMMSG, name: "sendmmsg"}
	r.rcall.fn, r.wcall.fn = r.rcall.try, r.wcall.try
	return r, nil
}

// mmsgCall is one direction's system call. fn is try as a func value,
// made once so that handing it to RawConn.Read or Write allocates
// nothing; hdr and flags are its arguments, n and errno its results.
type mmsgCall struct {
	trap  uintptr
	name  string
	fn    func(fd uintptr) bool
	hdr   []unix.Mmsghdr
	flags int
	n     int
	errno syscall.Errno
	// spin is how long a receive keeps trying (yielding the thread to
	// other goroutines between tries) before it waits in the poller
	// (UDPConfig.BusyPoll); until is when the current call's spin ends,
	// set at its first EAGAIN.
	spin  time.Duration
	until time.Time
	// polls, when not nil, counts receives found by polling and
	// receives that waited in the poller (UDPStats).
	polls *udpCounters
	slept bool // the current call waited in the poller
}

// sleeping records that the current receive waits in the poller.
func (c *mmsgCall) sleeping() {
	if c.polls != nil && !c.slept {
		c.polls.readSleeps.Add(1)
	}
	c.slept = true
}

// try runs the system call on fd, again on EINTR; it returns false, to
// wait in the poller, on EAGAIN.
func (c *mmsgCall) try(fd uintptr) bool {
	for {
		v, _, e := unix.RawSyscall6(c.trap, fd,
			uintptr(unsafe.Pointer(&c.hdr[0])), uintptr(len(c.hdr)), uintptr(c.flags), 0, 0)
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			if c.spin <= 0 {
				c.sleeping()
				return false
			}
			now := time.Now()
			if c.until.IsZero() {
				c.until = now.Add(c.spin)
			}
			if now.After(c.until) || oversubscribed() {
				c.sleeping()
				return false
			}
			runtime.Gosched()
			continue
		}
		if c.polls != nil && e == 0 && !c.until.IsZero() && !c.slept {
			c.polls.busyPollHits.Add(1) // found by polling, no sleep
		}
		c.n, c.errno = int(v), e
		if e != 0 {
			c.n = 0
		}
		return true
	}
}

// run makes the call on hdr through rc.Write (write) or rc.Read, and
// returns the messages done.
func (c *mmsgCall) run(rc syscall.RawConn, write bool, hdr []unix.Mmsghdr, flags int) (int, error) {
	c.hdr, c.flags = hdr, flags
	c.until, c.slept = time.Time{}, false
	var err error
	if write {
		err = rc.Write(c.fn)
	} else {
		err = rc.Read(c.fn)
	}
	c.hdr = nil
	if err != nil {
		return 0, err
	}
	if c.errno != 0 {
		return 0, os.NewSyscallError(c.name, c.errno)
	}
	return c.n, nil
}

// runNow makes the call on hdr on fd at once, without the poller, and
// returns errWouldBlock where it would have waited (a DirectReader's
// receive).
func (c *mmsgCall) runNow(fd int, hdr []unix.Mmsghdr, flags int) (int, error) {
	c.hdr, c.flags = hdr, flags
	c.until, c.slept = time.Time{}, false
	ok := c.try(uintptr(fd))
	c.hdr = nil
	if !ok {
		return 0, errWouldBlock
	}
	if c.errno != 0 {
		return 0, os.NewSyscallError(c.name, c.errno)
	}
	return c.n, nil
}

// growHdrs makes room for n messages of up to niov iovecs in total.
func growHdrs(hdr []unix.Mmsghdr, iov []unix.Iovec, name []unix.RawSockaddrInet6, n, niov int) ([]unix.Mmsghdr, []unix.Iovec, []unix.RawSockaddrInet6) {
	if len(hdr) < n {
		hdr = make([]unix.Mmsghdr, n)
		name = make([]unix.RawSockaddrInet6, n)
	}
	if len(iov) < niov {
		iov = make([]unix.Iovec, niov)
	}
	return hdr, iov, name
}

// fillHdrs points hdr[i] at the buffers and control space of ms[i];
// the caller sets the name.
func fillHdrs(ms []ipv4.Message, hdr []unix.Mmsghdr, iov []unix.Iovec) {
	k := 0
	for i := range ms {
		m := &ms[i]
		h := &hdr[i].Hdr
		first := k
		for _, b := range m.Buffers {
			if len(b) == 0 {
				continue
			}
			iov[k].Base = &b[0]
			iov[k].SetLen(len(b))
			k++
		}
		h.Iov = nil
		h.Iovlen = 0
		if k > first {
			h.Iov = &iov[first]
			h.SetIovlen(k - first)
		}
		h.Control = nil
		h.Controllen = 0
		if len(m.OOB) > 0 {
			h.Control = &m.OOB[0]
			h.SetControllen(len(m.OOB))
		}
		h.Flags = 0
		hdr[i].Len = 0
	}
}

func countIovs(ms []ipv4.Message) int {
	n := 0
	for i := range ms {
		n += len(ms[i].Buffers)
	}
	return n
}

// ReadBatch receives up to len(ms) datagrams with one recvmmsg, waiting
// in the poller until at least one is there.
func (r *rawBatch) ReadBatch(ms []ipv4.Message, flags int) (int, error) {
	if len(ms) == 0 {
		return 0, nil
	}
	r.fillRead(ms)
	r.fixed = nil
	return r.recv(ms, r.rhdr[:len(ms)], flags)
}

// ReadBatchFixed is ReadBatch for a caller that passes the same messages
// every time (a prefix of one slice), with Buffers and OOB it never
// changes: the headers pointing at them are filled once, and each call
// resets only the fields the kernel wrote on the one before (a message's
// length, its name's and control data's lengths, its flags), where
// ReadBatch rebuilds every header, most of them for messages that never
// come.
func (r *rawBatch) ReadBatchFixed(ms []ipv4.Message, flags int) (int, error) {
	if len(ms) == 0 {
		return 0, nil
	}
	hdr := r.prepareFixed(ms)
	n, err := r.recv(ms, hdr, flags)
	// The kernel writes back the headers of the messages it fills; one
	// more is reset in case a failing call wrote part of the next.
	r.fixedDirty = min(n+1, len(ms))
	return n, err
}

// prepareFixed readies r.rhdr[:len(ms)] for ReadBatchFixed: filled for
// new messages, else reset where the kernel wrote (the lengths it set
// are the space the next call offers: a message without control data
// would leave the next one no room for its own).
func (r *rawBatch) prepareFixed(ms []ipv4.Message) []unix.Mmsghdr {
	if r.fixed != &ms[0] || len(ms) > r.fixedN {
		r.fillRead(ms)
		r.fixed, r.fixedN, r.fixedDirty = &ms[0], len(ms), 0
	}
	hdr := r.rhdr[:len(ms)]
	for i := range min(r.fixedDirty, len(ms)) {
		h := &hdr[i]
		h.Len = 0
		h.Hdr.Namelen = unix.SizeofSockaddrInet6
		h.Hdr.SetControllen(len(ms[i].OOB))
		h.Hdr.Flags = 0
	}
	return hdr
}

// fillRead points r.rhdr[:len(ms)] at ms's buffers and r's names.
func (r *rawBatch) fillRead(ms []ipv4.Message) {
	r.rhdr, r.riov, r.rname = growHdrs(r.rhdr, r.riov, r.rname, len(ms), countIovs(ms))
	if len(r.raddr) < len(ms) {
		r.raddr = make([]net.UDPAddr, len(ms))
		r.rip = make([][16]byte, len(ms))
	}
	hdr := r.rhdr[:len(ms)]
	fillHdrs(ms, hdr, r.riov)
	for i := range hdr {
		hdr[i].Hdr.Name = (*byte)(unsafe.Pointer(&r.rname[i]))
		hdr[i].Hdr.Namelen = unix.SizeofSockaddrInet6
	}
}

// recv makes the recvmmsg call on hdr (filled for ms) and copies the
// results into ms.
func (r *rawBatch) recv(ms []ipv4.Message, hdr []unix.Mmsghdr, flags int) (int, error) {
	var (
		n   int
		err error
	)
	if r.rc == nil {
		n, err = r.rcall.runNow(r.fd, hdr, flags)
	} else {
		n, err = r.rcall.run(r.rc, false, hdr, flags)
	}
	if err != nil {
		return 0, err
	}
	for i := range n {
		m := &ms[i]
		h := &hdr[i]
		m.N = int(h.Len)
		m.NN = int(h.Hdr.Controllen)
		m.Flags = int(h.Hdr.Flags)
		m.Addr = r.sockaddr(i, h.Hdr.Namelen)
	}
	return n, nil
}

// sockaddr decodes the sender of message i into raddr[i].
func (r *rawBatch) sockaddr(i int, namelen uint32) net.Addr {
	raw := &r.rname[i]
	ua := &r.raddr[i]
	switch raw.Family {
	case unix.AF_INET:
		if namelen < unix.SizeofSockaddrInet4 {
			return nil
		}
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(raw))
		ua.IP = append(r.rip[i][:0], sa.Addr[:]...)
		ua.Port = ntohs(sa.Port)
	case unix.AF_INET6:
		if namelen < unix.SizeofSockaddrInet6 {
			return nil
		}
		ua.IP = append(r.rip[i][:0], raw.Addr[:]...)
		ua.Port = ntohs(raw.Port)
		ua.Zone = r.zone(raw.Scope_id)
		return ua
	default:
		return nil
	}
	ua.Zone = ""
	return ua
}

// zone names the interface of an IPv6 scope id (link-local senders),
// from a cache: the lookup is a netlink request.
func (r *rawBatch) zone(id uint32) string {
	if id == 0 {
		return ""
	}
	if z, ok := r.zones[id]; ok {
		return z
	}
	z := strconv.FormatUint(uint64(id), 10) // as net does for an unknown index
	if ifi, err := net.InterfaceByIndex(int(id)); err == nil {
		z = ifi.Name
	}
	if r.zones == nil {
		r.zones = make(map[uint32]string)
	}
	if len(r.zones) < maxZones {
		r.zones[id] = z
	}
	return z
}

// scopeID is the interface index of an IPv6 zone (a name or a number),
// from the writer's cache; 0 if there is no such interface.
func (r *rawBatch) scopeID(zone string) uint32 {
	if id, ok := r.scopes[zone]; ok {
		return id
	}
	var id uint32
	if ifi, err := net.InterfaceByName(zone); err == nil {
		id = uint32(ifi.Index)
	} else if n, err := strconv.ParseUint(zone, 10, 32); err == nil {
		id = uint32(n)
	}
	if r.scopes == nil {
		r.scopes = make(map[string]uint32)
	}
	if len(r.scopes) < maxZones {
		r.scopes[zone] = id
	}
	return id
}

// maxZones bounds each zone cache.
const maxZones = 64

// WriteBatch sends ms with one sendmmsg (waiting in the poller while the
// socket buffer is full) and returns how many messages the kernel took;
// like sendmmsg, it reports an error only if the first message failed.
// Every ms[i].Addr must be a *net.UDPAddr.
func (r *rawBatch) WriteBatch(ms []ipv4.Message, flags int) (int, error) {
	if len(ms) == 0 {
		return 0, nil
	}
	r.whdr, r.wiov, r.wname = growHdrs(r.whdr, r.wiov, r.wname, len(ms), countIovs(ms))
	hdr := r.whdr[:len(ms)]
	fillHdrs(ms, hdr, r.wiov)
	for i := range hdr {
		ua, ok := ms[i].Addr.(*net.UDPAddr)
		if !ok {
			return 0, os.NewSyscallError("sendmmsg", unix.EDESTADDRREQ)
		}
		l, ok := r.putSockaddr(i, ua)
		if !ok {
			return 0, os.NewSyscallError("sendmmsg", unix.EAFNOSUPPORT)
		}
		hdr[i].Hdr.Name = (*byte)(unsafe.Pointer(&r.wname[i]))
		hdr[i].Hdr.Namelen = l
	}
	n, err := r.wcall.run(r.rc, true, hdr, flags)
	if err != nil {
		return 0, err
	}
	for i := range n {
		ms[i].N = int(hdr[i].Len)
	}
	return n, nil
}

// putSockaddr encodes ua as the socket's family wants into wname[i] and
// returns its length; an IPv6 address on an IPv4 socket does not fit.
func (r *rawBatch) putSockaddr(i int, ua *net.UDPAddr) (uint32, bool) {
	raw := &r.wname[i]
	*raw = unix.RawSockaddrInet6{}
	if !r.v6 {
		ip4 := ua.IP.To4()
		if ip4 == nil {
			return 0, false
		}
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(raw))
		sa.Family = unix.AF_INET
		sa.Port = htons(ua.Port)
		copy(sa.Addr[:], ip4)
		return unix.SizeofSockaddrInet4, true
	}
	ip16 := ua.IP.To16()
	if ip16 == nil {
		return 0, false
	}
	raw.Family = unix.AF_INET6
	raw.Port = htons(ua.Port)
	copy(raw.Addr[:], ip16)
	if ua.Zone != "" {
		raw.Scope_id = r.scopeID(ua.Zone)
	}
	return unix.SizeofSockaddrInet6, true
}

// htons and ntohs convert a port between host order and the network
// order a sockaddr's port field holds in memory.
func htons(p int) uint16 {
	var b [2]byte
	b[0], b[1] = byte(p>>8), byte(p)
	return *(*uint16)(unsafe.Pointer(&b))
}

func ntohs(p uint16) int {
	b := (*[2]byte)(unsafe.Pointer(&p))
	return int(b[0])<<8 | int(b[1])
}
