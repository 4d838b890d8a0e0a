package frontend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"time"

	"github.com/ndma/ndma/kv"
)

// Version is what the front ends report as their server version: the
// memcached and Redis versions whose protocols they follow.
const (
	memcachedVersion = "1.6.0"
	redisVersion     = "7.0.0"
)

// serveMemcached serves the memcached text protocol.
func (c *conn) serveMemcached() {
	for {
		line, err := c.readLine()
		if errors.Is(err, errLineTooLong) {
			c.s.n.errors.Add(1)
			c.w.WriteString("CLIENT_ERROR line too long\r\n")
			_ = c.w.Flush()
			return
		}
		if err != nil {
			_ = c.w.Flush()
			return
		}
		f := bytes.Fields(line)
		if len(f) > 0 && string(f[0]) == "quit" {
			_ = c.w.Flush()
			return
		}
		c.s.n.commands.Add(1)
		if c.s.cfg.Logger.Enabled(context.Background(), slog.LevelDebug) {
			c.s.cfg.Logger.Debug("frontend: memcached request", "conn", c.id, "line", printable(line, 128))
		}
		if err := c.mcCommand(f); err != nil {
			return // the connection failed
		}
		if err := c.flush(); err != nil {
			return
		}
	}
}

// mcCommand answers one command line (f: its words).
func (c *conn) mcCommand(f [][]byte) error {
	if len(f) == 0 {
		return c.mcError("ERROR")
	}
	switch cmd := string(f[0]); cmd {
	case "get", "gets":
		return c.mcGet(f[1:], cmd == "gets")
	case "set", "add", "replace", "append", "prepend", "cas":
		return c.mcStore(cmd, f[1:])
	case "delete":
		return c.mcDelete(f[1:])
	case "incr", "decr":
		return c.mcIncr(cmd == "incr", f[1:])
	case "touch":
		return c.mcTouch(f[1:])
	case "stats":
		if len(f) > 1 {
			return c.mcError("ERROR") // stats groups (items, slabs, ...) are not kept
		}
		return c.mcStats()
	case "version":
		c.w.WriteString("VERSION " + memcachedVersion + "\r\n")
	case "verbosity":
		c.mcReply(noreply(f), "OK")
	case "flush_all":
		return c.mcError("SERVER_ERROR flush_all is not supported: the key space has no global erase")
	default:
		return c.mcError("ERROR")
	}
	return nil
}

func (c *conn) mcError(line string) error {
	c.s.n.errors.Add(1)
	c.s.cfg.Logger.Debug("frontend: memcached error reply", "conn", c.id, "reply", line)
	_, err := c.w.WriteString(line + "\r\n")
	return err
}

// mcReply writes line unless the command asked for no reply.
func (c *conn) mcReply(quiet bool, line string) {
	if !quiet {
		c.w.WriteString(line + "\r\n")
	}
}

// noreply reports whether a command's last word is "noreply".
func noreply(f [][]byte) bool { return len(f) > 1 && string(f[len(f)-1]) == "noreply" }

func (c *conn) mcGet(keys [][]byte, cas bool) error {
	if len(keys) == 0 {
		return c.mcError("ERROR")
	}
	for _, k := range keys {
		if len(k) > kv.MaxKey {
			return c.mcError("CLIENT_ERROR bad command line format")
		}
	}
	ctx, cancel := c.ctx()
	items, errs := c.s.cfg.Store.GetMulti(ctx, keys)
	cancel()
	for i, k := range keys {
		it, err := items[i], errs[i]
		if errors.Is(err, kv.ErrNotFound) {
			c.s.n.misses.Add(1)
			continue
		}
		if err != nil {
			return c.mcError("SERVER_ERROR " + errText(err))
		}
		c.s.n.hits.Add(1)
		fmt.Fprintf(c.w, "VALUE %s %d %d", k, it.Flags, len(it.Value))
		if cas {
			fmt.Fprintf(c.w, " %d", it.Version)
		}
		c.w.WriteString("\r\n")
		c.w.Write(it.Value)
		c.w.WriteString("\r\n")
	}
	_, err := c.w.WriteString("END\r\n")
	return err
}

// mcTTL turns a memcached expiration time into a time to live: 0 never
// expires, up to 30 days is seconds from now, beyond that a unix time;
// one in the past (or negative) is expired at once (a TTL of 1 ns).
func mcTTL(exp int64) time.Duration {
	const month = 30 * 24 * 3600
	switch {
	case exp == 0:
		return 0
	case exp < 0:
		return 1
	case exp <= month:
		return time.Duration(exp) * time.Second
	}
	if d := time.Until(time.Unix(exp, 0)); d > 0 {
		return d
	}
	return 1
}

// mcStore serves set, add, replace, append, prepend and cas:
// <key> <flags> <exptime> <bytes> [<cas unique>] [noreply], then the data.
func (c *conn) mcStore(cmd string, f [][]byte) error {
	want := 4
	if cmd == "cas" {
		want = 5
	}
	if len(f) < want || len(f) > want+1 || len(f) == want+1 && string(f[want]) != "noreply" {
		return c.mcError("ERROR")
	}
	quiet := len(f) == want+1
	n, err := strconv.ParseInt(string(f[3]), 10, 32)
	if err != nil || n < 0 {
		return c.mcError("CLIENT_ERROR bad command line format")
	}
	key := bytes.Clone(f[0])
	flags, ferr := strconv.ParseUint(string(f[1]), 10, 32)
	exp, eerr := strconv.ParseInt(string(f[2]), 10, 64)
	var ver uint64
	var verr error
	if cmd == "cas" {
		ver, verr = strconv.ParseUint(string(f[4]), 10, 64)
	}
	if ferr != nil || eerr != nil || verr != nil || len(key) > kv.MaxKey {
		if err := c.discard(n + 2); err != nil {
			return err
		}
		return c.mcError("CLIENT_ERROR bad command line format")
	}
	if int(n) > c.s.cfg.Store.MaxValue(len(key)) || int(n) > c.s.cfg.MaxRequest {
		if err := c.discard(n + 2); err != nil {
			return err
		}
		return c.mcError("SERVER_ERROR object too large for cache")
	}
	val, ok, err := c.readData(int(n))
	if err != nil {
		return err
	}
	if !ok {
		return c.mcError("CLIENT_ERROR bad data chunk")
	}
	o := kv.SetOptions{TTL: mcTTL(exp), Flags: uint32(flags)}
	ctx, cancel := c.ctx()
	defer cancel()
	st := c.s.cfg.Store
	switch cmd {
	case "set":
		_, err = st.SetWith(ctx, key, val, o)
	case "add":
		_, err = st.AddWith(ctx, key, val, o)
	case "replace":
		_, err = st.Replace(ctx, key, val, o)
	case "append":
		_, err = st.Append(ctx, key, val)
	case "prepend":
		_, err = st.Prepend(ctx, key, val)
	case "cas":
		_, err = st.CompareAndSwapWith(ctx, key, val, ver, o)
	}
	switch {
	case err == nil:
		c.mcReply(quiet, "STORED")
	case cmd == "cas" && errors.Is(err, kv.ErrNotFound):
		c.mcReply(quiet, "NOT_FOUND")
	case cmd == "cas" && errors.Is(err, kv.ErrExists):
		c.mcReply(quiet, "EXISTS")
	case errors.Is(err, kv.ErrNotFound), errors.Is(err, kv.ErrExists):
		c.mcReply(quiet, "NOT_STORED")
	default:
		c.s.n.errors.Add(1)
		c.mcReply(quiet, mcServerError(err))
	}
	return nil
}

// mcServerError is the reply for a store error.
func mcServerError(err error) string {
	switch {
	case errors.Is(err, kv.ErrTooLarge):
		return "SERVER_ERROR object too large for cache"
	case errors.Is(err, kv.ErrFull):
		return "SERVER_ERROR out of memory storing object"
	}
	return "SERVER_ERROR " + errText(err)
}

// mcDelete serves delete <key> [0] [noreply].
func (c *conn) mcDelete(f [][]byte) error {
	quiet := noreply(f)
	if quiet {
		f = f[:len(f)-1]
	}
	if len(f) == 2 && string(f[1]) == "0" {
		f = f[:1]
	}
	if len(f) != 1 || len(f[0]) > kv.MaxKey {
		return c.mcError("CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]")
	}
	ctx, cancel := c.ctx()
	defer cancel()
	switch err := c.s.cfg.Store.Delete(ctx, f[0]); {
	case err == nil:
		c.mcReply(quiet, "DELETED")
	case errors.Is(err, kv.ErrNotFound):
		c.mcReply(quiet, "NOT_FOUND")
	default:
		c.s.n.errors.Add(1)
		c.mcReply(quiet, mcServerError(err))
	}
	return nil
}

// mcIncr serves incr and decr <key> <value> [noreply]: incr adds (up to
// the largest int64), decr subtracts down to 0.
func (c *conn) mcIncr(incr bool, f [][]byte) error {
	quiet := noreply(f)
	if quiet {
		f = f[:len(f)-1]
	}
	if len(f) != 2 || len(f[0]) > kv.MaxKey {
		return c.mcError("ERROR")
	}
	d, err := strconv.ParseUint(string(f[1]), 10, 64)
	if err != nil || incr && d > math.MaxInt64 {
		return c.mcError("CLIENT_ERROR invalid numeric delta argument")
	}
	ctx, cancel := c.ctx()
	defer cancel()
	var n uint64
	if incr {
		var v int64
		v, err = c.s.cfg.Store.Incr(ctx, f[0], int64(d))
		n = uint64(v)
	} else {
		n, err = decr(ctx, c.s.cfg.Store, f[0], d)
	}
	switch {
	case err == nil:
		c.mcReply(quiet, strconv.FormatUint(n, 10))
	case errors.Is(err, kv.ErrNotFound):
		c.mcReply(quiet, "NOT_FOUND")
	case errors.Is(err, kv.ErrNotInteger):
		c.s.n.errors.Add(1)
		c.mcReply(quiet, "CLIENT_ERROR cannot increment or decrement non-numeric value")
	default:
		c.s.n.errors.Add(1)
		c.mcReply(quiet, mcServerError(err))
	}
	return nil
}

// mcTouch serves touch <key> <exptime> [noreply].
func (c *conn) mcTouch(f [][]byte) error {
	quiet := noreply(f)
	if quiet {
		f = f[:len(f)-1]
	}
	if len(f) != 2 || len(f[0]) > kv.MaxKey {
		return c.mcError("ERROR")
	}
	exp, err := strconv.ParseInt(string(f[1]), 10, 64)
	if err != nil {
		return c.mcError("CLIENT_ERROR invalid exptime argument")
	}
	ctx, cancel := c.ctx()
	defer cancel()
	switch _, err := c.s.cfg.Store.Touch(ctx, f[0], mcTTL(exp)); {
	case err == nil:
		c.mcReply(quiet, "TOUCHED")
	case errors.Is(err, kv.ErrNotFound):
		c.mcReply(quiet, "NOT_FOUND")
	default:
		c.s.n.errors.Add(1)
		c.mcReply(quiet, mcServerError(err))
	}
	return nil
}

func (c *conn) mcStats() error {
	st := c.s.Stats()
	now := time.Now()
	for _, s := range []struct {
		name string
		v    any
	}{
		{"pid", os.Getpid()},
		{"uptime", int64(now.Sub(c.s.start).Seconds())},
		{"time", now.Unix()},
		{"version", memcachedVersion},
		{"curr_connections", st.Conns},
		{"total_connections", st.Accepted},
		{"rejected_connections", st.Refused},
		{"cmd_total", st.Commands},
		{"get_hits", st.Hits},
		{"get_misses", st.Misses},
		{"errors", st.Errors},
		{"item_size_max", c.s.cfg.Store.MaxValue(1)},
	} {
		fmt.Fprintf(c.w, "STAT %s %v\r\n", s.name, s.v)
	}
	_, err := c.w.WriteString("END\r\n")
	return err
}
