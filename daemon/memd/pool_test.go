package memd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// TestLendToPool: a memory node started with Switch lends its region to
// the switch's pool (the switch lists it, alive, with the region's size),
// and once it stops it tells the switch, which forgets it at once (it
// holds no region copies), without waiting for its heartbeat timeout.
func TestLendToPool(t *testing.T) {
	token := []byte("lend")
	conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := fabric.New(fabric.Config{Token: token, HeartbeatTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	fsrv := fabric.NewServer(conn, sw, nil)
	defer fsrv.Close()
	addr := fsrv.Addr().String()

	srv, err := Start(Config{Listen: "127.0.0.1:0", Size: 1 << 20, Switch: addr, Token: token, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wait := func(want string, ok func([]ctrl.PoolNodeInfo) bool) {
		t.Helper()
		for {
			ps, err := cli.PoolStat(ctx, addr, endpoint.FabricOptions{Token: token})
			nodes := ps.Nodes
			if err != nil {
				t.Fatal(err)
			}
			if ok(nodes) {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("%s: nodes %+v", want, nodes)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	wait("the node lent its region", func(n []ctrl.PoolNodeInfo) bool {
		return len(n) == 1 && n[0].Alive && n[0].Capacity == 1<<20 && n[0].Addr == srv.Addr()
	})
	stopped := time.Now()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	wait("the stopped node is forgotten", func(n []ctrl.PoolNodeInfo) bool { return len(n) == 0 })
	if d := time.Since(stopped); d > 5*time.Second {
		t.Errorf("the switch forgot the stopped node %v after it stopped", d)
	}
}

// startSwitch serves a fabric switch with token on a loopback port.
func startSwitch(t *testing.T, token []byte) string {
	t.Helper()
	conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := fabric.New(fabric.Config{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	fsrv := fabric.NewServer(conn, sw, nil)
	t.Cleanup(func() { fsrv.Close() })
	return fsrv.Addr().String()
}

// TestLendWrongTokenFailsStart: a switch that refuses the node's first
// pool offer for its fabric token fails Start with an error naming the
// cause, instead of a node that retries in the background forever.
func TestLendWrongTokenFailsStart(t *testing.T) {
	addr := startSwitch(t, []byte("right"))
	srv, err := Start(Config{Listen: "127.0.0.1:0", Size: 1 << 20, Switch: addr, Token: []byte("wrong")})
	if err == nil {
		srv.Close()
		t.Fatal("Start with a wrong token succeeded")
	}
	fe, ok := errors.AsType[*FieldError](err)
	if !ok || fe.Field != "Switch" || !errors.Is(err, ErrLendRefused) || !errors.Is(err, wire.StatusAuth) {
		t.Fatalf("Start: %v; want a *FieldError for Switch wrapping ErrLendRefused and wire.StatusAuth", err)
	}
	if !strings.Contains(err.Error(), "token") || !strings.Contains(err.Error(), addr) {
		t.Errorf("error %q does not name the token and the switch", err)
	}
}

// TestLendNoAnswerRetries: a switch address where nothing answers yet does
// not fail Start (the switch may come up later); the node says so once.
func TestLendNoAnswerRetries(t *testing.T) {
	quiet, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{}) // bound, never read
	if err != nil {
		t.Fatal(err)
	}
	defer quiet.Close()
	var logs strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &logs}, nil))
	srv, err := Start(Config{Listen: "127.0.0.1:0", Size: 1 << 20, Switch: quiet.LocalAddr().String(), Token: []byte("t"), Logger: log})
	if err != nil {
		t.Fatalf("Start with a silent switch: %v", err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logs.String(), "no switch answers yet"); n != 1 {
		t.Errorf("%d log lines say no switch answers, want 1:\n%s", n, logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestLogsHoldNoSecrets: a memory node lending a key file's region to a
// switch logs its start, its region and its lending without the region's
// key (the node's key opens every pool region on it) or the fabric token;
// one lending without a token (Insecure) warns that it does.
func TestLogsHoldNoSecrets(t *testing.T) {
	const key = 0x5eed00c0ffee4242
	for _, insecure := range []bool{false, true} {
		token := []byte("memd-logs-token")
		conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
		if err != nil {
			t.Fatal(err)
		}
		fcfg := fabric.Config{Token: token}
		if insecure {
			fcfg = fabric.Config{Insecure: true}
		}
		sw, err := fabric.New(fcfg)
		if err != nil {
			t.Fatal(err)
		}
		fsrv := fabric.NewServer(conn, sw, nil)
		var logs strings.Builder
		var mu sync.Mutex
		log := slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &logs}, nil))
		cfg := Config{Listen: "127.0.0.1:0", KeyFile: writeKeyFile(t, FormatKey(key)+" 1MiB rwav\n"),
			Switch: fsrv.Addr().String(), Token: fcfg.Token, Insecure: insecure, Logger: log}
		srv, err := Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		addr := srv.Addr().String()
		if err := srv.Close(); err != nil {
			t.Fatal(err)
		}
		fsrv.Close()
		mu.Lock()
		out := logs.String()
		mu.Unlock()
		if !strings.Contains(out, "memd: lending to the pool") || !strings.Contains(out, "memd: region") {
			t.Fatalf("insecure %v: the logs do not show the region and the lending:\n%s", insecure, out)
		}
		for _, secret := range []string{FormatKey(key), fmt.Sprintf("%x", uint64(key)), fmt.Sprint(uint64(key)), string(token)} {
			if strings.Contains(out, secret) {
				t.Errorf("insecure %v: %q in the logs:\n%s", insecure, secret, out)
			}
		}
		warned := strings.Contains(out, "level=WARN msg=\"memd: running without authentication: anyone who can send to "+addr)
		if warned != insecure {
			t.Errorf("insecure %v: warned %v:\n%s", insecure, warned, out)
		}
	}
}
