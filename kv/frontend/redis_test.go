package frontend

import (
	"fmt"
	"strings"
	"testing"
)

// resp encodes a request as an array of bulk strings.
func resp(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

// TestRedisCommands runs every command the Redis front end serves, in
// RESP2, and checks each answer.
func TestRedisCommands(t *testing.T) {
	addr, _ := serve(t, Redis, Config{})
	c := dial(t, addr)
	c.do(resp("PING"), "+PONG\r\n")
	c.do(resp("ping", "hi"), "$2\r\nhi\r\n")
	c.do(resp("ECHO", "x y"), "$3\r\nx y\r\n")
	c.do(resp("GET", "a"), "$-1\r\n")
	c.do(resp("SET", "a", "1"), "+OK\r\n")
	c.do(resp("GET", "a"), "$1\r\n1\r\n")
	c.do(resp("SET", "a", "2", "NX"), "$-1\r\n")
	c.do(resp("SET", "b", "2", "XX"), "$-1\r\n")
	c.do(resp("SET", "b", "2", "NX", "EX", "100"), "+OK\r\n")
	c.do(resp("TTL", "b"), ":100\r\n")
	c.do(resp("SET", "a", "3", "XX", "PX", "5000"), "+OK\r\n")
	c.do(resp("PTTL", "a"), ":5000\r\n")
	c.do(resp("TTL", "nope"), ":-2\r\n")
	c.do(resp("PERSIST", "a"), ":1\r\n")
	c.do(resp("TTL", "a"), ":-1\r\n")
	c.do(resp("PERSIST", "a"), ":0\r\n")
	c.do(resp("EXPIRE", "a", "50"), ":1\r\n")
	c.do(resp("TTL", "a"), ":50\r\n")
	c.do(resp("EXPIRE", "nope", "50"), ":0\r\n")
	c.do(resp("PEXPIRE", "a", "0"), ":1\r\n")
	c.do(resp("EXISTS", "a", "b", "b", "nope"), ":2\r\n")
	c.do(resp("SET", "a", "x", "EX", "0"), "-ERR invalid expire time in 'set' command\r\n")
	c.do(resp("SET", "a", "x", "KEEPTTL"), "-ERR syntax error\r\n")
	c.do(resp("SET", "a", "x", "NX", "XX"), "-ERR syntax error\r\n")
	c.do(resp("INCR", "n"), ":1\r\n")
	c.do(resp("INCRBY", "n", "41"), ":42\r\n")
	c.do(resp("DECR", "n"), ":41\r\n")
	c.do(resp("DECRBY", "n", "50"), ":-9\r\n")
	c.do(resp("INCRBY", "n", "x"), "-ERR value is not an integer or out of range\r\n")
	c.do(resp("SET", "w", "word"), "+OK\r\n")
	c.do(resp("INCR", "w"), "-ERR value is not an integer or out of range\r\n")
	c.do(resp("MSET", "k1", "v1", "k2", "v2"), "+OK\r\n")
	c.do(resp("MSET", "k1", "v1", "k2"), "-ERR wrong number of arguments for 'mset' command\r\n")
	c.do(resp("MGET", "k1", "nope", "k2"), "*3\r\n$2\r\nv1\r\n$-1\r\n$2\r\nv2\r\n")
	c.do(resp("DEL", "k1", "k2", "nope"), ":2\r\n")
	c.do(resp("UNLINK", "n"), ":1\r\n")
	c.do(resp("SELECT", "0"), "+OK\r\n")
	c.do(resp("SELECT", "1"), "-ERR DB index is out of range\r\n")
	c.do(resp("CONFIG", "GET", "save"), "*2\r\n$4\r\nsave\r\n$0\r\n\r\n")
	c.do(resp("CONFIG", "GET", "nothing*"), "*0\r\n")
	c.do(resp("CONFIG", "SET", "x", "y"), "-ERR CONFIG SET is not supported\r\n")
	c.do(resp("COMMAND"), "*0\r\n")
	c.do(resp("COMMAND", "DOCS"), "*0\r\n")
	c.do(resp("CLIENT", "SETNAME", "me"), "+OK\r\n")
	c.do(resp("FLUSHALL"), "-ERR FLUSHALL is not supported: the key space has no global erase\r\n")
	c.do(resp("LPUSH", "l", "x"), "-ERR unknown command 'LPUSH', with args beginning with: 'l' 'x' \r\n")
	c.do(resp("GET"), "-ERR wrong number of arguments for 'get' command\r\n")
	c.do(resp("GET", strings.Repeat("k", 251)), "-ERR keys are 1 to 250 bytes in this store\r\n")
	c.send(resp("INFO"))
	if l := c.line(); !strings.HasPrefix(l, "$") {
		t.Fatalf("info: %q", l)
	}
	if l := c.line(); l != "# Server" {
		t.Fatalf("info: %q", l)
	}
	for l := c.line(); l != "# Keyspace"; l = c.line() {
	}
	c.expect("\r\n")
	c.do(resp("HELLO", "2"), "*14\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$5\r\n"+redisVersion+"\r\n$5\r\nproto\r\n:2\r\n$2\r\nid\r\n:1\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n")
	// Inline commands, as typed into telnet.
	c.do("set inline value\r\nget inline\r\n", "+OK\r\n$5\r\nvalue\r\n")
	c.do(resp("QUIT"), "+OK\r\n")
	c.closed()
}

// TestRedisRESP3 switches to RESP3 with HELLO 3: nulls and maps take
// their RESP3 forms.
func TestRedisRESP3(t *testing.T) {
	addr, _ := serve(t, Redis, Config{})
	c := dial(t, addr)
	c.send(resp("HELLO", "3", "SETNAME", "x"))
	c.expect("%7\r\n")
	var proto string
	for l := c.line(); l != "*0"; l = c.line() {
		if l == "proto" {
			proto = c.line()
		}
	}
	if proto != ":3" {
		t.Fatalf("HELLO 3 answered proto %q", proto)
	}
	c.do(resp("GET", "a"), "_\r\n")
	c.do(resp("CONFIG", "GET", "appendonly"), "%1\r\n$10\r\nappendonly\r\n$2\r\nno\r\n")
	c.do(resp("HELLO", "4"), "-NOPROTO unsupported protocol version\r\n")
	c.do(resp("HELLO", "3", "AUTH", "u", "p"), "-ERR AUTH is not supported: the front end has no users\r\n")
}

// TestRedisHostile sends malformed and hostile requests: refusals keep
// the connection; framing that cannot be followed is answered and ends
// that connection only.
func TestRedisHostile(t *testing.T) {
	addr, s := serve(t, Redis, Config{MaxLine: 1024, MaxRequest: 4096, MaxArgs: 8})
	c := dial(t, addr)
	// A value over MaxRequest is read, dropped and refused.
	c.do(resp("SET", "big", strings.Repeat("v", 5000))+resp("GET", "big"),
		"-ERR string exceeds maximum allowed size (this front end takes requests of up to 4096 bytes, the key space values of up to 1023)\r\n$-1\r\n")
	// One within MaxRequest but over the key space's largest value.
	c.do(resp("SET", "big", strings.Repeat("v", 2000)), "-ERR string exceeds maximum allowed size\r\n")
	c.do("*0\r\n\r\n"+resp("PING"), "+PONG\r\n")
	c.do("\x00\xff\x01\r\n", "-ERR unknown command '???', with args beginning with: \r\n")
	// A pipeline of many requests in one write: every answer, in order.
	var req, want strings.Builder
	for i := range 200 {
		req.WriteString(resp("SET", fmt.Sprint("p", i), fmt.Sprint(i)))
		req.WriteString(resp("GET", fmt.Sprint("p", i)))
		fmt.Fprintf(&want, "+OK\r\n$%d\r\n%d\r\n", len(fmt.Sprint(i)), i)
	}
	c.do(req.String(), want.String())
	for _, bad := range []struct{ req, want string }{
		{"*x\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"*9\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"*1\r\n+PING\r\n", "-ERR Protocol error: expected '$', got '+'\r\n"},
		{"*1\r\n$-5\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"*1\r\n$4\r\nPINGxx\r\n", "-ERR Protocol error: expected CRLF after a bulk string\r\n"},
		{strings.Repeat("x", 2000), "-ERR Protocol error: too big inline request\r\n"},
	} {
		d := dial(t, addr)
		d.do(bad.req, bad.want)
		d.closed()
	}
	d := dial(t, addr)
	d.do(resp("GET", "p7"), "$1\r\n7\r\n")
	if st := s.Stats(); st.Errors < 8 {
		t.Fatalf("stats %+v", st)
	}
}
