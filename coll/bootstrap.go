package coll

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/internal/secretfile"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// Launch describes this process's place in a job, as a launcher reports
// it.
type Launch struct {
	Rank, Size int
	Switch     string // forwarding node address
	// Switches (NDMA_SWITCHES, a comma-separated list) shards the job's
	// in-network collectives over these forwarding nodes
	// (Config.Switches); Switch is then the first. Nil for one switch.
	Switches []string
	Job      string // job name shared by all ranks
	// Token (NDMA_TOKEN) is the fabric token, which authenticates the
	// rank's control messages: required with a credential, optional with
	// Insecure.
	Token string
	// Insecure (NDMA_INSECURE=1) runs the rank without a credential, its
	// datagrams not sealed, at a fabric started with --insecure; without
	// a Token its control messages are not authenticated either.
	Insecure bool
	// Credential (NDMA_CREDENTIAL) is the rank's credential, of role
	// member: with it the rank's endpoint seals every datagram
	// (EndpointOptions). It is the path of the credential file, or of a
	// directory (the one ndma fabric init writes) holding every rank's
	// in JOB/RANK.cred (CredentialPath). Empty when unset, which is
	// refused unless Insecure.
	Credential string
	// MTU is the largest datagram the network carries unfragmented, in
	// bytes (NDMA_MTU; 0 when unset): what a rank's transport MTU should
	// be. ndma testbed run sets it to the testbed's datagram size.
	MTU int
	// JoinTimeout (NDMA_JOIN_TIMEOUT) and Liveness (NDMA_LIVENESS) become
	// Config.JoinTimeout and Config.Liveness: 0 when unset (the
	// defaults); Liveness is negative for NDMA_LIVENESS=off (no bound).
	JoinTimeout, Liveness time.Duration
	// BusyPoll (NDMA_BUSY_POLL, a Go duration such as "50us") is how
	// long the rank's endpoint polls its socket before sleeping
	// (netio.UDPConfig.BusyPoll, set by EndpointOptions): 0 when unset.
	BusyPoll time.Duration
	// Hierarchy (NDMA_HIERARCHY: "auto" or "off"; DefaultHierarchy when
	// unset) and HostID (NDMA_HOST_ID; empty: HostKey) become
	// Config.Hierarchy and Config.HostID: with auto, the ranks that share
	// a host run every collective through shared memory.
	Hierarchy Hierarchy
	HostID    string
	Source    string // which variables it came from, for messages
	// JobFrom says where Job came from when NDMA_JOB did not give it
	// (the launcher's variable, or "" for the default name), for the
	// error of a job name two runs share.
	JobFrom string
}

// CredentialEnv names the environment variable that holds the path of a
// rank's credential file, or of a directory of ranks' credentials
// (Launch.Credential).
const CredentialEnv = "NDMA_CREDENTIAL"

// InsecureEnv names the environment variable that runs a rank unsealed
// (Launch.Insecure): "1" (or "true").
const InsecureEnv = "NDMA_INSECURE"

// ErrNoCredential (wrapped with ErrArg) is the error of a launch with
// neither a credential nor Insecure: every rank seals its datagrams
// unless told not to.
var ErrNoCredential = errors.New("coll: no credential, and not insecure")

// ParseEnv reads the launch from environment variables (getenv is
// os.LookupEnv in production): NDMA_RANK, NDMA_SIZE, NDMA_SWITCH,
// NDMA_JOB, NDMA_SWITCHES (optional: a comma-separated list of
// forwarding nodes to shard in-network collectives over, see
// Config.Switches; NDMA_SWITCH may then be left unset, or must be the
// first), NDMA_CREDENTIAL and NDMA_TOKEN (or NDMA_INSECURE=1, with or
// without NDMA_TOKEN, for a fabric that does not seal: see Launch),
// NDMA_MTU (optional, see EnvMTU), and the optional
// NDMA_JOIN_TIMEOUT (how long the rendezvous waits for every rank) and
// NDMA_LIVENESS (how long a host algorithm waits for a silent rank
// without a switch; "off": no bound), Go durations such as "90s", and
// NDMA_BUSY_POLL (see Launch.BusyPoll), NDMA_HIERARCHY and NDMA_HOST_ID
// (see Launch.Hierarchy); when
// NDMA_RANK/NDMA_SIZE are absent, the first of OMPI_COMM_WORLD_RANK/_SIZE
// (Open MPI's mpirun), PMI_RANK/PMI_SIZE (MPICH, Intel MPI),
// SLURM_PROCID/SLURM_NTASKS (srun), RANK/WORLD_SIZE (torchrun). The job
// name defaults to SLURM_JOB_ID, OMPI_MCA_orte_ess_jobid or
// TORCHELASTIC_RUN_ID, else "ndma".
func ParseEnv(getenv func(string) (string, bool)) (Launch, error) {
	var l Launch
	pairs := [][3]string{
		{"NDMA_RANK", "NDMA_SIZE", "NDMA"},
		{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "Open MPI"},
		{"PMI_RANK", "PMI_SIZE", "PMI"},
		{"SLURM_PROCID", "SLURM_NTASKS", "Slurm"},
		{"RANK", "WORLD_SIZE", "torchrun"},
	}
	found := false
	for _, p := range pairs {
		rs, ok1 := getenv(p[0])
		ss, ok2 := getenv(p[1])
		if !ok1 && !ok2 {
			continue
		}
		if !ok1 || !ok2 {
			return l, fmt.Errorf("%w: %s and %s must both be set", ErrArg, p[0], p[1])
		}
		r, err := strconv.Atoi(rs)
		if err != nil {
			return l, fmt.Errorf("%w: %s=%q: %v", ErrArg, p[0], rs, err)
		}
		s, err := strconv.Atoi(ss)
		if err != nil {
			return l, fmt.Errorf("%w: %s=%q: %v", ErrArg, p[1], ss, err)
		}
		if s < 1 || r < 0 || r >= s {
			return l, fmt.Errorf("%w: %s=%d outside [0, %s=%d)", ErrArg, p[0], r, p[1], s)
		}
		l.Rank, l.Size, l.Source, found = r, s, p[2], true
		break
	}
	if !found {
		return l, fmt.Errorf("%w: %w: no rank in the environment (NDMA_RANK/NDMA_SIZE, OMPI_COMM_WORLD_*, PMI_*, SLURM_*, torchrun's RANK/WORLD_SIZE)", ErrArg, ErrNoLaunch)
	}
	l.Switch, _ = getenv("NDMA_SWITCH")
	if v, ok := getenv("NDMA_SWITCHES"); ok && v != "" {
		sws, err := ParseSwitches(v)
		if err != nil {
			return l, fmt.Errorf("NDMA_SWITCHES: %w", err)
		}
		if l.Switch != "" && l.Switch != sws[0] {
			return l, fmt.Errorf("%w: NDMA_SWITCH=%s is not the first of NDMA_SWITCHES=%s: leave NDMA_SWITCH unset, or make it the first", ErrArg, l.Switch, v)
		}
		l.Switch = sws[0]
		if len(sws) > 1 {
			l.Switches = sws
		}
	}
	l.Token, _ = getenv("NDMA_TOKEN")
	l.Credential, _ = getenv(CredentialEnv)
	var err error
	if v, ok := getenv(InsecureEnv); ok && v != "" {
		if l.Insecure, err = strconv.ParseBool(v); err != nil {
			return l, fmt.Errorf("%w: %s=%q: want 1 or 0", ErrArg, InsecureEnv, v)
		}
	}
	if l.MTU, err = EnvMTU(getenv); err != nil {
		return l, err
	}
	if l.JoinTimeout, err = envDuration(getenv, "NDMA_JOIN_TIMEOUT", false); err != nil {
		return l, err
	}
	if l.Liveness, err = envDuration(getenv, "NDMA_LIVENESS", true); err != nil {
		return l, err
	}
	if v, ok := getenv("NDMA_BUSY_POLL"); ok && v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > netio.MaxBusyPoll {
			return l, fmt.Errorf("%w: NDMA_BUSY_POLL=%q: want a duration from 0 to %v, such as 50us", ErrArg, v, netio.MaxBusyPoll)
		}
		l.BusyPoll = d
	}
	l.Hierarchy = DefaultHierarchy
	if v, ok := getenv("NDMA_HIERARCHY"); ok {
		if l.Hierarchy, err = ParseHierarchy(v); err != nil {
			return l, fmt.Errorf("%w: NDMA_HIERARCHY=%q: want auto or off", ErrArg, v)
		}
	}
	l.HostID, _ = getenv("NDMA_HOST_ID")
	var ok bool
	if l.Job, ok = getenv("NDMA_JOB"); !ok || l.Job == "" {
		if j, ok := getenv("SLURM_JOB_ID"); ok && j != "" {
			l.Job, l.JobFrom = "slurm-"+j, "SLURM_JOB_ID"
		} else if j, ok := getenv("OMPI_MCA_orte_ess_jobid"); ok && j != "" {
			l.Job, l.JobFrom = "ompi-"+j, "OMPI_MCA_orte_ess_jobid"
		} else if j, ok := getenv("TORCHELASTIC_RUN_ID"); ok && j != "" {
			l.Job, l.JobFrom = "torch-"+j, "TORCHELASTIC_RUN_ID"
		} else {
			l.Job, l.JobFrom = "ndma", "the default"
		}
	}
	return l, nil
}

// ParseSwitches reads a comma-separated list of forwarding node
// addresses (NDMA_SWITCHES, the --switches flags): at least one, at most
// MaxSwitches, none empty or repeated. Spaces around addresses are
// dropped.
func ParseSwitches(s string) ([]string, error) {
	parts := strings.Split(s, ",")
	if len(parts) > MaxSwitches {
		return nil, fmt.Errorf("%w: %d switches in %q, at most %d", ErrArg, len(parts), s, MaxSwitches)
	}
	seen := make(map[string]bool, len(parts))
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" || seen[p] {
			return nil, fmt.Errorf("%w: switch list %q: want distinct host:port addresses separated by commas", ErrArg, s)
		}
		seen[p] = true
		out = append(out, p)
	}
	return out, nil
}

// EnvMTU reads NDMA_MTU, the network's largest datagram (ndma testbed run
// sets it), through getenv (os.LookupEnv in production): 0 when unset or
// empty, an error wrapping ErrArg when it is not a transport MTU
// (transport.MinMTU..MaxMTU).
func EnvMTU(getenv func(string) (string, bool)) (int, error) {
	ms, ok := getenv("NDMA_MTU")
	if !ok || ms == "" {
		return 0, nil
	}
	mtu, err := strconv.Atoi(ms)
	if err != nil || mtu < transport.MinMTU || mtu > transport.MaxMTU {
		return 0, fmt.Errorf("%w: NDMA_MTU=%q: want a datagram size in bytes, %d to %d", ErrArg, ms, transport.MinMTU, transport.MaxMTU)
	}
	return mtu, nil
}

// envDuration reads variable name as a positive Go duration ("90s",
// "2m"): 0 when unset or empty; with off, "off" is -1 (no bound). Other
// values are an error wrapping ErrArg that names the variable.
func envDuration(getenv func(string) (string, bool), name string, off bool) (time.Duration, error) {
	v, ok := getenv(name)
	if !ok || v == "" {
		return 0, nil
	}
	if off && v == "off" {
		return -1, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		want := "a positive duration such as 90s or 2m"
		if off {
			want += `, or "off"`
		}
		return 0, fmt.Errorf("%w: %s=%q: want %s", ErrArg, name, v, want)
	}
	return d, nil
}

// checkSecurity applies the rule every rank starts under: a credential,
// or Insecure, not both.
func (l Launch) checkSecurity() error {
	insecure, cred, credSet := InsecureEnv+"=1", CredentialEnv, CredentialEnv+"="+l.Credential
	if l.Source == ConfigSource {
		// An explicit configuration, not the environment: name its fields.
		insecure, cred = "insecure (ndma_config.insecure; insecure=True in Python)", "the credential (ndma_config.credential; credential= in Python)"
		credSet = "the credential " + l.Credential
	}
	switch {
	case l.Insecure && l.Credential != "":
		return fmt.Errorf("%w: %s and %s: insecure turns sealing off; give one of them", ErrArg, insecure, credSet)
	case !l.Insecure && l.Credential == "":
		return fmt.Errorf("%w: %w: every rank seals its datagrams: set %s to the rank's member credential, or to the directory ndma fabric init DIR --job %s --ranks %d wrote; "+
			"or %s to run unsealed, where anyone on the network reads and forges the job's traffic", ErrArg, ErrNoCredential, cred, l.Job, l.Size, insecure)
	}
	return nil
}

// ConfigSource is Launch.Source for a launch from an explicit
// configuration (libndma's ndma_config, Python's Communicator arguments)
// rather than the environment: its errors name the configuration's
// fields, not environment variables.
const ConfigSource = "ndma_config"

// CredentialPath returns the file of the rank's credential: Credential
// itself, or, when Credential names a directory (the one ndma fabric init
// --job JOB --ranks N writes, for a launcher that gives every rank the
// same environment), the file JOB/RANK.cred in it, the credential named
// JOB/RANK that binds its holder to this rank of this job. Empty without
// a credential.
func (l Launch) CredentialPath() (string, error) {
	if l.Credential == "" {
		return "", nil
	}
	fi, err := os.Stat(l.Credential)
	if err != nil || !fi.IsDir() {
		return l.Credential, nil // the file's own errors come from reading it
	}
	if l.Job == "" || l.Job == "." || l.Job == ".." || strings.ContainsAny(l.Job, `/\`) {
		return "", fmt.Errorf("%w: %s=%s is a directory, but the job name %q names no file in it: set NDMA_JOB to the job of its credentials", ErrArg, CredentialEnv, l.Credential, l.Job)
	}
	p := filepath.Join(l.Credential, l.Job, strconv.Itoa(l.Rank)+".cred")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%w: %s=%s is a directory without a credential for rank %d of job %q (%s): write them with ndma fabric init --job %s --ranks %d, or set NDMA_JOB to the job they were written for",
			ErrArg, CredentialEnv, l.Credential, l.Rank, l.Job, p, l.Job, l.Size)
	}
	return p, nil
}

// EndpointOptions returns the options of the rank's endpoint: its
// socket's busy poll (l.BusyPoll) and the credential of CredentialPath,
// which must be of role member and readable by its owner alone, with
// every datagram sealed (encrypted and authenticated); with Insecure, no
// security layer. A launch with neither a credential nor Insecure is
// ErrNoCredential. Its errors wrap ErrArg and name NDMA_CREDENTIAL.
func (l Launch) EndpointOptions() (endpoint.Options, error) {
	udp := netio.UDPConfig{BusyPoll: l.BusyPoll}
	if err := l.checkSecurity(); err != nil {
		return endpoint.Options{}, err
	}
	if l.Insecure {
		return endpoint.Options{UDP: udp}, nil
	}
	path, err := l.CredentialPath()
	if err != nil {
		return endpoint.Options{}, err
	}
	b, err := secretfile.ReadFile(path, "credential file")
	if err != nil {
		return endpoint.Options{}, fmt.Errorf("%w: %s=%s: %w", ErrArg, CredentialEnv, l.Credential, err)
	}
	id, err := secure.ParseIdentity(b)
	clear(b)
	if err != nil {
		return endpoint.Options{}, fmt.Errorf("%w: %s=%s: %w", ErrArg, CredentialEnv, path, err)
	}
	if id.Cert.Role != secure.RoleMember {
		return endpoint.Options{}, fmt.Errorf("%w: %s=%s: the credential of a %v (%q); a rank needs one of role member",
			ErrArg, CredentialEnv, path, id.Cert.Role, id.Cert.Name)
	}
	return endpoint.Options{UDP: udp, Security: id, SecurityOptions: secure.Options{}}, nil
}

// FabricOptions returns the options of the rank's control messages to
// the switch: under Token, or, with Insecure and no token,
// unauthenticated.
func (l Launch) FabricOptions() endpoint.FabricOptions {
	return endpoint.FabricOptions{Token: []byte(l.Token), Insecure: l.Token == ""}
}

// Warning returns what a rank started with Insecure should warn its user
// of (what anyone on its network can do to the job), or "" for a rank
// that seals.
func (l Launch) Warning() string {
	if !l.Insecure {
		return ""
	}
	w := InsecureEnv + "=1: the job's datagrams are not sealed: anyone who can capture its traffic reads its data and pool region keys, and replays joins and requests"
	if l.Token == "" {
		w += "; without NDMA_TOKEN nothing is authenticated: anyone who can send to the switch can pose as a rank or as the switch"
	}
	return w + ". Seal with member credentials: ndma fabric init DIR --job JOB --ranks N, NDMA_CREDENTIAL=DIR"
}

// FromEnv creates the world communicator of a job started by a launcher
// (see ParseEnv), rendezvousing at NDMA_SWITCH, which must be set, for
// at most NDMA_JOIN_TIMEOUT (Config.JoinTimeout), with Config.Liveness
// from NDMA_LIVENESS. With NDMA_MTU set, ep's MTU must not be above it.
// Unless NDMA_INSECURE=1, ep must run the security layer: create it with
// the options of ParseEnv's Launch.EndpointOptions.
func FromEnv(ctx context.Context, ep *endpoint.Endpoint) (*Communicator, error) {
	l, err := ParseEnv(os.LookupEnv)
	if err != nil {
		return nil, err
	}
	return l.Communicator(ctx, ep)
}

// Communicator creates the world communicator of the launch l on ep, as
// FromEnv does with the launch it reads: l.Switch must be set; ep must
// seal (a credential, and a token) unless l.Insecure. With l.Switches it
// opens an endpoint per switch after the first (ep's address, a port
// each, ep's MTU, the launch's credential) and closes them when the
// communicator closes: close the communicators Split from it first.
func (l Launch) Communicator(ctx context.Context, ep *endpoint.Endpoint) (*Communicator, error) {
	if l.Credential != "" && ep.Identity() == nil {
		return nil, fmt.Errorf("%w: %s=%s is set, but the endpoint runs without a security layer (a switch with credentials would not answer it): create it with the options of Launch.EndpointOptions",
			ErrArg, CredentialEnv, l.Credential)
	}
	if l.Switch == "" {
		return nil, fmt.Errorf("%w: NDMA_SWITCH is not set (ranks meet at the forwarding node)", ErrArg)
	}
	if l.MTU > 0 && ep.MTU() > l.MTU {
		return nil, fmt.Errorf("%w: the endpoint's MTU is %d bytes, above NDMA_MTU=%d (the network's largest datagram): give the endpoint an MTU of at most %d", ErrArg, ep.MTU(), l.MTU, l.MTU)
	}
	if l.Insecure && l.Credential != "" {
		return nil, l.checkSecurity()
	}
	if !l.Insecure && ep.Identity() == nil {
		return nil, l.checkSecurity()
	}
	if l.Token == "" && !l.Insecure {
		what := "NDMA_TOKEN is not set"
		if l.Source == ConfigSource {
			what = "no fabric token given (ndma_config.token; token= in Python)"
		}
		return nil, fmt.Errorf("%w: %s: give the switch's fabric token (ndma fabric init writes it: DIR/token): %w", ErrArg, what, secure.ErrNoToken)
	}
	fo := l.FabricOptions()
	stripeEps, err := l.stripeEndpoints(ep)
	if err != nil {
		return nil, err
	}
	c, err := New(ctx, Config{Endpoint: ep, Rank: l.Rank, Size: l.Size, Switch: l.Switch, Switches: l.Switches, StripeEndpoints: stripeEps,
		Job: l.Job, Token: fo.Token, Insecure: fo.Insecure, JoinTimeout: l.JoinTimeout, Liveness: l.Liveness, Hierarchy: l.Hierarchy, HostID: l.HostID})
	if err != nil {
		for _, s := range stripeEps {
			s.Close()
		}
	} else {
		c.ownEps = stripeEps
	}
	if err != nil && l.JobFrom != "" && (errors.Is(err, endpoint.ErrRankTaken) || errors.Is(err, wire.StatusBusy)) {
		// Two runs at one switch under one name: the name was not chosen.
		job := "NDMA_JOB"
		if l.Source == ConfigSource {
			job = "the job (ndma_config.job; job= in Python)"
		}
		err = fmt.Errorf("%w (the job name %q is %s, as %s is not set: give each run at this switch a name of its own with %s)", err, l.Job, l.JobFrom, job, job)
	}
	return c, err
}

// stripeEndpoints opens the endpoints of switches 1..K−1 of l.Switches
// (none for one switch): on ep's address with a port of their own, ep's
// MTU and the launch's endpoint options (its credential).
func (l Launch) stripeEndpoints(ep *endpoint.Endpoint) ([]*endpoint.Endpoint, error) {
	if len(l.Switches) < 2 {
		return nil, nil
	}
	opts, err := l.EndpointOptions()
	if err != nil {
		return nil, err
	}
	addr := netip.AddrPortFrom(ep.LocalAddr().Addr(), 0).String()
	var eps []*endpoint.Endpoint
	for range l.Switches[1:] {
		s, err := endpoint.Listen(addr, endpoint.Config{Transport: transport.Config{MTU: ep.MTU()}}, opts)
		if err != nil {
			for _, s := range eps {
				s.Close()
			}
			return nil, fmt.Errorf("%w: the endpoint of a stripe switch: listen on %s: %w", ErrArg, addr, err)
		}
		eps = append(eps, s)
	}
	return eps, nil
}

// Split partitions the communicator MPI_Comm_split style: ranks passing
// the same color form a new communicator, ordered by key then by old
// rank. A negative color (like MPI_UNDEFINED) joins none and gets nil.
// Every rank must call Split. With a switch the new communicators have
// their own groups there (in-network algorithms keep working).
func (c *Communicator) Split(ctx context.Context, color, key int) (*Communicator, error) {
	seq, err := c.call()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.splits++
	nsplit := c.splits
	c.mu.Unlock()
	// Everyone learns everyone's (color, key): each rank sends its pair to
	// all others directly (small; one round).
	mine := make([]byte, 16)
	binary.LittleEndian.PutUint64(mine, uint64(int64(color)))
	binary.LittleEndian.PutUint64(mine[8:], uint64(int64(key)))
	all := make([][2]int, c.size)
	all[c.rank] = [2]int{color, key}
	t := tag(seq, 0)
	var sends []*endpoint.Op
	for r := range c.size {
		if r == c.rank {
			continue
		}
		op := c.sendOp(r, t, mine)
		if err := c.ep.Start(op, nil); err != nil {
			return nil, err
		}
		sends = append(sends, op)
	}
	buf := make([]byte, 16)
	for r := range c.size {
		if r == c.rank {
			continue
		}
		if err := c.recv(ctx, r, t, buf); err != nil {
			return nil, fmt.Errorf("coll: split: %w", err)
		}
		all[r] = [2]int{int(int64(binary.LittleEndian.Uint64(buf))), int(int64(binary.LittleEndian.Uint64(buf[8:])))}
	}
	for _, op := range sends {
		if err := c.awaitOp(ctx, op); err != nil {
			return nil, fmt.Errorf("coll: split: %w", err)
		}
	}
	if color < 0 {
		return nil, nil
	}
	var members []int
	for r, ck := range all {
		if ck[0] == color {
			members = append(members, r)
		}
	}
	sort.SliceStable(members, func(i, j int) bool {
		a, b := all[members[i]], all[members[j]]
		if a[1] != b[1] {
			return a[1] < b[1]
		}
		return members[i] < members[j]
	})
	newRank := -1
	peers := make([]netip.AddrPort, len(members))
	for i, r := range members {
		peers[i] = c.peers[r]
		if r == c.rank {
			newRank = i
		}
	}
	if c.group != nil {
		// A group of the job's own (JOB.SUFFIX), which a sealed switch
		// lets the job's ranks join as any rank (fabric.RankMay); the
		// parent's group id keeps it apart from every other split, and
		// the name short (the switch takes names of at most 64 bytes).
		owner, _ := secure.NameScopes(c.job)
		job := fmt.Sprintf("%s.%x/s%d/c%d", owner, c.id, nsplit, color)
		sw := c.sw
		if c.sharded() { // the new communicators stripe over the same switches
			sw = ""
		}
		return New(ctx, Config{Endpoint: c.ep, Rank: newRank, Size: len(members), Switch: sw, Switches: c.switches, StripeEndpoints: c.stripeEps,
			Job: job, Token: c.token, Insecure: c.insecure, Logger: c.log, Liveness: c.liveness, JoinTimeout: c.joinTimeout})
	}
	// A context id of its own: derived from the parent's, the split and
	// the color, the same on every member.
	h := fnv.New32a()
	fmt.Fprintf(h, "%d/%d/%d", c.id, nsplit, color)
	return newComm(ctx, Config{Endpoint: c.ep, Rank: newRank, Size: len(members), Peers: peers, Logger: c.log, Liveness: c.liveness}, h.Sum32()|1<<31)
}
