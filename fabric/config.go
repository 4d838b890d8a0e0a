package fabric

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/ndma/ndma/fabric/ctrlstore"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// Config configures a Switch. Zero values select the documented defaults.
type Config struct {
	// Token authenticates control messages (HMAC-SHA256). Every endpoint
	// of the fabric must use the same token. It must not be empty unless
	// Insecure is set.
	Token []byte
	// Insecure runs the switch without a fabric token: control messages
	// are tagged under an empty key, so anyone who can send to the switch
	// may join, register, create and free pool regions, and lend memory.
	// New refuses an empty Token without it, and Insecure together with
	// a Token.
	Insecure bool
	// HeartbeatTimeout is how long a member may go without a heartbeat
	// before it is declared dead (up to four times that for a member
	// whose heartbeats have arrived irregularly: see beats). Zero means
	// 1s. Endpoints send heartbeats four times per timeout.
	HeartbeatTimeout time.Duration
	// Transport configures the switch's own reliable streams (control,
	// aggregation, anycast). Local and GroupModes are set by the switch.
	Transport transport.Config
	// Pool sizes the aggregation slot pool.
	Pool PoolConfig
	// MaxGroups bounds groups (jobs and services). Zero means 4096.
	MaxGroups int
	// MulticastWindow is the ACK-merge window per multicast stream, in
	// packets: a sender may have at most this many packets unacknowledged
	// by some member. Zero means 1024. Must be a power of two.
	MulticastWindow int
	// MaxForward bounds the datagrams forwarded (replicated or relayed)
	// between two Polls; beyond it they are dropped and counted. Zero
	// means 8192.
	MaxForward int
	// AggTimeout bounds the life of an aggregation slot that is not
	// complete: AggTimeout after its first contribution the slot is freed,
	// its partial contributions dropped, the members that contributed are
	// told (EVENT, StatusBusy, Operand2 = the aggregation id), and later
	// contributions to that aggregation or an older one of the group that
	// would open a slot are refused the same way. Members of a collective
	// that reach it further apart than this fail it, so it is long (a
	// rank may be minutes late; PyTorch's collective timeout is 30
	// minutes). Zero means 10 minutes.
	AggTimeout time.Duration
	// AggReclaimAfter frees incomplete slots early when the pool is short:
	// once a contribution finds no free slot, slots open at least this
	// long are freed as if AggTimeout had passed (abandoned aggregations
	// do not hold the pool for AggTimeout). Zero means 30s.
	AggReclaimAfter time.Duration
	// AnycastTimeout bounds how long the switch keeps the forwarding state
	// of an anycast request whose member has not replied: the request then
	// fails to the client (StatusBusy, Operand1 = the member) and no
	// longer counts as outstanding on the member. Zero means 30s.
	AnycastTimeout time.Duration
	// MaxAnycast bounds the anycast requests in flight through the switch,
	// and MaxAnycastPerClient those of one client address; a request
	// beyond either is answered StatusBusy. Zero means 65536 and 1024.
	MaxAnycast, MaxAnycastPerClient int
	// Fault injects faults into everything the switch sends.
	Fault FaultConfig
	// PoolKeys draws the keys of pool regions (capabilities: they must be
	// unpredictable). Nil means a generator seeded from crypto/rand;
	// tests set it for determinism.
	PoolKeys func() uint64
	// Limits bounds the control plane's tables (limits.go).
	Limits ControlLimits
	// PoolRecoverWindow is how long after its start the switch waits for
	// the memory nodes to report the regions they hold before it creates
	// new ones and serves pool requests (less once every node that
	// registered has reported and every region is complete). Zero means
	// DefaultPoolRecoverWindow.
	PoolRecoverWindow time.Duration
	// Parent is the switch above this one in a tree of switches (zero:
	// none, this switch is the tree's root or stands alone), and
	// Children the switches below it, as they send from: a job joined
	// under a switch with a parent is formed at the root and spans the
	// tree (tree.go). Only listed children may join members through
	// this switch (JOINVIA), and only a parent's answers are taken.
	Parent   netip.AddrPort
	Children []netip.AddrPort
	// Store, if set, keeps the pool map outside the switch (package
	// ctrlstore; etcdstore over etcd): New takes its regions into the
	// map, and every change of a region is handed to it from Poll
	// (pool_store.go). Nil (the default): the map lives in the switch
	// alone, rebuilt from the memory nodes' reports after a restart.
	Store ctrlstore.Store
}

// FaultConfig injects faults into the switch's output (this kernel has no
// netem). Rates are probabilities in [0, 1].
type FaultConfig struct {
	Drop, Dup, Reorder, Corrupt float64
	// Seed seeds the fault generator; zero means 1.
	Seed uint64
}

func (f FaultConfig) active() bool { return f.Drop > 0 || f.Dup > 0 || f.Reorder > 0 || f.Corrupt > 0 }

// ErrConfig wraps configuration errors.
var ErrConfig = errors.New("fabric: invalid config")

// WithDefaults returns c with every zero field set to its documented
// default, as New applies them (the embedded transport configuration
// keeps its own zero fields: see transport.Config.WithDefaults).
func (c Config) WithDefaults() Config {
	c.setDefaults()
	c.Pool = c.Pool.withDefaults()
	return c
}

func (c *Config) setDefaults() {
	if c.HeartbeatTimeout == 0 {
		c.HeartbeatTimeout = time.Second
	}
	if c.PoolRecoverWindow == 0 {
		c.PoolRecoverWindow = DefaultPoolRecoverWindow
	}
	if c.MaxGroups == 0 {
		c.MaxGroups = 4096
	}
	if c.MulticastWindow == 0 {
		c.MulticastWindow = 1024
	}
	if c.MaxForward == 0 {
		c.MaxForward = 8192
	}
	if c.Fault.Seed == 0 {
		c.Fault.Seed = 1
	}
	c.setDataDefaults()
	if c.Transport.MaxMessages == 0 {
		c.Transport.MaxMessages = 1 << 16 // results and replies for many members
	}
	if c.Transport.MTU == 0 {
		c.Transport.MTU = transport.DefaultMTU
	}
	if c.Pool.SlotBytes == 0 {
		// A member's MTU is at most the switch's (refused at join
		// otherwise), so each of its aggregation chunks fits a slot.
		c.Pool.SlotBytes = max(c.Transport.MTU-wire.HeaderLen, 1)
	}
	// In group 0 (control) the switch is a plain peer (member 0); in every
	// group it creates it is wire.MemberAll (newGroup sets that).
	c.Transport.Local = 0
	c.Transport.GroupModes = true
	c.Limits.setDefaults()
}

func (c *Config) validate() error {
	if err := secure.CheckToken(c.Token, c.Insecure); err != nil {
		return fmt.Errorf("%w: Token: %w", ErrConfig, err)
	}
	w := c.MulticastWindow
	switch {
	case c.HeartbeatTimeout < 0 || c.PoolRecoverWindow < 0 || c.MaxGroups < 0 || c.MaxForward < 0 || c.negativeData():
		return fmt.Errorf("%w: negative value", ErrConfig)
	case w <= 0 || w&(w-1) != 0 || w > 1<<15:
		return fmt.Errorf("%w: MulticastWindow %d must be a power of two ≤ 32768", ErrConfig, w)
	}
	if err := c.Limits.validate(); err != nil {
		return err
	}
	if err := c.validateTree(); err != nil {
		return err
	}
	for _, r := range []float64{c.Fault.Drop, c.Fault.Dup, c.Fault.Reorder, c.Fault.Corrupt} {
		if r < 0 || r > 1 {
			return fmt.Errorf("%w: fault rate %v outside [0, 1]", ErrConfig, r)
		}
	}
	return nil
}

// validateTree checks Parent and Children: valid addresses, none twice,
// the parent not among the children, at most MaxChildren children.
func (c *Config) validateTree() error {
	if c.Parent.IsValid() && (c.Parent.Port() == 0 || c.Parent.Addr().IsUnspecified()) {
		return fmt.Errorf("%w: Parent %v", ErrConfig, c.Parent)
	}
	if len(c.Children) > MaxChildren {
		return fmt.Errorf("%w: %d children, at most %d", ErrConfig, len(c.Children), MaxChildren)
	}
	for i, ch := range c.Children {
		switch {
		case !ch.IsValid() || ch.Port() == 0 || ch.Addr().IsUnspecified():
			return fmt.Errorf("%w: child %v", ErrConfig, ch)
		case ch == c.Parent:
			return fmt.Errorf("%w: %v is both the parent and a child", ErrConfig, ch)
		case slices.Contains(c.Children[:i], ch):
			return fmt.Errorf("%w: child %v listed twice", ErrConfig, ch)
		}
	}
	return nil
}
