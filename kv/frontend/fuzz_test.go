package frontend

import (
	"io"
	"net"
	"testing"
	"time"
)

// fuzzConn feeds in to a connection of protocol p and drains the
// replies: serving must end (when the input does) without a panic.
func fuzzConn(t *testing.T, p Protocol, in []byte) {
	s, err := New(Config{Store: newMemStore(256), MaxLine: 512, MaxRequest: 2048, MaxArgs: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	client, server := net.Pipe()
	done := make(chan struct{})
	go func() {
		s.ServeConn(server, p)
		close(done)
	}()
	go func() { _, _ = io.Copy(io.Discard, client) }()
	_, _ = client.Write(in)
	client.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%v: serving %q did not end with its input", p, in)
	}
}

// FuzzMemcached feeds arbitrary bytes to the memcached front end.
func FuzzMemcached(f *testing.F) {
	for _, s := range []string{
		"set a 1 0 3\r\nabc\r\nget a b\r\ngets a\r\n",
		"cas a 0 0 1 5\r\nx\r\nincr a 1\r\ndecr a 9\r\ntouch a 10\r\n",
		"append a 0 0 2 noreply\r\nzz\r\ndelete a\r\nstats\r\nversion\r\nquit\r\n",
		"set a 0 0 99999999\r\n", "get " + string(make([]byte, 600)) + "\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) { fuzzConn(t, Memcached, in) })
}

// FuzzRedis feeds arbitrary bytes to the Redis front end.
func FuzzRedis(f *testing.F) {
	for _, s := range []string{
		resp("SET", "a", "1", "EX", "10") + resp("GET", "a") + resp("MGET", "a", "b"),
		resp("HELLO", "3") + resp("INCRBY", "n", "5") + resp("TTL", "a") + resp("CONFIG", "GET", "*"),
		"*2\r\n$3\r\nGET\r\n$99999\r\n", "*-1\r\n*100\r\n", "PING\r\nset a b\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) { fuzzConn(t, Redis, in) })
}
