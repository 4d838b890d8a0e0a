package frontend

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/ndma/ndma/kv"
)

// rExpire serves EXPIRE and PEXPIRE key n: a time to live of n units
// (n <= 0 deletes the key); 1 if the key exists, else 0.
func (c *conn) rExpire(a [][]byte, unit time.Duration) {
	n, err := strconv.ParseInt(string(a[2]), 10, 64)
	if err != nil || n > int64(1<<62)/int64(unit) {
		c.errReply("ERR value is not an integer or out of range")
		return
	}
	ctx, cancel := c.ctx()
	defer cancel()
	st := c.s.cfg.Store
	if n <= 0 {
		err = st.Delete(ctx, a[1])
	} else {
		_, err = st.Touch(ctx, a[1], time.Duration(n)*unit)
	}
	switch {
	case err == nil:
		c.integer(1)
	case errors.Is(err, kv.ErrNotFound):
		c.integer(0)
	default:
		c.storeErr(err)
	}
}

// rTTL serves TTL and PTTL: the time to live left in units, -1 for a key
// without expiry, -2 for an absent key.
func (c *conn) rTTL(key []byte, unit time.Duration) {
	ctx, cancel := c.ctx()
	defer cancel()
	it, err := c.s.cfg.Store.GetItem(ctx, key)
	switch {
	case errors.Is(err, kv.ErrNotFound):
		c.integer(-2)
	case err != nil:
		c.storeErr(err)
	case it.Expires.IsZero():
		c.integer(-1)
	default:
		c.integer(int64((max(time.Until(it.Expires), 0) + unit/2) / unit))
	}
}

// rPersist serves PERSIST key: 1 if the key had an expiry, now gone.
func (c *conn) rPersist(a [][]byte) {
	ctx, cancel := c.ctx()
	defer cancel()
	it, err := c.s.cfg.Store.GetItem(ctx, a[1])
	if err == nil && !it.Expires.IsZero() {
		_, err = c.s.cfg.Store.Touch(ctx, a[1], 0)
		if err == nil {
			c.integer(1)
			return
		}
	}
	if err != nil && !errors.Is(err, kv.ErrNotFound) {
		c.storeErr(err)
		return
	}
	c.integer(0)
}

func (c *conn) rPing(a [][]byte) {
	switch len(a) {
	case 1:
		c.simple("PONG")
	case 2:
		c.bulk(a[1])
	default:
		c.errReply("ERR wrong number of arguments for 'ping' command")
	}
}

func (c *conn) rInfo(_ [][]byte) {
	st := c.s.Stats()
	var b strings.Builder
	fmt.Fprintf(&b, "# Server\r\nredis_version:%s\r\nredis_mode:standalone\r\nserver:ndma-kv\r\nprocess_id:%d\r\nuptime_in_seconds:%d\r\n",
		redisVersion, os.Getpid(), int64(time.Since(c.s.start).Seconds()))
	fmt.Fprintf(&b, "# Clients\r\nconnected_clients:%d\r\n", st.Conns)
	fmt.Fprintf(&b, "# Stats\r\ntotal_connections_received:%d\r\nrejected_connections:%d\r\ntotal_commands_processed:%d\r\nkeyspace_hits:%d\r\nkeyspace_misses:%d\r\ntotal_error_replies:%d\r\n",
		st.Accepted, st.Refused, st.Commands, st.Hits, st.Misses, st.Errors)
	b.WriteString("# Keyspace\r\n")
	c.bulk([]byte(b.String()))
}

// rHello serves HELLO [protover [AUTH user pass] [SETNAME name]].
func (c *conn) rHello(a [][]byte) {
	resp3 := c.resp3
	if len(a) > 1 {
		switch string(a[1]) {
		case "2":
			resp3 = false
		case "3":
			resp3 = true
		default:
			c.errReply("NOPROTO unsupported protocol version")
			return
		}
	}
	for i := 2; i < len(a); i++ {
		switch strings.ToUpper(string(a[i])) {
		case "SETNAME":
			i++
		case "AUTH":
			c.errReply("ERR AUTH is not supported: the front end has no users")
			return
		default:
			c.errReply("ERR syntax error in HELLO option '" + printable(a[i], 64) + "'")
			return
		}
		if i >= len(a) {
			c.errReply("ERR syntax error")
			return
		}
	}
	c.resp3 = resp3
	proto := int64(2)
	if resp3 {
		proto = 3
	}
	c.mapHeader(7)
	for _, kv := range [][2]string{{"server", "redis"}, {"version", redisVersion}} {
		c.bulk([]byte(kv[0]))
		c.bulk([]byte(kv[1]))
	}
	c.bulk([]byte("proto"))
	c.integer(proto)
	c.bulk([]byte("id"))
	c.integer(int64(c.id))
	for _, kv := range [][2]string{{"mode", "standalone"}, {"role", "master"}} {
		c.bulk([]byte(kv[0]))
		c.bulk([]byte(kv[1]))
	}
	c.bulk([]byte("modules"))
	c.array(0)
}

// rCommand serves COMMAND, COMMAND COUNT and COMMAND DOCS / INFO with
// empty answers: clients then use their own command tables.
func (c *conn) rCommand(a [][]byte) {
	if len(a) > 1 && strings.EqualFold(string(a[1]), "count") {
		c.integer(int64(len(redisCmds)))
		return
	}
	if len(a) > 1 && strings.EqualFold(string(a[1]), "docs") {
		c.mapHeader(0)
		return
	}
	c.array(0)
}

// configValues are what CONFIG GET answers.
var configValues = [][2]string{{"save", ""}, {"appendonly", "no"}, {"databases", "1"}, {"maxmemory", "0"}}

func (c *conn) rConfig(a [][]byte) {
	switch strings.ToLower(string(a[1])) {
	case "get":
		var hits [][2]string
		for _, pat := range a[2:] {
			for _, v := range configValues {
				if ok, _ := path.Match(strings.ToLower(string(pat)), v[0]); ok {
					hits = append(hits, v)
				}
			}
		}
		c.mapHeader(len(hits))
		for _, v := range hits {
			c.bulk([]byte(v[0]))
			c.bulk([]byte(v[1]))
		}
	case "resetstat":
		c.simple("OK")
	default:
		c.errReply("ERR CONFIG " + printable(a[1], 32) + " is not supported")
	}
}

func (c *conn) rClient(a [][]byte) {
	switch strings.ToLower(string(a[1])) {
	case "setname", "setinfo":
		c.simple("OK")
	case "getname":
		c.null()
	case "id":
		c.integer(int64(c.id))
	default:
		c.errReply("ERR unknown subcommand '" + printable(a[1], 32) + "'")
	}
}

func (c *conn) rSelect(a [][]byte) {
	if string(a[1]) != "0" {
		c.errReply("ERR DB index is out of range")
		return
	}
	c.simple("OK")
}
