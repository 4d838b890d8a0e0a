package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/ndma/ndma/internal/secretfile"
	"github.com/ndma/ndma/secure"
)

// tokenEnv names the environment variable that holds the fabric token
// itself (not a file), the default of every command's --token.
const tokenEnv = "NDMA_TOKEN"

// tokenFlags are --token, --token-file and --insecure, the same on every
// command that talks to a forwarding node.
type tokenFlags struct {
	token, file string
	insecure    bool
	fs          *pflag.FlagSet
}

// register adds --token, --token-file and --insecure to fs.
func (t *tokenFlags) register(fs *pflag.FlagSet) {
	t.fs = fs
	fs.StringVar(&t.token, "token", "", "fabric `token` that authenticates control messages (default $"+tokenEnv+", the token itself)")
	fs.StringVar(&t.file, "token-file", "", "`file` whose first line is the fabric token, instead of --token (it stays out of the process list; make one with ndma keygen; only its owner may read it)")
	fs.BoolVar(&t.insecure, "insecure", false, "run without a fabric token: anyone who can reach the switch may join, lend memory and create, open and free pool regions")
}

// given reports whether --token, --token-file or --insecure is on the
// command line.
func (t *tokenFlags) given() bool {
	return t.changed("token") || t.changed("token-file") || t.changed("insecure")
}

// changed reports whether the flag name was set on the command line.
func (t *tokenFlags) changed(name string) bool { return t.fs != nil && t.fs.Changed(name) }

// errNoToken is resolve's error when no token is given and --insecure is
// not either.
var errNoToken = errors.New("no fabric token: give --token-file FILE (make one with: ndma keygen -o FILE), --token or $" + tokenEnv +
	", the forwarding node's token; or --insecure to run without authentication")

// resolve returns the fabric token: --token, else the first line of
// --token-file, else $NDMA_TOKEN as getenv reports it; or insecure, for
// --insecure. None of them is errNoToken. Two of them, an empty --token
// or an empty or exposed --token-file are errors too.
func (t *tokenFlags) resolve(getenv func(string) string) (token []byte, insecure bool, err error) {
	tok, file := t.changed("token"), t.changed("token-file")
	if t.insecure {
		switch {
		case tok:
			return nil, false, errors.New("--insecure and --token: give one of them (a token turns authentication on)")
		case file:
			return nil, false, errors.New("--insecure and --token-file: give one of them (a token turns authentication on)")
		case getenv(tokenEnv) != "":
			return nil, false, errors.New("--insecure, but $" + tokenEnv + " holds a token: unset it, or drop --insecure to use it")
		}
		return nil, true, nil
	}
	switch {
	case tok && file:
		return nil, false, errors.New("--token and --token-file: give one of them, not both")
	case tok:
		if t.token == "" {
			return nil, false, errors.New("--token: empty: give the fabric token, or omit the flag")
		}
		return []byte(t.token), false, nil
	case file:
		if t.file == "" {
			return nil, false, errors.New("--token-file: empty path: give the file holding the fabric token")
		}
		b, err := readToken(t.file)
		if err != nil {
			return nil, false, fmt.Errorf("--token-file: %w", err)
		}
		return b, false, nil
	}
	if v := getenv(tokenEnv); v != "" {
		return []byte(v), false, nil
	}
	return nil, false, errNoToken
}

// warnInsecure tells the user of a client command run with --insecure
// that its control messages to the switch at addr are not authenticated.
func warnInsecure(w io.Writer, addr string) {
	fmt.Fprintf(w, "ndma: warning: running without authentication (--insecure): anyone who can send to %s can pose as it or as this client\n", addr)
}

// readToken reads a fabric token: the file's first line, without its line
// ending. The line must not be empty nor an authority secret's, and the
// file must be private to its owner (see secretfile.Open).
func readToken(path string) ([]byte, error) {
	b, err := secretfile.ReadFile(path, "token file")
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
	if secure.IsAuthoritySecret(b) {
		clear(b)
		return nil, fmt.Errorf("%s holds the authority secret credentials are issued under (ndma keygen --authority), not the fabric token: give the token's file (ndma keygen), and keep the authority secret from the processes", path)
	}
	return b, nil
}
