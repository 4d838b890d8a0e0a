package frontend

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ndma/ndma/kv"
)

// serveRedis serves RESP2, and RESP3 once the client says HELLO 3.
func (c *conn) serveRedis() {
	for {
		r, err := c.readRequest()
		if pe, ok := errors.AsType[*protoError](err); ok {
			c.errReply("ERR " + pe.Error())
			_ = c.w.Flush()
			return
		}
		if err != nil {
			_ = c.w.Flush()
			return
		}
		if len(r.args) == 0 && !r.tooLarge {
			continue
		}
		c.s.n.commands.Add(1)
		quit := false
		if r.tooLarge {
			c.errReply(fmt.Sprintf("ERR string exceeds maximum allowed size (this front end takes requests of up to %d bytes, the key space values of up to %d)", c.s.cfg.MaxRequest, c.s.cfg.Store.MaxValue(1)))
		} else {
			quit = c.redisCommand(r.args)
		}
		if quit {
			_ = c.w.Flush()
			return
		}
		if err := c.flush(); err != nil {
			return
		}
	}
}

// redisCmd is a command: its arity as Redis gives it (negative: at
// least that many, the name included) and its function.
type redisCmd struct {
	arity int
	fn    func(c *conn, args [][]byte)
}

var redisCmds map[string]redisCmd

func init() {
	redisCmds = map[string]redisCmd{
		"get":     {2, (*conn).rGet},
		"set":     {-3, (*conn).rSet},
		"del":     {-2, (*conn).rDel},
		"unlink":  {-2, (*conn).rDel},
		"exists":  {-2, (*conn).rExists},
		"incr":    {2, func(c *conn, a [][]byte) { c.rIncr(a[1], 1) }},
		"decr":    {2, func(c *conn, a [][]byte) { c.rIncr(a[1], -1) }},
		"incrby":  {3, func(c *conn, a [][]byte) { c.rIncrBy(a, 1) }},
		"decrby":  {3, func(c *conn, a [][]byte) { c.rIncrBy(a, -1) }},
		"mget":    {-2, (*conn).rMget},
		"mset":    {-3, (*conn).rMset},
		"expire":  {3, func(c *conn, a [][]byte) { c.rExpire(a, time.Second) }},
		"pexpire": {3, func(c *conn, a [][]byte) { c.rExpire(a, time.Millisecond) }},
		"ttl":     {2, func(c *conn, a [][]byte) { c.rTTL(a[1], time.Second) }},
		"pttl":    {2, func(c *conn, a [][]byte) { c.rTTL(a[1], time.Millisecond) }},
		"persist": {2, (*conn).rPersist},
		"ping":    {-1, (*conn).rPing},
		"echo":    {2, func(c *conn, a [][]byte) { c.bulk(a[1]) }},
		"info":    {-1, (*conn).rInfo},
		"hello":   {-1, (*conn).rHello},
		"command": {-1, (*conn).rCommand},
		"config":  {-2, (*conn).rConfig},
		"client":  {-2, (*conn).rClient},
		"select":  {2, (*conn).rSelect},
		"flushall": {-1, func(c *conn, _ [][]byte) {
			c.errReply("ERR FLUSHALL is not supported: the key space has no global erase")
		}},
		"flushdb": {-1, func(c *conn, _ [][]byte) {
			c.errReply("ERR FLUSHDB is not supported: the key space has no global erase")
		}},
	}
}

// redisCommand answers one request; it reports whether the client
// quits.
func (c *conn) redisCommand(args [][]byte) bool {
	name := strings.ToLower(string(args[0]))
	if name == "quit" {
		c.simple("OK")
		return true
	}
	cmd, ok := redisCmds[name]
	if !ok {
		var b strings.Builder
		for _, a := range args[1:min(len(args), 4)] {
			fmt.Fprintf(&b, "'%s' ", printable(a, 64))
		}
		c.errReply(fmt.Sprintf("ERR unknown command '%s', with args beginning with: %s", printable(args[0], 64), b.String()))
		return false
	}
	if cmd.arity > 0 && len(args) != cmd.arity || cmd.arity < 0 && len(args) < -cmd.arity {
		c.errReply(fmt.Sprintf("ERR wrong number of arguments for '%s' command", name))
		return false
	}
	for _, k := range keysOf(name, args) {
		if len(k) == 0 || len(k) > kv.MaxKey {
			c.errReply(fmt.Sprintf("ERR keys are 1 to %d bytes in this store", kv.MaxKey))
			return false
		}
	}
	cmd.fn(c, args)
	return false
}

// keysOf is the keys a command names.
func keysOf(name string, args [][]byte) [][]byte {
	switch name {
	case "del", "unlink", "exists", "mget":
		return args[1:]
	case "mset":
		var ks [][]byte
		for i := 1; i < len(args); i += 2 {
			ks = append(ks, args[i])
		}
		return ks
	case "get", "set", "incr", "decr", "incrby", "decrby", "expire", "pexpire", "ttl", "pttl", "persist":
		return args[1:2]
	}
	return nil
}

// storeErr answers a store error.
func (c *conn) storeErr(err error) {
	switch {
	case errors.Is(err, kv.ErrNotInteger):
		c.errReply("ERR value is not an integer or out of range")
	case errors.Is(err, kv.ErrTooLarge):
		c.errReply("ERR string exceeds maximum allowed size")
	case errors.Is(err, kv.ErrFull):
		c.errReply("OOM command not allowed when used memory > 'maxmemory'")
	default:
		c.errReply("ERR " + errText(err))
	}
}

func (c *conn) rGet(a [][]byte) { c.getReply(a[1]) }

// getReply reads key k and writes its value (a bulk string), null when
// it is absent, or the store's error.
func (c *conn) getReply(k []byte) {
	ctx, cancel := c.ctx()
	defer cancel()
	it, err := c.s.cfg.Store.GetItem(ctx, k)
	c.itemReply(it, err)
}

// itemReply answers with a GET's result.
func (c *conn) itemReply(it kv.Item, err error) {
	switch {
	case err == nil:
		c.s.n.hits.Add(1)
		c.bulk(it.Value)
	case errors.Is(err, kv.ErrNotFound):
		c.s.n.misses.Add(1)
		c.null()
	default:
		c.storeErr(err)
	}
}

// rSet serves SET key value [NX|XX] [EX s|PX ms|EXAT t|PXAT t].
func (c *conn) rSet(a [][]byte) {
	var nx, xx bool
	var ttl time.Duration
	for i := 3; i < len(a); i++ {
		opt := strings.ToUpper(string(a[i]))
		switch opt {
		case "NX":
			nx = true
		case "XX":
			xx = true
		case "EX", "PX", "EXAT", "PXAT":
			if i+1 == len(a) || ttl != 0 {
				c.errReply("ERR syntax error")
				return
			}
			i++
			n, err := strconv.ParseInt(string(a[i]), 10, 64)
			if err != nil || n <= 0 || n > 1<<40 {
				c.errReply("ERR invalid expire time in 'set' command")
				return
			}
			switch opt {
			case "EX":
				ttl = time.Duration(n) * time.Second
			case "PX":
				ttl = time.Duration(n) * time.Millisecond
			case "EXAT":
				ttl = max(time.Until(time.Unix(n, 0)), 1)
			case "PXAT":
				ttl = max(time.Until(time.UnixMilli(n)), 1)
			}
		default:
			c.errReply("ERR syntax error") // KEEPTTL and GET included: not supported
			return
		}
	}
	if nx && xx {
		c.errReply("ERR syntax error")
		return
	}
	ctx, cancel := c.ctx()
	defer cancel()
	st, o := c.s.cfg.Store, kv.SetOptions{TTL: ttl}
	var err error
	switch {
	case nx:
		_, err = st.AddWith(ctx, a[1], a[2], o)
	case xx:
		_, err = st.Replace(ctx, a[1], a[2], o)
	default:
		_, err = st.SetWith(ctx, a[1], a[2], o)
	}
	switch {
	case err == nil:
		c.simple("OK")
	case nx && errors.Is(err, kv.ErrExists), xx && errors.Is(err, kv.ErrNotFound):
		c.null()
	default:
		c.storeErr(err)
	}
}

func (c *conn) rDel(a [][]byte) {
	ctx, cancel := c.ctx()
	defer cancel()
	var n int64
	for _, k := range a[1:] {
		switch err := c.s.cfg.Store.Delete(ctx, k); {
		case err == nil:
			n++
		case !errors.Is(err, kv.ErrNotFound):
			c.storeErr(err)
			return
		}
	}
	c.integer(n)
}

func (c *conn) rExists(a [][]byte) {
	ctx, cancel := c.ctx()
	defer cancel()
	var n int64
	for _, k := range a[1:] {
		switch _, err := c.s.cfg.Store.GetItem(ctx, k); {
		case err == nil:
			n++
		case !errors.Is(err, kv.ErrNotFound):
			c.storeErr(err)
			return
		}
	}
	c.integer(n)
}

func (c *conn) rIncr(key []byte, delta int64) {
	ctx, cancel := c.ctx()
	defer cancel()
	n, err := incrBy(ctx, c.s.cfg.Store, key, delta)
	if err != nil {
		c.storeErr(err)
		return
	}
	c.integer(n)
}

func (c *conn) rIncrBy(a [][]byte, sign int64) {
	d, err := strconv.ParseInt(string(a[2]), 10, 64)
	if err != nil || sign < 0 && d == -1<<63 {
		c.errReply("ERR value is not an integer or out of range")
		return
	}
	c.rIncr(a[1], sign*d)
}

func (c *conn) rMget(a [][]byte) {
	ctx, cancel := c.ctx()
	items, errs := c.s.cfg.Store.GetMulti(ctx, a[1:])
	cancel()
	c.array(len(a) - 1)
	for i := range items {
		c.itemReply(items[i], errs[i])
	}
}

// rMset sets the keys, their writes in flight at once (not atomically:
// each key is set or fails on its own). A key given twice keeps its last
// value, as Redis does.
func (c *conn) rMset(a [][]byte) {
	if len(a)%2 != 1 {
		c.errReply("ERR wrong number of arguments for 'mset' command")
		return
	}
	last := make(map[string]int, len(a)/2)
	for i := 1; i < len(a); i += 2 {
		last[string(a[i])] = i
	}
	keys := make([][]byte, 0, len(last))
	vals := make([][]byte, 0, len(last))
	for i := 1; i < len(a); i += 2 {
		if last[string(a[i])] == i {
			keys, vals = append(keys, a[i]), append(vals, a[i+1])
		}
	}
	ctx, cancel := c.ctx()
	_, errs, err := c.s.cfg.Store.SetMulti(ctx, keys, vals, kv.SetOptions{})
	cancel()
	for _, e := range errs {
		if err == nil {
			err = e // the first key's failure is the one answered
		}
	}
	if err != nil {
		c.storeErr(err)
		return
	}
	c.simple("OK")
}
