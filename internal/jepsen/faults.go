package jepsen

import (
	"fmt"
	"net/netip"
	"sync"
)

// ChanLock is a mutex made of a channel: a goroutine waiting for it
// blocks durably, so inside a synctest bubble virtual time moves on while
// the holder waits for the network (a goroutine waiting on a sync.Mutex
// does not count as durably blocked, and stalls the bubble's clock).
type ChanLock chan struct{}

// NewChanLock returns an unlocked ChanLock.
func NewChanLock() ChanLock { return make(ChanLock, 1) }

// Lock takes the lock.
func (l ChanLock) Lock() { l <- struct{}{} }

// Unlock releases it.
func (l ChanLock) Unlock() { <-l }

// LinkFault makes a process's link lose a share loss of its datagrams
// (1: cut it) while the fault is active. addr names the process's address
// when it is up (false: down, and the fault is skipped); setLoss applies
// a loss to an address's link (0: the link as it was). lock is held while
// the fault starts, so it does not race the process's restarts.
func LinkFault(name, kind, target string, lock sync.Locker, addr func() (netip.AddrPort, bool), loss float64,
	setLoss func(netip.AddrPort, float64)) Fault {
	var cut netip.AddrPort
	return Fault{Name: name, Kind: kind, Target: target,
		Start: func() error {
			lock.Lock()
			defer lock.Unlock()
			a, ok := addr()
			if !ok {
				return fmt.Errorf("%w: %s is down", ErrSkip, target)
			}
			cut = a
			setLoss(cut, loss)
			return nil
		},
		Stop: func() error {
			if cut.IsValid() { // not when Start skipped it
				setLoss(cut, 0)
				cut = netip.AddrPort{}
			}
			return nil
		}}
}
