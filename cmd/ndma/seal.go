package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/secure"
)

// errNoCredential is matched (errors.Is) by resolveSecurity's error when
// a process is given neither a credential nor --insecure.
var errNoCredential = errors.New("no credential: every process of a fabric seals its datagrams")

// security is how a process talks on the fabric, as resolveSecurity
// decides it from --credential, --insecure and the token's sources.
type security struct {
	// id is the process's credential: every datagram it sends and
	// receives is sealed. Nil only with --insecure.
	id *secure.Identity
	// opts are the security layer's options with id.
	opts secure.Options
	// token is the fabric token, which authenticates control messages:
	// never empty with a credential for a process that talks to a switch;
	// with --insecure, empty when none was given.
	token []byte
}

// fabric returns the options of the process's control messages: under
// the token, or, with --insecure and no token, unauthenticated.
func (s security) fabric() endpoint.FabricOptions {
	return endpoint.FabricOptions{Token: s.token, Insecure: len(s.token) == 0}
}

// endpoint returns the options of the process's endpoint: sealing under
// its credential, or none with --insecure.
func (s security) endpoint() endpoint.Options {
	if s.id == nil {
		return endpoint.Options{}
	}
	return endpoint.Options{Security: s.id, SecurityOptions: s.opts}
}

// noCredential is resolveSecurity's error for a process of one of roles
// given no credential: it says how to make one (ndma fabric init writes
// file in its directory; "" when it writes none for such a process).
func noCredential(file string, roles []secure.Role) error {
	var names []string
	for _, r := range roles {
		names = append(names, secure.RoleName(r))
	}
	how := "ndma fabric init DIR writes a fabric's credentials, this one's in DIR/" + file
	if file == "" {
		how = "ndma fabric init DIR writes a fabric's secrets, then ndma credential issue --secret-file DIR/" + fabricSecretFile + " --role " + names[0] + " makes this one"
	}
	return fmt.Errorf("%w: give this process its credential, of role %s (%s), with --credential FILE or $%s; "+
		"or run it unsealed with --insecure, where anyone on the network reads and forges its traffic",
		errNoCredential, strings.Join(names, " or "), how, credentialEnv)
}

// insecureWarning is what a process started with --insecure warns of at
// start: what anyone on its network can do to it. token says whether a
// fabric token still authenticates its control messages.
func insecureWarning(token bool) string {
	const clear = "insecure (--insecure): datagrams are not sealed: anyone who can capture this fabric's traffic reads region keys and data, " +
		"and with a sniffed key reads and overwrites that memory; captured requests replay (fetch-adds, joins, region creations)"
	if token {
		return clear + "; control messages are still authenticated with the fabric token. Seal with credentials: ndma fabric init DIR"
	}
	return clear + "; and without a fabric token nothing is authenticated: anyone who can send to this fabric can pose as a client, a memory node or the switch. " +
		"Seal with credentials: ndma fabric init DIR"
}

// resolveSecurity decides how a process talks on the fabric from its
// --credential (or $NDMA_CREDENTIAL, of one of roles), --insecure and
// token flags, read through getenv:
//
//   - with a credential (the default rule): every datagram sealed; a
//     process that talks to a switch (toSwitch) needs the fabric token
//     as well (errNoToken), which authenticates its control messages;
//   - with --insecure: nothing sealed, the token optional (without one
//     control messages are not authenticated either);
//   - neither: errNoCredential, saying how to make credentials; both: an
//     error.
//
// warn receives the warnings to give at start: --insecure's (see
// insecureWarning), and one for a token on the command line. file names
// the credential ndma fabric init writes for this kind of process
// ("switch.cred"; "" for none), for errNoCredential's hint.
func resolveSecurity(t *tokenFlags, c *credentialFlag, getenv func(string) string, toSwitch bool, warn func(string), file string, roles ...secure.Role) (security, error) {
	var s security
	var err error
	if toSwitch {
		if s.token, err = t.resolve(getenv); err != nil {
			return security{}, err
		}
	}
	if t.insecure {
		switch {
		case c.fs != nil && c.fs.Changed("credential"):
			return security{}, errors.New("--insecure and --credential: --insecure turns sealing off; give one of them")
		case getenv(credentialEnv) != "":
			return security{}, errors.New("--insecure, but $" + credentialEnv + " names a credential: unset it, or drop --insecure to seal under it")
		}
		warn(insecureWarning(len(s.token) > 0))
	} else {
		if s.id, err = c.load(getenv, roles...); err != nil {
			return security{}, err
		}
		if s.id == nil {
			return security{}, noCredential(file, roles)
		}
		if s.opts, err = c.options(); err != nil {
			return security{}, err
		}
		if toSwitch && len(s.token) == 0 {
			return security{}, errNoToken
		}
		if tokenIsAuthority(s.token, s.id) {
			return security{}, errors.New("the credential was issued under the fabric token as authority secret: every process holding the token could issue any credential, a switch's too; issue credentials under an authority secret of their own (ndma fabric init, or ndma keygen --authority)")
		}
	}
	if t.changed("token") {
		warn(tokenVisibleWarning)
	}
	return s, nil
}

// logWarn returns a warn function for resolveSecurity that logs each
// warning at WARN through log, for a daemon.
func logWarn(log *slog.Logger, who string) func(string) {
	return func(msg string) { log.Warn(who + ": " + msg) }
}

// printWarn returns a warn function for resolveSecurity that writes each
// warning as a line on w, for a client command.
func printWarn(w io.Writer) func(string) {
	return func(msg string) { fmt.Fprintf(w, "ndma: warning: %s\n", msg) }
}

// tokenIsAuthority reports whether id's authority is the one the fabric
// token would derive as authority secret.
func tokenIsAuthority(token []byte, id *secure.Identity) bool {
	if len(token) == 0 || id == nil {
		return false
	}
	a, err := secure.NewAuthority(token)
	return err == nil && a.Public().Equal(id.Authority)
}
