package frontend

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// protoError is RESP framing the connection cannot follow: answered,
// then the connection ends (as Redis does).
type protoError struct{ msg string }

func (e *protoError) Error() string { return "Protocol error: " + e.msg }

// request is one RESP request. tooLarge is set when an argument went
// over MaxRequest (its bytes were read and dropped).
type respRequest struct {
	args     [][]byte
	tooLarge bool
}

// readRequest reads one request: an array of bulk strings, or an inline
// line of words. An empty request (a blank line, *0) has no args.
func (c *conn) readRequest() (respRequest, error) {
	line, err := c.readLine()
	if errors.Is(err, errLineTooLong) {
		return respRequest{}, &protoError{"too big inline request"}
	}
	if err != nil {
		return respRequest{}, err
	}
	if len(line) == 0 || line[0] != '*' {
		return respRequest{args: cloneAll(bytes.Fields(line))}, nil
	}
	n, err := strconv.Atoi(string(line[1:]))
	if err != nil || n > c.s.cfg.MaxArgs {
		return respRequest{}, &protoError{"invalid multibulk length"}
	}
	var r respRequest
	total := 0
	for range max(n, 0) {
		line, err := c.readLine()
		if errors.Is(err, errLineTooLong) {
			return respRequest{}, &protoError{"too big bulk count string"}
		}
		if err != nil {
			return respRequest{}, err
		}
		if len(line) == 0 || line[0] != '$' {
			return respRequest{}, &protoError{fmt.Sprintf("expected '$', got '%s'", printable(line, 1))}
		}
		size, err := strconv.ParseInt(string(line[1:]), 10, 64)
		if err != nil || size < 0 || size > 1<<40 {
			return respRequest{}, &protoError{"invalid bulk length"}
		}
		if r.tooLarge || total+int(size) > c.s.cfg.MaxRequest {
			r.tooLarge = true
			if err := c.discard(size + 2); err != nil {
				return respRequest{}, err
			}
			continue
		}
		arg, ok, err := c.readData(int(size))
		if err != nil {
			return respRequest{}, err
		}
		if !ok {
			return respRequest{}, &protoError{"expected CRLF after a bulk string"}
		}
		total += int(size)
		r.args = append(r.args, arg)
	}
	return r, nil
}

func cloneAll(f [][]byte) [][]byte {
	for i := range f {
		f[i] = bytes.Clone(f[i])
	}
	return f
}

// printable is b cut to n bytes with what is not printable ASCII
// replaced, for an error message.
func printable(b []byte, n int) string {
	b = bytes.Clone(b[:min(len(b), n)])
	for i, ch := range b {
		if ch < 0x20 || ch > 0x7e || ch == '\'' {
			b[i] = '?'
		}
	}
	return string(b)
}

// Replies.

func (c *conn) simple(s string) { c.w.WriteString("+" + s + "\r\n") }

func (c *conn) errReply(s string) {
	c.s.n.errors.Add(1)
	c.w.WriteString("-" + s + "\r\n")
}

func (c *conn) integer(n int64) {
	c.w.WriteByte(':')
	c.w.Write(strconv.AppendInt(nil, n, 10))
	c.w.WriteString("\r\n")
}

func (c *conn) bulk(b []byte) {
	c.w.WriteByte('$')
	c.w.Write(strconv.AppendInt(nil, int64(len(b)), 10))
	c.w.WriteString("\r\n")
	c.w.Write(b)
	c.w.WriteString("\r\n")
}

func (c *conn) null() {
	if c.resp3 {
		c.w.WriteString("_\r\n")
	} else {
		c.w.WriteString("$-1\r\n")
	}
}

func (c *conn) array(n int) { fmt.Fprintf(c.w, "*%d\r\n", n) }

// mapHeader opens a map of n pairs: a RESP3 map, or an array of 2n
// elements in RESP2.
func (c *conn) mapHeader(n int) {
	if c.resp3 {
		fmt.Fprintf(c.w, "%%%d\r\n", n)
	} else {
		c.array(2 * n)
	}
}
