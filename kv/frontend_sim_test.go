package kv_test

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"github.com/ndma/ndma/kv"
	"github.com/ndma/ndma/kv/frontend"
)

// pipeClient is a raw client of a front end over net.Pipe.
type pipeClient struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func (p *pipeClient) do(req, want string) {
	p.t.Helper()
	if _, err := io.WriteString(p.c, req); err != nil {
		p.t.Fatal(err)
	}
	got := make([]byte, len(want))
	if n, err := io.ReadFull(p.r, got); err != nil || string(got) != want {
		p.t.Fatalf("%q: read %q (%v), want %q", req, got[:n], err, want)
	}
}

// TestSimFrontends serves a key space on simnet through both front ends
// and checks their answers in virtual time, expiry included: what a
// memcached client stores a Redis client reads, a value set with a TTL
// is gone after it and can be added again.
func TestSimFrontends(t *testing.T) {
	kv.SimStore(t, 5, 3, kv.SmallLayout(), func(t *testing.T, client func() *kv.Client) {
		s, err := frontend.New(frontend.Config{Store: client()})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		open := func(p frontend.Protocol) *pipeClient {
			a, b := net.Pipe()
			go s.ServeConn(b, p)
			t.Cleanup(func() { a.Close() })
			return &pipeClient{t: t, c: a, r: bufio.NewReader(a)}
		}
		mc, rd := open(frontend.Memcached), open(frontend.Redis)
		mc.do("set user:1 3 10 5\r\nalice\r\n", "STORED\r\n")
		mc.do("get user:1\r\n", "VALUE user:1 3 5\r\nalice\r\nEND\r\n")
		rd.do("*2\r\n$3\r\nGET\r\n$6\r\nuser:1\r\n", "$5\r\nalice\r\n")
		rd.do("*2\r\n$3\r\nTTL\r\n$6\r\nuser:1\r\n", ":10\r\n")
		mc.do("add user:1 0 0 3\r\nbob\r\n", "NOT_STORED\r\n")
		time.Sleep(11 * time.Second)
		mc.do("get user:1\r\n", "END\r\n")
		rd.do("*2\r\n$6\r\nEXISTS\r\n$6\r\nuser:1\r\n", ":0\r\n")
		mc.do("add user:1 0 0 3\r\nbob\r\n", "STORED\r\n")
		rd.do("*5\r\n$3\r\nSET\r\n$1\r\nn\r\n$2\r\n41\r\n$2\r\nPX\r\n$4\r\n3000\r\n", "+OK\r\n")
		rd.do("*2\r\n$4\r\nINCR\r\n$1\r\nn\r\n", ":42\r\n")
		mc.do("incr n 8\r\n", "50\r\n")
		rd.do("*3\r\n$4\r\nMGET\r\n$6\r\nuser:1\r\n$1\r\nn\r\n", "*2\r\n$3\r\nbob\r\n$2\r\n50\r\n")
		time.Sleep(4 * time.Second) // INCR kept the expiry
		rd.do("*2\r\n$3\r\nGET\r\n$1\r\nn\r\n", "$-1\r\n")
		rd.do("*2\r\n$4\r\nINCR\r\n$1\r\nn\r\n", ":1\r\n")
	})
}
