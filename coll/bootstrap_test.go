package coll

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
)

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParseEnv(t *testing.T) {
	cases := []struct {
		env             map[string]string
		rank, size      int
		source, job, sw string
		mtu             int
		wantErr         bool
	}{
		{env: map[string]string{"NDMA_RANK": "2", "NDMA_SIZE": "4", "NDMA_SWITCH": "10.0.0.1:7471", "NDMA_JOB": "j"}, rank: 2, size: 4, source: "NDMA", job: "j", sw: "10.0.0.1:7471"},
		{env: map[string]string{"NDMA_RANK": "0", "NDMA_SIZE": "1", "NDMA_MTU": "8972"}, rank: 0, size: 1, source: "NDMA", job: "ndma", mtu: 8972},
		{env: map[string]string{"NDMA_RANK": "0", "NDMA_SIZE": "1", "NDMA_MTU": ""}, rank: 0, size: 1, source: "NDMA", job: "ndma"},
		{env: map[string]string{"NDMA_RANK": "0", "NDMA_SIZE": "1", "NDMA_MTU": "9k"}, wantErr: true},
		{env: map[string]string{"NDMA_RANK": "0", "NDMA_SIZE": "1", "NDMA_MTU": "100"}, wantErr: true},
		{env: map[string]string{"NDMA_RANK": "0", "NDMA_SIZE": "1", "NDMA_MTU": "65508"}, wantErr: true},
		{env: map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_MCA_orte_ess_jobid": "77"}, rank: 0, size: 8, source: "Open MPI", job: "ompi-77"},
		{env: map[string]string{"PMI_RANK": "3", "PMI_SIZE": "5"}, rank: 3, size: 5, source: "PMI", job: "ndma"},
		{env: map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "123"}, rank: 1, size: 2, source: "Slurm", job: "slurm-123"},
		{env: map[string]string{"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "TORCHELASTIC_RUN_ID": "abc"}, rank: 2, size: 4, source: "torchrun", job: "torch-abc"},
		{env: map[string]string{"RANK": "2"}, wantErr: true},
		// Slurm's variables win over torchrun's generic names.
		{env: map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "RANK": "0", "WORLD_SIZE": "8"}, rank: 1, size: 2, source: "Slurm", job: "ndma"},
		// NDMA_* wins over a launcher's variables.
		{env: map[string]string{"NDMA_RANK": "1", "NDMA_SIZE": "2", "SLURM_PROCID": "0", "SLURM_NTASKS": "9"}, rank: 1, size: 2, source: "NDMA", job: "ndma"},
		{env: map[string]string{}, wantErr: true},
		{env: map[string]string{"NDMA_RANK": "1"}, wantErr: true},
		{env: map[string]string{"NDMA_RANK": "x", "NDMA_SIZE": "2"}, wantErr: true},
		{env: map[string]string{"NDMA_RANK": "2", "NDMA_SIZE": "2"}, wantErr: true},
		{env: map[string]string{"PMI_RANK": "-1", "PMI_SIZE": "2"}, wantErr: true},
	}
	for i, c := range cases {
		l, err := ParseEnv(envOf(c.env))
		if c.wantErr {
			if !errors.Is(err, ErrArg) {
				t.Errorf("case %d: got %v, want ErrArg", i, err)
			}
			continue
		}
		if err != nil || l.Rank != c.rank || l.Size != c.size || l.Source != c.source || l.Job != c.job || l.Switch != c.sw || l.MTU != c.mtu {
			t.Errorf("case %d: got %+v %v", i, l, err)
		}
	}
}

// TestParseEnvHierarchy: NDMA_HIERARCHY and NDMA_HOST_ID become the
// launch's Hierarchy and HostID; an unknown mode is refused naming the
// variable.
func TestParseEnvHierarchy(t *testing.T) {
	for _, c := range []struct {
		env     map[string]string
		h       Hierarchy
		host    string
		wantErr bool
	}{
		{env: map[string]string{}, h: DefaultHierarchy},
		{env: map[string]string{"NDMA_HIERARCHY": ""}, h: DefaultHierarchy},
		{env: map[string]string{"NDMA_HIERARCHY": "auto", "NDMA_HOST_ID": "node7"}, h: HierarchyAuto, host: "node7"},
		{env: map[string]string{"NDMA_HIERARCHY": "OFF"}, h: HierarchyOff},
		{env: map[string]string{"NDMA_HIERARCHY": "sometimes"}, wantErr: true},
	} {
		c.env["NDMA_RANK"], c.env["NDMA_SIZE"] = "0", "2"
		l, err := ParseEnv(envOf(c.env))
		if c.wantErr {
			if !errors.Is(err, ErrArg) || !strings.Contains(fmt.Sprint(err), "NDMA_HIERARCHY") {
				t.Errorf("%v: %v, want an ErrArg naming NDMA_HIERARCHY", c.env, err)
			}
			continue
		}
		if err != nil || l.Hierarchy != c.h || l.HostID != c.host {
			t.Errorf("%v: hierarchy %v, host %q, %v; want %v and %q", c.env, l.Hierarchy, l.HostID, err, c.h, c.host)
		}
	}
}

// TestParseEnvToken: NDMA_TOKEN is the token; NDMA_INSECURE=1 runs
// unsealed, with the token or without; a bad NDMA_INSECURE is an error
// naming the variable.
func TestParseEnvToken(t *testing.T) {
	for _, c := range []struct {
		env      map[string]string
		token    string
		insecure bool
		wantErr  string
	}{
		{env: map[string]string{"NDMA_TOKEN": "s3cr3t"}, token: "s3cr3t"},
		{env: map[string]string{"NDMA_INSECURE": "1"}, insecure: true},
		{env: map[string]string{"NDMA_INSECURE": "true"}, insecure: true},
		{env: map[string]string{"NDMA_INSECURE": "0", "NDMA_TOKEN": "s3cr3t"}, token: "s3cr3t"},
		{env: map[string]string{"NDMA_INSECURE": ""}},
		{env: map[string]string{"NDMA_INSECURE": "yes please"}, wantErr: "NDMA_INSECURE"},
		{env: map[string]string{"NDMA_INSECURE": "1", "NDMA_TOKEN": "s3cr3t"}, token: "s3cr3t", insecure: true},
	} {
		c.env["NDMA_RANK"], c.env["NDMA_SIZE"] = "0", "2"
		l, err := ParseEnv(envOf(c.env))
		if c.wantErr != "" {
			if !errors.Is(err, ErrArg) || !strings.Contains(fmt.Sprint(err), c.wantErr) || strings.Contains(fmt.Sprint(err), "s3cr3t") {
				t.Errorf("%v: %v, want an ErrArg naming %s (and not the token)", c.env, err, c.wantErr)
			}
			continue
		}
		if err != nil || l.Token != c.token || l.Insecure != c.insecure {
			t.Errorf("%v: token %q, insecure %v, %v; want %q and %v", c.env, l.Token, l.Insecure, err, c.token, c.insecure)
		}
	}
}

// TestFromEnvNeedsToken: a sealing rank (NDMA_CREDENTIAL) without
// NDMA_TOKEN fails before sending anything, saying what to set.
func TestFromEnvNeedsToken(t *testing.T) {
	t.Setenv("NDMA_RANK", "0")
	t.Setenv("NDMA_SIZE", "2")
	t.Setenv("NDMA_SWITCH", "127.0.0.1:7471")
	t.Setenv("NDMA_TOKEN", "")
	t.Setenv("NDMA_INSECURE", "")
	t.Setenv(CredentialEnv, writeCredential(t, t.TempDir(), secure.RoleMember))
	l, err := ParseEnv(os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := l.EndpointOptions()
	if err != nil {
		t.Fatal(err)
	}
	ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	_, err = FromEnv(context.Background(), ep)
	if !errors.Is(err, ErrArg) || !errors.Is(err, secure.ErrNoToken) || !strings.Contains(err.Error(), "NDMA_TOKEN is not set") {
		t.Fatalf("FromEnv without a token: %v; want ErrArg and secure.ErrNoToken, naming NDMA_TOKEN", err)
	}
	if st := ep.Stats(); st.Transport.PacketsSent != 0 {
		t.Fatalf("sent %d packets before refusing", st.Transport.PacketsSent)
	}
}

// TestLaunchSealsByDefault: a launch with neither NDMA_CREDENTIAL nor
// NDMA_INSECURE=1 is refused (ErrNoCredential) by EndpointOptions and
// by Communicator, before anything is sent, saying how to make
// credentials and naming NDMA_INSECURE; both at once are refused too.
// NDMA_INSECURE=1 runs unsealed, with a warning that says whether the
// token still authenticates control messages.
func TestLaunchSealsByDefault(t *testing.T) {
	l := Launch{Rank: 1, Size: 4, Switch: "127.0.0.1:9", Job: "train", Token: "t"}
	if _, err := l.EndpointOptions(); !errors.Is(err, ErrArg) || !errors.Is(err, ErrNoCredential) ||
		!strings.Contains(err.Error(), "ndma fabric init DIR --job train --ranks 4") || !strings.Contains(err.Error(), "NDMA_INSECURE=1") {
		t.Fatalf("EndpointOptions without a credential: %v", err)
	}
	if l.Warning() != "" {
		t.Fatalf("a sealing launch warns: %q", l.Warning())
	}
	ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	if _, err := l.Communicator(context.Background(), ep); !errors.Is(err, ErrNoCredential) {
		t.Fatalf("Communicator on a plain endpoint without NDMA_INSECURE: %v, want ErrNoCredential", err)
	}
	if st := ep.Stats(); st.Transport.PacketsSent != 0 {
		t.Fatalf("sent %d packets before refusing", st.Transport.PacketsSent)
	}
	both := l
	both.Insecure, both.Credential = true, writeCredential(t, t.TempDir(), secure.RoleMember)
	if _, err := both.EndpointOptions(); !errors.Is(err, ErrArg) || !strings.Contains(err.Error(), "NDMA_INSECURE=1 and NDMA_CREDENTIAL") {
		t.Fatalf("EndpointOptions with NDMA_INSECURE=1 and a credential: %v", err)
	}
	insecure := l
	insecure.Insecure = true
	if opts, err := insecure.EndpointOptions(); err != nil || opts.Security != nil {
		t.Fatalf("NDMA_INSECURE=1: %+v, %v; want no security layer", opts, err)
	}
	if w := insecure.Warning(); !strings.Contains(w, "not sealed") || strings.Contains(w, "nothing is authenticated") {
		t.Fatalf("NDMA_INSECURE=1 with a token: warning %q", w)
	}
	if fo := insecure.FabricOptions(); string(fo.Token) != "t" || fo.Insecure {
		t.Fatalf("NDMA_INSECURE=1 with a token: fabric options %+v, want the token", fo)
	}
	insecure.Token = ""
	if w := insecure.Warning(); !strings.Contains(w, "nothing is authenticated") {
		t.Fatalf("NDMA_INSECURE=1 without a token: warning %q", w)
	}
	if fo := insecure.FabricOptions(); !fo.Insecure {
		t.Fatalf("NDMA_INSECURE=1 without a token: fabric options %+v, want unauthenticated", fo)
	}
}

// TestParseEnvDurations: NDMA_JOIN_TIMEOUT, NDMA_LIVENESS and
// NDMA_BUSY_POLL are Go durations (NDMA_LIVENESS also "off"); a bad value
// is an error naming the variable; the busy poll reaches the endpoint's
// options.
func TestParseEnvDurations(t *testing.T) {
	base := func(kv ...string) map[string]string {
		m := map[string]string{"NDMA_RANK": "0", "NDMA_SIZE": "2", "NDMA_INSECURE": "1"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, c := range []struct {
		env               map[string]string
		join, live, busy  time.Duration
		wantErrNamingThis string
	}{
		{env: base()},
		{env: base("NDMA_JOIN_TIMEOUT", "", "NDMA_LIVENESS", "")},
		{env: base("NDMA_JOIN_TIMEOUT", "90s", "NDMA_LIVENESS", "2m30s"), join: 90 * time.Second, live: 150 * time.Second},
		{env: base("NDMA_LIVENESS", "off"), live: -1},
		{env: base("NDMA_JOIN_TIMEOUT", "90"), wantErrNamingThis: "NDMA_JOIN_TIMEOUT"},
		{env: base("NDMA_JOIN_TIMEOUT", "0s"), wantErrNamingThis: "NDMA_JOIN_TIMEOUT"},
		{env: base("NDMA_JOIN_TIMEOUT", "off"), wantErrNamingThis: "NDMA_JOIN_TIMEOUT"},
		{env: base("NDMA_LIVENESS", "-5s"), wantErrNamingThis: "NDMA_LIVENESS"},
		{env: base("NDMA_LIVENESS", "forever"), wantErrNamingThis: "NDMA_LIVENESS"},
		{env: base("NDMA_BUSY_POLL", "50us"), busy: 50 * time.Microsecond},
		{env: base("NDMA_BUSY_POLL", "0")},
		{env: base("NDMA_BUSY_POLL", "-1us"), wantErrNamingThis: "NDMA_BUSY_POLL"},
		{env: base("NDMA_BUSY_POLL", "1s"), wantErrNamingThis: "NDMA_BUSY_POLL"},
		{env: base("NDMA_BUSY_POLL", "spin"), wantErrNamingThis: "NDMA_BUSY_POLL"},
	} {
		l, err := ParseEnv(envOf(c.env))
		if c.wantErrNamingThis != "" {
			if !errors.Is(err, ErrArg) || !strings.Contains(fmt.Sprint(err), c.wantErrNamingThis) {
				t.Errorf("%v: %v, want an ErrArg naming %s", c.env, err, c.wantErrNamingThis)
			}
			continue
		}
		if err != nil || l.JoinTimeout != c.join || l.Liveness != c.live || l.BusyPoll != c.busy {
			t.Errorf("%v: join timeout %v, liveness %v, busy poll %v, %v; want %v, %v and %v", c.env, l.JoinTimeout, l.Liveness, l.BusyPoll, err, c.join, c.live, c.busy)
		}
		if opts, err := l.EndpointOptions(); err != nil || opts.UDP.BusyPoll != c.busy {
			t.Errorf("%v: endpoint options busy poll %v, %v; want %v", c.env, opts.UDP.BusyPoll, err, c.busy)
		}
	}
}

// TestFromEnvJoinTimeout: FromEnv's rendezvous waits NDMA_JOIN_TIMEOUT,
// then says which ranks are missing.
func TestFromEnvJoinTimeout(t *testing.T) {
	t.Setenv("NDMA_RANK", "0")
	t.Setenv("NDMA_SIZE", "3")
	t.Setenv("NDMA_SWITCH", "10.0.0.1:7471")
	t.Setenv("NDMA_JOB", "env")
	t.Setenv("NDMA_INSECURE", "1")
	t.Setenv("NDMA_JOIN_TIMEOUT", "7s")
	t.Setenv("NDMA_TOKEN", string(testToken))
	envFabric(t, 1, func(t *testing.T, eps []*endpoint.Endpoint) {
		start := time.Now()
		_, err := FromEnv(context.Background(), eps[0])
		var re *endpoint.RendezvousError
		if !errors.As(err, &re) || !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 8*time.Second ||
			!strings.HasSuffix(err.Error(), `join "env": rendezvous timed out after 7s: 1 of 3 ranks joined; missing ranks 1, 2`) {
			t.Fatalf("FromEnv: %v after %v; want the rendezvous to time out after NDMA_JOIN_TIMEOUT=7s naming ranks 1 and 2", err, time.Since(start))
		}
	})
}

// TestSimLivenessWithSwitch: with a switch, a positive Config.Liveness
// bounds a host algorithm's wait for a rank that is alive (it heartbeats)
// but never enters the collective; the survivors' error names it.
func TestSimLivenessWithSwitch(t *testing.T) {
	const n, live = 3, 5 * time.Second
	simWorldConfig(t, n, true, figLink(), 7, func(c *Config) { c.Liveness = live }, func(t *testing.T, _ *simnet.Network, comms []*Communicator) {
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := time.Now()
		// The context only ends a run in which Liveness does not.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for r := range n - 1 { // rank n-1 stays out
			wg.Go(func() { errs[r] = comms[r].Barrier(ctx, WithAlgo(AlgoRecursiveDoubling)) })
		}
		wg.Wait()
		if took := time.Since(start); took > (n-1)*live+time.Second {
			t.Errorf("the barrier failed after %v, want at most %v", took, (n-1)*live+time.Second)
		}
		named := 0
		for r, err := range errs[:n-1] {
			var re *RankError
			if !errors.As(err, &re) {
				t.Fatalf("rank %d: %v, want a RankError", r, err)
			}
			if re.Rank == n-1 {
				named++
			}
			t.Logf("rank %d: %v", r, err)
		}
		if named == 0 {
			t.Errorf("no survivor names the silent rank %d", n-1)
		}
	})
}

// TestSplit: even and odd ranks form two communicators ordered by key;
// a negative color joins none. Then a collective runs on each half.
func TestSplit(t *testing.T) {
	for _, innet := range []bool{false, true} {
		comms := udpComms(t, 5, innet)
		subs := make([]*Communicator, 5)
		runAll(t, comms, func(ctx context.Context, c *Communicator) error {
			color := c.Rank() % 2
			if c.Rank() == 4 {
				color = -1
			}
			s, err := c.Split(ctx, color, -c.Rank()) // reverse order by key
			subs[c.Rank()] = s
			return err
		})
		if subs[4] != nil {
			t.Fatal("negative color got a communicator")
		}
		// Evens {0, 2} reversed: 2 is rank 0. Odds {1, 3} reversed: 3 is rank 0.
		want := map[int][2]int{0: {1, 2}, 2: {0, 2}, 1: {1, 2}, 3: {0, 2}}
		for r, w := range want {
			if subs[r].Rank() != w[0] || subs[r].Size() != w[1] {
				t.Fatalf("innet=%v rank %d: sub rank %d size %d, want %v", innet, r, subs[r].Rank(), subs[r].Size(), w)
			}
			if subs[r].InNetwork() != innet {
				t.Fatalf("sub InNetwork %v", subs[r].InNetwork())
			}
		}
		runAll(t, comms[:4], func(ctx context.Context, c *Communicator) error {
			s := subs[c.Rank()]
			buf := []int64{int64(c.Rank())}
			if err := Allreduce(ctx, s, nil, buf, Sum); err != nil {
				return err
			}
			if want := int64(2 + 2*(c.Rank()%2)); buf[0] != want { // 0+2 or 1+3
				return fmt.Errorf("sub allreduce %d, want %d", buf[0], want)
			}
			return nil
		})
	}
}

// TestFromEnvMTU: an endpoint whose MTU is above NDMA_MTU is refused
// before it reaches the switch, with both numbers in the error.
func TestFromEnvMTU(t *testing.T) {
	t.Setenv("NDMA_RANK", "0")
	t.Setenv("NDMA_SIZE", "1")
	t.Setenv("NDMA_SWITCH", "127.0.0.1:9") // never contacted
	t.Setenv("NDMA_MTU", "1472")
	ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	_, err = FromEnv(context.Background(), ep)
	if !errors.Is(err, ErrArg) || !strings.Contains(err.Error(), "9000") || !strings.Contains(err.Error(), "NDMA_MTU=1472") {
		t.Fatalf("FromEnv with MTU 9000 under NDMA_MTU=1472: %v, want ErrArg naming both", err)
	}
}

// writeCredential issues a credential of role under a fresh fabric secret
// and writes it, private, to a file in dir.
func writeCredential(t *testing.T, dir string, role secure.Role) string {
	t.Helper()
	a, err := secure.NewAuthority([]byte("a fabric secret of the test, 32 bytes"))
	if err != nil {
		t.Fatal(err)
	}
	id, err := a.Issue(role, "rank0", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b, err := id.Encode()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, secure.RoleName(role)+".cred")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestEndpointOptionsCredential: NDMA_CREDENTIAL names the rank's
// credential file; a good one (role member) gives endpoint options that
// seal every datagram under it, a missing, exposed or malformed file or
// one of another role is an error that names the variable, and none gives
// no security layer.
func TestEndpointOptionsCredential(t *testing.T) {
	dir := t.TempDir()
	member := writeCredential(t, dir, secure.RoleMember)
	client := writeCredential(t, dir, secure.RoleClient)
	exposed := filepath.Join(dir, "exposed.cred")
	b, err := os.ReadFile(member)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exposed, b, 0o644); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage.cred")
	if err := os.WriteFile(garbage, []byte("not a credential\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := map[string]string{"NDMA_RANK": "0", "NDMA_SIZE": "2"}
	launch := func(cred string) Launch {
		env := maps.Clone(base)
		if cred != "" {
			env[CredentialEnv] = cred
		}
		l, err := ParseEnv(envOf(env))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}

	if _, err := launch("").EndpointOptions(); !errors.Is(err, ErrNoCredential) {
		t.Fatalf("without NDMA_CREDENTIAL: %v; want ErrNoCredential", err)
	}
	l := launch(member)
	opts, err := l.EndpointOptions()
	if l.Credential != member {
		t.Fatalf("Launch.Credential %q, want %q", l.Credential, member)
	}
	if err != nil || opts.Security == nil || opts.Security.Cert.Role != secure.RoleMember || opts.SecurityOptions.AuthenticateOnly {
		t.Fatalf("NDMA_CREDENTIAL=%s: %+v, %v; want the member's identity, encrypting", member, opts, err)
	}
	ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	if id := ep.Identity(); id == nil || id.Cert.Name != "rank0" {
		t.Fatalf("endpoint identity %v, want the credential's", id)
	}

	for _, c := range []struct{ path, says string }{
		{filepath.Join(dir, "missing.cred"), "missing.cred"},
		{exposed, "exposed.cred"},
		{garbage, "not an NDMA credential"},
		{client, "role member"},
	} {
		_, err := launch(c.path).EndpointOptions()
		if !errors.Is(err, ErrArg) || !strings.Contains(err.Error(), "NDMA_CREDENTIAL="+c.path) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("NDMA_CREDENTIAL=%s: %v; want ErrArg naming the variable and saying %q", c.path, err, c.says)
		}
	}
}

// TestFromEnvCredentialNeedsLayer: with NDMA_CREDENTIAL set, FromEnv
// refuses an endpoint without a security layer (a sealed switch would
// never answer it) before sending anything, naming the variable.
func TestFromEnvCredentialNeedsLayer(t *testing.T) {
	t.Setenv("NDMA_RANK", "0")
	t.Setenv("NDMA_SIZE", "2")
	t.Setenv("NDMA_SWITCH", "127.0.0.1:7471")
	t.Setenv("NDMA_TOKEN", "a token")
	t.Setenv(CredentialEnv, writeCredential(t, t.TempDir(), secure.RoleMember))
	ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	_, err = FromEnv(context.Background(), ep)
	if !errors.Is(err, ErrArg) || !strings.Contains(err.Error(), "NDMA_CREDENTIAL=") || !strings.Contains(err.Error(), "without a security layer") {
		t.Fatalf("FromEnv with NDMA_CREDENTIAL and a plain endpoint: %v; want ErrArg naming NDMA_CREDENTIAL", err)
	}
	if st := ep.Stats(); st.Transport.PacketsSent != 0 {
		t.Fatalf("sent %d packets before refusing", st.Transport.PacketsSent)
	}
}

// TestCredentialDirectory: NDMA_CREDENTIAL naming a directory (the one
// ndma fabric init --job JOB --ranks N writes) gives each rank its own
// credential, JOB/RANK.cred in it; a rank without one there, or a job
// name that names no file, is an error saying what to do.
func TestCredentialDirectory(t *testing.T) {
	dir := t.TempDir()
	a, err := secure.NewAuthority([]byte("a fabric secret of the test, 32 bytes"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "train"), 0o700); err != nil {
		t.Fatal(err)
	}
	for r := range 2 {
		id, err := a.Issue(secure.RoleMember, "train/"+strconv.Itoa(r), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		b, err := id.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "train", strconv.Itoa(r)+".cred"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for r := range 2 {
		l, err := ParseEnv(envOf(map[string]string{"NDMA_RANK": strconv.Itoa(r), "NDMA_SIZE": "2", "NDMA_JOB": "train", CredentialEnv: dir}))
		if err != nil {
			t.Fatal(err)
		}
		opts, err := l.EndpointOptions()
		if err != nil || opts.Security == nil || opts.Security.Cert.Name != "train/"+strconv.Itoa(r) {
			t.Fatalf("rank %d with NDMA_CREDENTIAL=%s: %+v, %v; want the credential train/%d", r, dir, opts.Security, err, r)
		}
	}
	for _, c := range []struct {
		l    Launch
		want string
	}{
		{Launch{Rank: 2, Size: 3, Job: "train", Credential: dir}, "ndma fabric init --job train --ranks 3"},
		{Launch{Rank: 0, Size: 2, Job: "other", Credential: dir}, "without a credential for rank 0 of job \"other\""},
		{Launch{Rank: 0, Size: 2, Job: "../train", Credential: dir}, "names no file in it"},
	} {
		if _, err := c.l.EndpointOptions(); !errors.Is(err, ErrArg) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want ErrArg saying %q", c.l, err, c.want)
		}
	}
}

// TestFromEnvDefaultJobTaken: two runs at one switch without NDMA_JOB
// share the default job name; the second one's rank 0 is refused as
// taken, and the error says the name was the default and that NDMA_JOB
// gives each run its own.
func TestFromEnvDefaultJobTaken(t *testing.T) {
	t.Setenv("NDMA_RANK", "0")
	t.Setenv("NDMA_SIZE", "2")
	t.Setenv("NDMA_SWITCH", "10.0.0.1:7471")
	t.Setenv("NDMA_JOB", "")
	t.Setenv("NDMA_INSECURE", "1")
	t.Setenv("NDMA_JOIN_TIMEOUT", "5s")
	t.Setenv("NDMA_TOKEN", string(testToken))
	envFabric(t, 2, func(t *testing.T, eps []*endpoint.Endpoint) {
		first := make(chan error, 1)
		go func() { _, err := FromEnv(context.Background(), eps[0]); first <- err }()
		time.Sleep(100 * time.Millisecond)
		_, err := FromEnv(context.Background(), eps[1])
		if !errors.Is(err, endpoint.ErrRankTaken) || !strings.Contains(err.Error(), `the job name "ndma" is the default, as NDMA_JOB is not set`) {
			t.Fatalf("the second run's rank 0: %v, want ErrRankTaken naming NDMA_JOB", err)
		}
		<-first
	})
}

// envFabric runs f in a synctest bubble on a simulated network with a
// switch at 10.0.0.1:7471 (NDMA_SWITCH of the tests that launch from the
// environment) and n endpoints, which f launches ranks on.
func envFabric(t *testing.T, n int, f func(t *testing.T, eps []*endpoint.Endpoint)) {
	synctest.Test(t, func(t *testing.T) {
		net := simnet.New(1)
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- net.Serve(ctx) }()
		defer func() { cancel(); <-served }()
		s, err := fabric.New(fabric.Config{Token: testToken, Transport: transport.Config{MTU: 9000, Seed: 1}})
		if err != nil {
			t.Fatal(err)
		}
		srv := fabric.NewServer(net.ListenConn(netip.MustParseAddrPort("10.0.0.1:7471"), figLink(), figLink()), s, nil)
		defer srv.Close()
		var eps []*endpoint.Endpoint
		for i := range n {
			ep, err := endpoint.New(net.ListenConn(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, 0, byte(i)}), 9000), figLink(), figLink()),
				endpoint.Config{Transport: transport.Config{MTU: 9000, Seed: uint64(2 + i)}}, endpoint.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer ep.Close()
			eps = append(eps, ep)
		}
		f(t, eps)
	})
}

// TestConfigLaunchNamesFields: a launch from an explicit configuration
// (libndma's ndma_config, Python's Communicator arguments) that lacks a
// credential, or has one with insecure, says so in the configuration's
// terms, not as environment variables the caller never used.
func TestConfigLaunchNamesFields(t *testing.T) {
	l := Launch{Rank: 0, Size: 2, Switch: "10.0.0.1:7471", Job: "j", Source: ConfigSource}
	_, err := l.EndpointOptions()
	if !errors.Is(err, ErrNoCredential) || !strings.Contains(err.Error(), "ndma_config.credential; credential= in Python") || strings.Contains(err.Error(), "NDMA_") {
		t.Errorf("no credential: %v", err)
	}
	l.Insecure, l.Credential = true, "/some/file.cred"
	if _, err := l.EndpointOptions(); !errors.Is(err, ErrArg) || !strings.Contains(err.Error(), "insecure=True in Python") || strings.Contains(err.Error(), "NDMA_") {
		t.Errorf("a credential with insecure: %v", err)
	}
}
