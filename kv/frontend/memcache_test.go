package frontend

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestMemcachedCommands runs every command the memcached front end
// serves and checks each answer.
func TestMemcachedCommands(t *testing.T) {
	addr, _ := serve(t, Memcached, Config{})
	c := dial(t, addr)
	c.do("get a\r\n", "END\r\n")
	c.do("set a 5 0 3\r\none\r\n", "STORED\r\n")
	c.do("get a\r\n", "VALUE a 5 3\r\none\r\nEND\r\n")
	c.do("add a 0 0 1\r\nx\r\n", "NOT_STORED\r\n")
	c.do("add b 0 0 1\r\nx\r\n", "STORED\r\n")
	c.do("get a b missing\r\n", "VALUE a 5 3\r\none\r\nVALUE b 0 1\r\nx\r\nEND\r\n")
	c.do("replace nope 0 0 1\r\nx\r\n", "NOT_STORED\r\n")
	c.do("replace b 9 0 2\r\nyy\r\n", "STORED\r\n")
	c.do("append b 0 0 2\r\n!!\r\n", "STORED\r\n")
	c.do("prepend b 0 0 1\r\n<\r\n", "STORED\r\n")
	c.do("append nope 0 0 1\r\nx\r\n", "NOT_STORED\r\n")
	c.do("get b\r\n", "VALUE b 9 5\r\n<yy!!\r\nEND\r\n")
	c.send("gets a\r\n")
	var ver uint64
	if _, err := fmt.Sscanf(c.line(), "VALUE a 5 3 %d", &ver); err != nil {
		t.Fatal(err)
	}
	c.expect("one\r\nEND\r\n")
	c.do(fmt.Sprintf("cas a 0 0 3 %d\r\ntwo\r\n", ver+1000), "EXISTS\r\n")
	c.do(fmt.Sprintf("cas a 0 0 3 %d\r\ntwo\r\n", ver), "STORED\r\n")
	c.do("cas nope 0 0 1 1\r\nx\r\n", "NOT_FOUND\r\n")
	c.do("get a\r\n", "VALUE a 0 3\r\ntwo\r\nEND\r\n")
	c.do("set n 0 0 2\r\n10\r\n", "STORED\r\n")
	c.do("incr n 5\r\n", "15\r\n")
	c.do("decr n 3\r\n", "12\r\n")
	c.do("decr n 100\r\n", "0\r\n")
	c.do("incr a 1\r\n", "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n")
	c.do("incr nope 1\r\n", "NOT_FOUND\r\n")
	c.do("incr n x\r\n", "CLIENT_ERROR invalid numeric delta argument\r\n")
	c.do("delete a\r\n", "DELETED\r\n")
	c.do("delete a\r\n", "NOT_FOUND\r\n")
	c.do("delete a 0\r\n", "NOT_FOUND\r\n")
	// noreply: nothing comes back, the next answer is the get's.
	c.do("set q 0 0 1 noreply\r\nq\r\ndelete b noreply\r\nget q b\r\n", "VALUE q 0 1\r\nq\r\nEND\r\n")
	c.do("touch q 100\r\n", "TOUCHED\r\n")
	c.do("touch nope 100\r\n", "NOT_FOUND\r\n")
	// A negative expiry expires at once; one in the past too.
	c.do("set gone 0 -1 1\r\nx\r\n", "STORED\r\n")
	c.do(fmt.Sprintf("set old 0 %d 1\r\nx\r\n", time.Now().Add(-time.Hour).Unix()), "STORED\r\n")
	c.do("get gone old\r\n", "END\r\n")
	c.do("version\r\n", "VERSION "+memcachedVersion+"\r\n")
	c.do("verbosity 1\r\n", "OK\r\n")
	c.do("flush_all\r\n", "SERVER_ERROR flush_all is not supported: the key space has no global erase\r\n")
	c.do("mg a v\r\n", "ERROR\r\n")
	c.send("stats\r\n")
	stats := map[string]string{}
	for l := c.line(); l != "END"; l = c.line() {
		f := strings.Fields(l)
		if len(f) != 3 || f[0] != "STAT" {
			t.Fatalf("stats line %q", l)
		}
		stats[f[1]] = f[2]
	}
	if stats["curr_connections"] != "1" || stats["get_hits"] == "0" || stats["version"] != memcachedVersion {
		t.Fatalf("stats: %v", stats)
	}
	c.send("quit\r\n")
	c.closed()
}

// TestMemcachedHostile sends malformed and hostile input: each is
// answered with the protocol's error and the connection goes on, but
// for a line too long, which ends that connection only.
func TestMemcachedHostile(t *testing.T) {
	addr, s := serve(t, Memcached, Config{MaxLine: 1024})
	c := dial(t, addr)
	c.do("\r\n", "ERROR\r\n")
	c.do("get\r\n", "ERROR\r\n")
	c.do("set a 0 0\r\n", "ERROR\r\n")
	c.do("set a x 0 1\r\nx\r\n", "CLIENT_ERROR bad command line format\r\n")
	c.do("set a 0 0 -1\r\n", "CLIENT_ERROR bad command line format\r\n")
	c.do("set a 0 0 1 extra words\r\n", "ERROR\r\n")
	// An oversize value is read, dropped and refused.
	c.do(fmt.Sprintf("set big 0 0 5000\r\n%s\r\nget big\r\n", strings.Repeat("v", 5000)), "SERVER_ERROR object too large for cache\r\nEND\r\n")
	// Data not followed by \r\n.
	c.do("set a 0 0 1\r\nxyz\r\n", "CLIENT_ERROR bad data chunk\r\nERROR\r\n")
	long := strings.Repeat("k", 251)
	c.do("get "+long+"\r\n", "CLIENT_ERROR bad command line format\r\n")
	c.do("set "+long+" 0 0 1\r\nx\r\n", "CLIENT_ERROR bad command line format\r\n")
	c.do("\x00\x01\xff garbage\r\n", "ERROR\r\n")
	c.do("delete\r\n", "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n")
	c.do("incr\r\n", "ERROR\r\n")
	c.do("touch a x\r\n", "CLIENT_ERROR invalid exptime argument\r\n")
	c.do("stats slabs\r\n", "ERROR\r\n")
	// A line over MaxLine ends this connection, not the front end.
	c.send(strings.Repeat("x", 2000) + "\r\n")
	c.expect("CLIENT_ERROR line too long\r\n")
	c.closed()
	d := dial(t, addr)
	d.do("set a 0 0 1\r\nx\r\nget a\r\n", "STORED\r\nVALUE a 0 1\r\nx\r\nEND\r\n")
	if st := s.Stats(); st.Errors < 15 || st.Accepted != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// TestMaxConns refuses the connection over the bound with each
// protocol's error.
func TestMaxConns(t *testing.T) {
	for _, p := range []Protocol{Memcached, Redis} {
		addr, s := serve(t, p, Config{MaxConns: 1})
		c := dial(t, addr)
		if p == Memcached {
			c.do("version\r\n", "VERSION "+memcachedVersion+"\r\n")
		} else {
			c.do("PING\r\n", "+PONG\r\n")
		}
		d := dial(t, addr)
		want := map[Protocol]string{Memcached: "SERVER_ERROR too many open connections\r\n", Redis: "-ERR max number of clients reached\r\n"}[p]
		d.expect(want)
		d.closed()
		if st := s.Stats(); st.Refused != 1 || st.Conns != 1 {
			t.Fatalf("%v: %+v", p, st)
		}
	}
}
