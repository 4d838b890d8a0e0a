package main

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/ndma/ndma/internal/secretfile"
	"github.com/ndma/ndma/secure"
)

// tokenEnv names the environment variable that holds the fabric token
// itself (not a file), the default of every command's --token.
const tokenEnv = "NDMA_TOKEN"

// tokenFlags are --token, --token-file and --insecure, the same on every
// command that talks on the fabric (resolveSecurity combines them with
// --credential).
type tokenFlags struct {
	token, file string
	insecure    bool
	fs          *pflag.FlagSet
}

// insecureHelp is what every --insecure says.
const insecureHelp = "do not seal datagrams, and run without a credential: anyone who can capture the traffic reads region keys and data, and replays what it captured; " +
	"with a fabric token control messages are still authenticated, without one nothing is"

// register adds --token, --token-file and --insecure to fs.
func (t *tokenFlags) register(fs *pflag.FlagSet) {
	t.fs = fs
	fs.StringVar(&t.token, "token", "", "fabric `token` that authenticates control messages (default $"+tokenEnv+", the token itself; on the command line every user of the machine sees it in the process list: prefer --token-file)")
	fs.StringVar(&t.file, "token-file", "", "`file` whose first line is the fabric token, instead of --token (it stays out of the process list; ndma fabric init writes one; only its owner may read it)")
	fs.BoolVar(&t.insecure, "insecure", false, insecureHelp)
}

// givenToken reports whether --token or --token-file is on the command
// line.
func (t *tokenFlags) givenToken() bool {
	return t.changed("token") || t.changed("token-file")
}

// changed reports whether the flag name was set on the command line.
func (t *tokenFlags) changed(name string) bool { return t.fs != nil && t.fs.Changed(name) }

// errNoToken is resolveSecurity's error when a sealing process that
// talks to a switch is given no token.
var errNoToken = errors.New("no fabric token: give --token-file FILE (ndma fabric init writes one, DIR/token), --token or $" + tokenEnv +
	", the forwarding node's token")

// resolve returns the fabric token: --token, else the first line of
// --token-file, else $NDMA_TOKEN as getenv reports it; nil when none of
// them is given. Two of them, an empty --token or an empty or exposed
// --token-file are errors.
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

// tokenVisibleWarning is the warning of a command given --token: the
// token is on its command line.
const tokenVisibleWarning = "--token: the fabric token is on the command line, where every user of this machine sees it in the process list (ps): give --token-file FILE instead"

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
