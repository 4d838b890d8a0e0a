package etcdstore

import (
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// testEtcd is an etcd server inside the test process.
type testEtcd struct {
	t                  testing.TB
	dir                string
	clientURL, peerURL url.URL
	e                  *embed.Etcd
}

// startEtcd starts a one-member etcd on free loopback ports, stopped
// when the test ends. A port found free can be taken by another process
// before etcd binds it (packages' tests run in parallel): then it tries
// other ports, up to five times.
func startEtcd(t testing.TB) *testEtcd {
	t.Helper()
	dir := t.TempDir()
	for try := 1; ; try++ {
		te := &testEtcd{t: t, dir: dir, clientURL: freeURL(t), peerURL: freeURL(t)}
		err := te.tryStart()
		if err == nil {
			t.Cleanup(te.stop)
			return te
		}
		if !errors.Is(err, syscall.EADDRINUSE) || try == 5 {
			t.Fatal(err)
		}
		t.Logf("etcd on %s and %s: %v; trying other ports", te.clientURL.Host, te.peerURL.Host, err)
	}
}

// Endpoint is the server's client address.
func (te *testEtcd) Endpoint() string { return te.clientURL.Host }

// tryStart starts the server on its directory and ports.
func (te *testEtcd) tryStart() error {
	cfg := embed.NewConfig()
	cfg.Dir = te.dir
	cfg.Name = "test"
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{te.clientURL}, []url.URL{te.clientURL}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{te.peerURL}, []url.URL{te.peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(20 * time.Second):
		e.Close()
		return errors.New("etcd did not start in 20s")
	}
	te.e = e
	return nil
}

// stop stops the server (its data stays in its directory).
func (te *testEtcd) stop() {
	if te.e != nil {
		te.e.Close()
		te.e = nil
	}
}

// freeURL is an http URL on a loopback port free at the call.
func freeURL(t testing.TB) url.URL {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return url.URL{Scheme: "http", Host: l.Addr().String()}
}

// cutProxy forwards TCP connections to an address until it is cut: then
// it closes its listener and every connection (as a partition from etcd
// would look to a client), until it is mended on the same port.
type cutProxy struct {
	t      testing.TB
	addr   string // its own
	target string
	mu     sync.Mutex
	l      net.Listener
	conns  []net.Conn
}

func newCutProxy(t testing.TB, target string) *cutProxy {
	t.Helper()
	p := &cutProxy{t: t, addr: freeURL(t).Host, target: target}
	p.mend()
	t.Cleanup(p.cut)
	return p
}

// mend listens again and forwards.
func (p *cutProxy) mend() {
	p.t.Helper()
	l, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.l = l
	p.mu.Unlock()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
}

// cut closes the listener and every connection.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.l != nil {
		p.l.Close()
		p.l = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
