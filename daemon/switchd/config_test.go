package switchd

import (
	"bytes"
	"crypto/rand"
	"errors"
	"log/slog"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/secure"
)

// TestStartErrors checks that bad configurations fail Start with a
// *FieldError naming the field.
func TestStartErrors(t *testing.T) {
	busy, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyTCP, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busyTCP.Close()

	for _, tc := range []struct {
		name   string
		cfg    Config
		field  string
		config bool // wraps ErrConfig
	}{
		{"listen without port", Config{Listen: "127.0.0.1"}, "Listen", true},
		{"listen in use", Config{Listen: busy.LocalAddr().String()}, "Listen", false},
		{"metrics without port", Config{MetricsAddr: "localhost"}, "MetricsAddr", true},
		{"metrics in use", Config{MetricsAddr: busyTCP.Addr().String()}, "MetricsAddr", false},
		{"negative heartbeat timeout", Config{HeartbeatTimeout: -time.Second}, "HeartbeatTimeout", true},
		{"tiny heartbeat timeout", Config{HeartbeatTimeout: time.Millisecond}, "HeartbeatTimeout", true},
		{"negative pool slots", Config{PoolSlots: -1}, "PoolSlots", true},
		{"huge pool", Config{PoolSlots: MaxPoolSlots + 1}, "PoolSlots", true},
		{"small MTU", Config{MTU: 100}, "MTU", true},
		{"huge MTU", Config{MTU: 70000}, "MTU", true},
		{"negative busy poll", Config{BusyPoll: -1}, "BusyPoll", true},
		{"long busy poll", Config{BusyPoll: time.Second}, "BusyPoll", true},
		{"negative readers", Config{Readers: -1}, "Readers", true},
		{"too many readers", Config{Readers: MaxReaders + 1}, "Readers", true},
		{"parent without port", Config{Parent: "127.0.0.1"}, "Parent", true},
		{"parent unspecified", Config{Parent: "0.0.0.0:7471"}, "Parent", true},
		{"child twice", Config{Children: []string{"127.0.0.1:7472", "127.0.0.1:7472"}}, "Children", true},
		{"child is the parent", Config{Parent: "127.0.0.1:7472", Children: []string{"127.0.0.1:7472"}}, "Children", true},
		{"etcd prefix without etcd", Config{EtcdPrefix: "/x/"}, "EtcdPrefix", true},
		{"empty etcd endpoint", Config{Etcd: []string{"127.0.0.1:2379", ""}}, "Etcd", true},
		{"negative drop", Config{Fault: fabric.FaultConfig{Drop: -0.1}}, "Fault.Drop", true},
		{"dup above one", Config{Fault: fabric.FaultConfig{Dup: 1.5}}, "Fault.Dup", true},
		{"NaN reorder", Config{Fault: fabric.FaultConfig{Reorder: math.NaN()}}, "Fault.Reorder", true},
		{"infinite corrupt", Config{Fault: fabric.FaultConfig{Corrupt: math.Inf(1)}}, "Fault.Corrupt", true},
		{"no token", Config{Token: []byte{}}, "Token", true},
		{"token and insecure", Config{Token: testToken, Insecure: true}, "Token", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cfg.Listen == "" {
				tc.cfg.Listen = "127.0.0.1:0"
			}
			if tc.cfg.Token == nil {
				tc.cfg.Token = testToken
			}
			srv, err := Start(tc.cfg)
			if err == nil {
				srv.Close()
				t.Fatal("Start succeeded")
			}
			t.Log(err)
			fe, ok := errors.AsType[*FieldError](err)
			if !ok {
				t.Fatalf("%T is not a *FieldError", err)
			}
			if fe.Field != tc.field {
				t.Errorf("Field %q, want %q", fe.Field, tc.field)
			}
			if errors.Is(err, ErrConfig) != tc.config {
				t.Errorf("errors.Is(err, ErrConfig) = %v, want %v", !tc.config, tc.config)
			}
			if noToken := len(tc.cfg.Token) == 0 && !tc.cfg.Insecure; errors.Is(err, secure.ErrNoToken) != noToken {
				t.Errorf("errors.Is(err, secure.ErrNoToken) = %v, want %v", !noToken, noToken)
			}
		})
	}
}

// TestDefaults checks the values zero fields select.
func TestDefaults(t *testing.T) {
	c := Config{Token: testToken}
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	if c.Listen != DefaultListen || c.HeartbeatTimeout != DefaultHeartbeatTimeout ||
		c.PoolSlots != DefaultPoolSlots || c.MTU != DefaultMTU || c.Logger == nil {
		t.Errorf("defaults: %+v", c)
	}
	srv := start(t, Config{Token: testToken, MTU: MinMTU, PoolSlots: 1, HeartbeatTimeout: MinHeartbeatTimeout})
	if srv.MTU() != MinMTU {
		t.Errorf("MTU() = %d, want %d", srv.MTU(), MinMTU)
	}
	if !srv.Addr().Addr().IsLoopback() || srv.Addr().Port() == 0 {
		t.Errorf("Addr() = %v", srv.Addr())
	}
	if st := srv.Stats(); st.Switch.Pool.Slots != 1 {
		t.Errorf("pool of %d slots, want 1", st.Switch.Pool.Slots)
	}
}

// TestInsecureWarns checks that a switch started without a token (asked
// for with Insecure) says so in a warning naming its address, and that one
// started with a token warns of nothing and never logs the token.
func TestInsecureWarns(t *testing.T) {
	for _, insecure := range []bool{true, false} {
		var logs bytes.Buffer
		cfg := Config{Listen: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(&logs, nil))}
		if insecure {
			cfg.Insecure = true
		} else {
			cfg.Token = testToken
		}
		srv, err := Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		addr := srv.Addr().String()
		if err := srv.Close(); err != nil {
			t.Fatal(err)
		}
		warned := strings.Contains(logs.String(), "level=WARN msg=\"switchd: running without authentication: anyone who can send to "+addr+" can join jobs")
		if warned != insecure {
			t.Errorf("insecure %v: warned %v; logs:\n%s", insecure, warned, logs.String())
		}
		if strings.Contains(logs.String(), string(testToken)) {
			t.Errorf("the token is in the logs:\n%s", logs.String())
		}
	}
}

// TestSecurityConfig: Start refuses a credential of another role than
// switch and an MTU without room for the tag, naming the field; with a
// switch credential it logs that it seals every datagram.
func TestSecurityConfig(t *testing.T) {
	a, err := secure.NewAuthority([]byte("switchd security config test"))
	if err != nil {
		t.Fatal(err)
	}
	issue := func(role secure.Role, name string) *secure.Identity {
		id, err := a.Issue(role, name, rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	for _, c := range []struct {
		cfg   Config
		field string
	}{
		{Config{Security: issue(secure.RoleMemoryNode, "m")}, "Security"},
		{Config{Security: issue(secure.RoleSwitch, "sw"), MTU: MinMTU}, "MTU"},
	} {
		c.cfg.Listen, c.cfg.Token = "127.0.0.1:0", testToken
		srv, err := Start(c.cfg)
		if err == nil {
			srv.Close()
			t.Fatalf("%+v: Start succeeded", c.cfg)
		}
		if fe, ok := errors.AsType[*FieldError](err); !ok || fe.Field != c.field || !errors.Is(err, ErrConfig) {
			t.Errorf("Start: %v, want a *FieldError for %s", err, c.field)
		}
	}
	var logs bytes.Buffer
	srv, err := Start(Config{Listen: "127.0.0.1:0", Token: testToken, Security: issue(secure.RoleSwitch, "sw0"),
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	if !strings.Contains(logs.String(), `sealing every datagram (role switch, name \"sw0\")`) {
		t.Errorf("no sealing line in the logs:\n%s", logs.String())
	}
}
