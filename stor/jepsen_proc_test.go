package stor

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/internal/jepsen"
	"github.com/ndma/ndma/secure"
)

// jProc is one daemon of the real-process Jepsen run: an ndma command
// line it is started (and restarted) with, on the same address.
type jProc struct {
	name string
	args []string
	log  *jLog
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// jLog is a daemon's output, kept across its restarts, with a line for
// each exit it was not killed into.
type jLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *jLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(b)
}

func (l *jLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (p *jProc) start(bin string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%w: %s runs", jepsen.ErrSkip, p.name)
	}
	cmd := exec.Command(bin, p.args...)
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		err := cmd.Wait()
		if cmd.ProcessState != nil && !cmd.ProcessState.Exited() {
			err = nil // killed by the nemesis
		}
		if err != nil || cmd.ProcessState.Exited() {
			fmt.Fprintf(p.log, "--- %s exited on its own at %s: %v\n", p.name, time.Now().Format(time.TimeOnly), err)
		}
		close(done)
	}()
	p.cmd, p.done = cmd, done
	return nil
}

// kill SIGKILLs the process and waits for it to be gone.
func (p *jProc) kill() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("%w: %s is down", jepsen.ErrSkip, p.name)
	}
	p.cmd.Process.Kill()
	<-p.done
	p.cmd = nil
	return nil
}

func (p *jProc) up() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// jFreeAddr is a loopback UDP address nothing listens on now.
func jFreeAddr(t *testing.T) string {
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().String()
}

// TestProcJepsenVolume is TestSimJepsenVolume against real processes on
// loopback: an `ndma switch` (dropping 1% of what it sends) and three
// `ndma stord`, each sealed under its own credential, that the nemesis
// SIGKILLs and starts again (the switch too), several at once, while one
// writer and two reader clients (in this process) work on a 3-replica
// volume; the history is checked block by block and the replicas'
// backing files compared after the heal. Real processes run on the
// machine's scheduler, so a run is not reproducible from its seed (the
// seed fixes the nemesis's plan and the clients' choices): it runs only
// with STOR_JEPSEN_PROC=1 (STOR_JEPSEN_PROC_SEEDS=A-B for several runs,
// STOR_JEPSEN_PROC_FAULTS the nemesis's schedule, default 60s).
func TestProcJepsenVolume(t *testing.T) { procJepsen(t, "STOR_JEPSEN_PROC_SEEDS", 201, false) }

// TestProcJepsenGateway is TestProcJepsenVolume with the writer and the
// readers going through an `ndma storgw` (controller mode), which the
// nemesis SIGKILLs and starts again too (STOR_JEPSEN_PROC=1;
// STOR_JEPSEN_PROC_GW_SEEDS=A-B for several runs).
func TestProcJepsenGateway(t *testing.T) { procJepsen(t, "STOR_JEPSEN_PROC_GW_SEEDS", 301, true) }

func procJepsen(t *testing.T, seedsEnv string, seed0 int64, gateway bool) {
	if os.Getenv("STOR_JEPSEN_PROC") != "1" {
		t.Skip("SIGKILLs real processes for minutes: STOR_JEPSEN_PROC=1 runs it")
	}
	seeds := jSeeds(t, seedsEnv, seed0)
	faults := time.Minute
	if v := os.Getenv("STOR_JEPSEN_PROC_FAULTS"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("STOR_JEPSEN_PROC_FAULTS=%q: want a duration", v)
		}
		faults = d
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "ndma")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/ndma/ndma/cmd/ndma").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { jepsenProc(t, bin, seed, faults, gateway) })
	}
}

// jepsenProc runs one seed; with gateway, the clients go through an
// ndma storgw that the nemesis kills too.
func jepsenProc(t *testing.T, bin string, seed int64, faults time.Duration, gateway bool) {
	dir := t.TempDir()
	auth, err := secure.NewAuthority([]byte(fmt.Sprintf("jepsen process run secret %d", seed)))
	if err != nil {
		t.Fatal(err)
	}
	cred := func(role secure.Role, name string) (string, *secure.Identity) {
		id, err := auth.Issue(role, name, crand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		b, err := id.Encode()
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, fmt.Sprintf("%s-%s.cred", secure.RoleName(role), filepath.Base(name)))
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p, id
	}
	token := []byte(fmt.Sprintf("jepsen process run token %d", seed))
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, append(token, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	swAddr := jFreeAddr(t)
	swCred, _ := cred(secure.RoleSwitch, "switch")
	procs := []*jProc{{name: "switch", log: &jLog{}, args: []string{"switch", "--listen", swAddr, "--token-file", tokenFile,
		"--credential", swCred, "--drop", "0.01", "--seed", strconv.FormatInt(seed, 10)}}}
	var dirs []string
	for i := range 3 {
		nodeCred, _ := cred(secure.RoleMember, fmt.Sprint("stor/node", i))
		d := filepath.Join(dir, fmt.Sprint("node", i))
		dirs = append(dirs, d)
		procs = append(procs, &jProc{name: fmt.Sprint("node ", i), log: &jLog{}, args: []string{"stord", "--dir", d, "--id", strconv.Itoa(i),
			"--listen", jFreeAddr(t), "--switch", swAddr, "--token-file", tokenFile, "--credential", nodeCred, "--log-level", "warn"}})
	}
	var via string
	if gateway {
		gwCred, _ := cred(secure.RoleMember, "stor/gateway")
		procs = append(procs, &jProc{name: "gateway", log: &jLog{}, args: []string{"storgw", "--listen", jFreeAddr(t), "--switch", swAddr,
			"--token-file", tokenFile, "--credential", gwCred, "--log-level", "warn"}})
		via = GatewayName(DefaultService)
	}
	defer func() {
		for _, p := range procs {
			p.kill()
			if t.Failed() {
				t.Logf("%s's log:\n%s", p.name, p.log.String())
			}
		}
	}()
	for _, p := range procs {
		if err := p.start(bin); err != nil {
			t.Fatal(err)
		}
	}
	var clientN int
	client := func() *Client {
		clientN++
		_, id := cred(secure.RoleMember, fmt.Sprint("jclient", clientN))
		ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{Security: id, SecurityOptions: secure.Options{}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ep.Close() })
		return NewClient(ep, swAddr, ClientOptions{Fabric: endpoint.FabricOptions{Token: token}})
	}

	h := jepsen.NewHistory(nil)
	vals := &jValues{ids: map[uint64]uint64{}, other: map[uint64]uint64{}}
	errs := &jErrors{n: map[string]int{}}
	var divergent []jepsen.Divergence
	defer func() { jReport(t, seed, h, vals, divergent) }()
	ctx, cancel := context.WithTimeout(context.Background(), faults+5*time.Minute)
	defer cancel()
	c := client()
	var d Descriptor
	for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		// The nodes register with the switch as they come up.
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		d, err = c.Create(cctx, VolumeSpec{Name: jVolume, Size: jExtents * MinExtent, Extent: MinExtent, Replicas: 3})
		ccancel()
		if err == nil {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("create: %v", err)
		}
	}
	// The gateway (if any) registers as it comes up.
	open := func(c *Client, o OpenOptions) *Volume {
		for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
			v, err := c.Open(ctx, jVolume, o)
			if err == nil {
				return v
			}
			if time.Since(start) > 30*time.Second {
				t.Fatalf("open: %v", err)
			}
		}
	}
	w := open(c, OpenOptions{Write: true, Controller: via})
	var readers []*Volume
	for range jReaders {
		readers = append(readers, open(client(), OpenOptions{Controller: via}))
	}
	work := jStartWork(seed, h, vals, errs, w, readers)
	defer work.halt()

	var fs []jepsen.Fault
	for _, p := range procs {
		kind := "crash node"
		switch p.name {
		case "switch":
			kind = "crash switch"
		case "gateway":
			kind = "crash gateway"
		}
		fs = append(fs, jepsen.Fault{Name: "kill " + p.name, Kind: kind, Target: p.name,
			Start: p.kill, Stop: func() error { return p.start(bin) }})
	}
	nem, err := jepsen.NewNemesis(rand.New(rand.NewPCG(uint64(seed), 0xfa)), jepsen.NemesisConfig{
		Faults: fs, Total: faults, MinGap: 500 * time.Millisecond, MaxGap: 4 * time.Second,
		MinDuration: time.Second, MaxDuration: 8 * time.Second, MaxActive: 3}, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("seed %d: nemesis plan %v", seed, nem.Plan())
	if err := nem.Run(ctx); err != nil {
		t.Errorf("seed %d: nemesis: %v", seed, err)
	}
	jHeal(ctx, t, seed, c, work, w, client(), h, vals, d)
	var snaps []jepsen.Snapshot
	for i, nd := range dirs {
		if !procs[1+i].up() {
			t.Errorf("seed %d: node %d is down: its copy is left out of the comparison", seed, i)
			continue
		}
		snaps = append(snaps, jSnapshot(t, seed, i, nd, d))
	}
	divergent = jepsen.CompareReplicas(snaps)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Errorf("seed %d: the run took longer than its %v", seed, faults+5*time.Minute)
	}
	t.Logf("seed %d: errors by kind:%v", seed, errs)
}
