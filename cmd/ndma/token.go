package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/pflag"
)

// tokenEnv names the environment variable that holds the fabric token
// itself (not a file), the default of every command's --token.
const tokenEnv = "NDMA_TOKEN"

// tokenFlags are --token and --token-file, the same on every command that
// talks to a forwarding node.
type tokenFlags struct {
	token, file string
	fs          *pflag.FlagSet
}

// register adds --token and --token-file to fs.
func (t *tokenFlags) register(fs *pflag.FlagSet) {
	t.fs = fs
	fs.StringVar(&t.token, "token", "", "fabric `token` that authenticates control messages (default $"+tokenEnv+", the token itself; none when unset)")
	fs.StringVar(&t.file, "token-file", "", "`file` whose first line is the fabric token, instead of --token (it stays out of the process list)")
}

// given reports whether --token or --token-file is on the command line.
func (t *tokenFlags) given() bool {
	return t.changed("token") || t.changed("token-file")
}

// changed reports whether the flag name was set on the command line.
func (t *tokenFlags) changed(name string) bool { return t.fs != nil && t.fs.Changed(name) }

// resolve returns the fabric token: --token, else the first line of
// --token-file, else $NDMA_TOKEN as getenv reports it, else none (nil).
// Both flags, an empty --token or an empty --token-file are errors.
func (t *tokenFlags) resolve(getenv func(string) string) ([]byte, error) {
	tok, file := t.changed("token"), t.changed("token-file")
	switch {
	case tok && file:
		return nil, errors.New("--token and --token-file: give one of them, not both")
	case tok:
		if t.token == "" {
			return nil, errors.New("--token: empty: give the fabric token, or omit the flag")
		}
		return []byte(t.token), nil
	case file:
		if t.file == "" {
			return nil, errors.New("--token-file: empty path: give the file holding the fabric token")
		}
		b, err := readToken(t.file)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		return b, nil
	}
	if v := getenv(tokenEnv); v != "" {
		return []byte(v), nil
	}
	return nil, nil
}

// readToken reads a fabric token: the file's first line, without its line
// ending. The line must not be empty.
func readToken(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i]
	}
	b = bytes.TrimSuffix(b, []byte{'\r'})
	if len(b) == 0 {
		return nil, fmt.Errorf("%s: the first line (the token) is empty", path)
	}
	return b, nil
}
