package main

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/internal/secretfile"
	"github.com/ndma/ndma/secure"
)

// credentialEnv names the environment variable that holds the path of a
// process's credential file, the default of --credential.
const credentialEnv = "NDMA_CREDENTIAL"

// credentialHelp is what every --credential flag says about the
// credential's effect.
const credentialHelp = "every datagram is then sealed (encrypted and authenticated): the process talks only to processes with a credential of the same fabric"

// credentialFlag is --credential, the same on every command that can
// seal its datagrams.
type credentialFlag struct {
	path        string
	rekey       time.Duration // --rekey-after (daemons): 0, the layer's default
	revocations string        // --revocations (daemons)
	fs          *pflag.FlagSet
}

// minRekey is the shortest --rekey-after: each rekey is a handshake
// (about a millisecond of CPU on each side) per peer.
const minRekey = time.Second

// registerRekey adds --rekey-after and --revocations to fs, for a
// daemon's sessions.
func (c *credentialFlag) registerRekey(fs *pflag.FlagSet) {
	fs.StringVar(&c.revocations, "revocations", "", "with a credential, the fabric's revocation list `file` (ndma credential revoke writes it; default $"+revocationsEnv+"): sessions with a revoked credential are refused and closed; the file is read again when it changes")
	fs.DurationVar(&c.rekey, "rekey-after", secure.DefaultRekeyAge, "with a credential, replace each session's keys by new ones this often (a new handshake while the old session carries traffic; the old one still opens what arrives for "+secure.DefaultDrain.String()+"), at least "+minRekey.String())
}

// options are the security options of the process: sealOptions, with
// --rekey-after.
func (c *credentialFlag) options() (secure.Options, error) {
	o := sealOptions
	if c.fs != nil && c.fs.Changed("rekey-after") {
		if c.rekey < minRekey {
			return o, fmt.Errorf("--rekey-after %v: at least %v", c.rekey, minRekey)
		}
		o.RekeyAge = c.rekey
	}
	return o, nil
}

// register adds --credential to fs; role says which credential the
// command needs ("a switch credential").
func (c *credentialFlag) register(fs *pflag.FlagSet, role string) {
	c.fs = fs
	fs.StringVar(&c.path, "credential", "", "`file` holding this process's credential, "+role+" (make one with ndma credential issue; only its owner may read it; default $"+credentialEnv+"): "+credentialHelp)
}

// load returns the identity in --credential, else in the file $NDMA_CREDENTIAL
// names as getenv reports it, or nil when neither is given. The
// credential's role must be one of roles.
func (c *credentialFlag) load(getenv func(string) string, roles ...secure.Role) (*secure.Identity, error) {
	path, flag := c.path, "--credential"
	if c.fs == nil || !c.fs.Changed("credential") {
		path, flag = getenv(credentialEnv), "$"+credentialEnv
		if path == "" {
			return nil, nil
		}
	} else if path == "" {
		return nil, errors.New("--credential: empty path: give the credential file, or omit the flag")
	}
	id, err := readCredential(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if err := id.Cert.ValidAt(time.Now()); err != nil {
		// Every peer would refuse it at the handshake.
		return nil, fmt.Errorf("%s: %s: %w: have a new one issued (ndma credential issue)", flag, path, err)
	}
	if !slices.Contains(roles, id.Cert.Role) {
		var want []string
		for _, r := range roles {
			want = append(want, secure.RoleName(r))
		}
		return nil, fmt.Errorf("%s: %s is the credential of a %v (%q), this command needs one of role %s",
			flag, path, id.Cert.Role, id.Cert.Name, strings.Join(want, " or "))
	}
	return id, nil
}

// readCredential reads and checks the credential file at path, which must
// be private to its owner (see secretfile.Open).
func readCredential(path string) (*secure.Identity, error) {
	b, err := secretfile.ReadFile(path, "credential file")
	if err != nil {
		return nil, err
	}
	id, err := secure.ParseIdentity(b)
	clear(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return id, nil
}

// sealOptions are the security options of every process the commands
// start with a credential: payloads and the header's region keys and
// operands encrypted, not only authenticated.
var sealOptions = secure.Options{}

// endpointOptions returns endpoint options that seal every datagram under
// id (none when id is nil).
func endpointOptions(id *secure.Identity) endpoint.Options {
	if id == nil {
		return endpoint.Options{}
	}
	return endpoint.Options{Security: id, SecurityOptions: sealOptions}
}

// credentialHint adds to err, when it says that no switch answered and
// the process sealed with a credential, that a switch without one or of
// another fabric does not answer (a sealed switch drops everything else
// without a word; without a credential, endpoint.NoAnswerError says so).
func credentialHint(err error, id *secure.Identity) error {
	if !errors.Is(err, endpoint.ErrNoSwitch) {
		return err
	}
	if id == nil {
		return err // the endpoint's message says a sealing switch needs a credential
	}
	return fmt.Errorf("%w (with --credential: a switch without one, or with a credential of another fabric, does not answer)", err)
}

// credentialJSON is what credential show --json and credential issue
// --json print.
type credentialJSON struct {
	Role       string    `json:"role"`
	Name       string    `json:"name"`
	NotBefore  time.Time `json:"not_before"`
	NotAfter   time.Time `json:"not_after"`
	Status     string    `json:"status"` // valid, expired or not yet valid, at the time printed
	Key        string    `json:"key_fingerprint"`
	Authority  string    `json:"authority_fingerprint"`
	File       string    `json:"file,omitempty"`
	SameFabric *bool     `json:"same_fabric,omitempty"`
	Revoked    *bool     `json:"revoked,omitempty"`
}

// Credential statuses (credentialJSON.Status).
const (
	statusValid      = "valid"
	statusExpired    = "EXPIRED"
	statusNotYet     = "NOT YET VALID"
	statusRevokedTag = "REVOKED"
)

// certStatus returns the status of c at now and why it is not valid
// (nil when it is).
func certStatus(c *secure.Cert, now time.Time) (string, error) {
	err := c.ValidAt(now)
	switch {
	case errors.Is(err, secure.ErrExpired):
		return statusExpired, err
	case errors.Is(err, secure.ErrNotYetValid):
		return statusNotYet, err
	}
	return statusValid, err
}

func describeCredential(id *secure.Identity, file string, now time.Time) credentialJSON {
	status, _ := certStatus(&id.Cert, now)
	return credentialJSON{Role: secure.RoleName(id.Cert.Role), Name: id.Cert.Name, NotBefore: id.Cert.NotBefore, NotAfter: id.Cert.NotAfter,
		Status: status, Key: secure.Fingerprint(id.Cert.Key), Authority: secure.Fingerprint(id.Authority), File: file}
}

func printCredential(w io.Writer, c credentialJSON, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(c)
	}
	if c.File != "" {
		fmt.Fprintf(w, "file       %s\n", c.File)
	}
	fmt.Fprintf(w, "role       %s\nname       %q\n", c.Role, c.Name)
	fmt.Fprintf(w, "valid      %s to %s (%s)\n", c.NotBefore.Format(time.RFC3339), c.NotAfter.Format(time.RFC3339), c.Status)
	fmt.Fprintf(w, "key        %s\nauthority  %s\n", c.Key, c.Authority)
	if c.SameFabric != nil {
		fmt.Fprintf(w, "fabric     %s\n", map[bool]string{true: "issued under the authority secret given", false: "NOT issued under the authority secret given"}[*c.SameFabric])
	}
	if c.Revoked != nil {
		fmt.Fprintf(w, "revoked    %s\n", map[bool]string{true: statusRevokedTag + " by the revocation list given", false: "no, by the revocation list given"}[*c.Revoked])
	}
	return nil
}

// authorityOf derives the fabric's authority from the authority secret
// file at path (ndma keygen --authority makes one). A fabric token is
// refused: every process holds it.
func authorityOf(path string) (*secure.Authority, error) {
	b, err := secretfile.ReadFile(path, "authority secret file")
	if err != nil {
		return nil, err
	}
	a, err := secure.ParseAuthoritySecret(b)
	clear(b)
	if errors.Is(err, secure.ErrNotAuthoritySecret) {
		return nil, fmt.Errorf("%s: %w: credentials are issued under an authority secret (make one with ndma keygen --authority -o FILE), "+
			"never under the fabric token, which every process holds (with it any of them could issue credentials); "+
			"credentials of a secret of an earlier version are issued anew under a new one", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return a, nil
}

// Periods of validity of the credentials issue makes (--valid-for).
const (
	defaultValidity = 90 * 24 * time.Hour
	maxValidity     = 2 * 365 * 24 * time.Hour
)

// validityFlag is --valid-for: a duration in Go's form (2160h, 30m) or
// in days (90d).
type validityFlag time.Duration

func (v *validityFlag) String() string {
	d := time.Duration(*v)
	if d > 0 && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}

func (v *validityFlag) Set(s string) error {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseUint(days, 10, 32)
		if err != nil {
			return fmt.Errorf("%q: want a number of days such as 90d, or a duration such as 12h", s)
		}
		*v = validityFlag(time.Duration(n) * 24 * time.Hour)
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q: want a number of days such as 90d, or a duration such as 12h", s)
	}
	*v = validityFlag(d)
	return nil
}

func (v *validityFlag) Type() string { return "duration" }

// checkValidity checks --valid-for: positive, at most maxValidity.
func checkValidity(d time.Duration) error {
	if d < time.Minute || d > maxValidity {
		return fmt.Errorf("--valid-for %v: want 1m to %dd", (*validityFlag)(&d), maxValidity/(24*time.Hour))
	}
	return nil
}

// checkCredentialName checks a name credential issue is to certify for
// role: 1 to secure.MaxNameLen bytes, of the grammar the switch binds it
// by (secure.CheckName).
func checkCredentialName(role secure.Role, name string) error {
	if name == "" || len(name) > secure.MaxNameLen {
		return fmt.Errorf("--name: %d bytes: want 1 to %d", len(name), secure.MaxNameLen)
	}
	if err := secure.CheckName(role, name); err != nil {
		return fmt.Errorf("--name: %w", err)
	}
	return nil
}

func newCredentialCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "credential",
		Short: "Issue and inspect credentials: each process's own identity (role, name, key) under the fabric secret",
		Long: `A credential is one process's identity on a secured fabric: its role
(switch, memory-node, member or client), a name, an Ed25519 key pair and a
certificate of them for a period of time (90 days unless issue is told
otherwise), signed by the fabric's authority, a key derived from the
authority secret (ndma keygen --authority). A process given a credential (--credential on ndma
switch, ndma memd and the pool commands) proves it with a handshake to
every peer and seals every datagram it sends (encrypted and
authenticated): it talks only to processes with a credential of the same
fabric. A credential of one role gives nothing of another's: a client's
cannot pose as a memory node or as the switch.

A process refuses a peer whose certificate is outside its period of
validity (give or take ` + secure.ClockSkew.String() + ` of clock skew), and will not start with
such a credential of its own. A credential withdrawn before its end is
named in the fabric's revocation list (revoke, revocations), a file
signed by the authority.

Only whoever holds the authority secret can issue credentials and revoke
them; the processes need only their own credential (and the fabric
token, which still authenticates control messages). The authority secret
is never the fabric token: issue refuses a token file.`,
		Example: `  ndma keygen --authority -o authority.key
  ndma credential issue --secret-file authority.key --role switch --name sw0 -o sw0.cred
  ndma credential issue --secret-file authority.key --role memory-node --name mem0 -o mem0.cred
  ndma credential issue --secret-file authority.key --role client --name alice -o alice.cred --valid-for 30d
  ndma credential show alice.cred
  ndma credential revoke --secret-file authority.key --list revoked.list alice.cred
  ndma credential revocations revoked.list`,
	}

	cmd.AddCommand(newCredentialIssueCmd(), newCredentialShowCmd(), newRevokeCmd(), newRevocationsCmd())
	return cmd
}

func init() { rootCmd.AddCommand(newCredentialCmd()) }

// newCredentialIssueCmd is ndma credential issue.
func newCredentialIssueCmd() *cobra.Command {
	var role, name, secretFile, out string
	var force, asJSON bool
	validFor := validityFlag(defaultValidity)
	issue := &cobra.Command{
		Use:   "issue --role ROLE --name NAME --secret-file FILE -o FILE",
		Short: "Issue a credential under the authority secret and write it to a new private file",
		Long: `issue draws a new Ed25519 key pair, has the fabric's authority (derived
from the authority secret in --secret-file, the file ndma keygen
--authority makes) sign its certificate (--role, --name, valid from now
for --valid-for), and writes the credential to a new file that only its
owner may read and write (mode 0600): the file holds the private key. An
existing file is kept unless --force replaces it. A fabric token given as
--secret-file is refused.

A credential is valid for 90 days unless --valid-for says otherwise (1m
to 730d): issue a new one before it ends, and restart the process with
it.

Issue one credential per process, of the role it plays: switch for ndma
switch, memory-node for ndma memd, client for the pool commands, member
for a job's ranks.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := secure.ParseRole(role)
			if err != nil {
				return fmt.Errorf("--role %q: want switch, memory-node, member or client", role)
			}
			if err := checkCredentialName(r, name); err != nil {
				return err
			}
			if err := checkValidity(time.Duration(validFor)); err != nil {
				return err
			}
			if secretFile == "" {
				return errors.New("--secret-file: give the authority secret's file (make one with ndma keygen --authority -o FILE)")
			}
			if out == "" {
				return errors.New("-o: give the file to write the credential to")
			}
			a, err := authorityOf(secretFile)
			if err != nil {
				return fmt.Errorf("--secret-file: %w", err)
			}
			now := time.Now()
			from := time.Unix(now.Unix(), 0)
			id, err := a.IssueBetween(r, name, from, from.Add(time.Duration(validFor)), rand.Reader)
			if err != nil {
				return err
			}
			b, err := id.Encode()
			if err != nil {
				return err
			}
			err = writeSecret(out, b, force)
			clear(b)
			if err != nil {
				return err
			}
			if asJSON {
				return printCredential(cmd.OutOrStdout(), describeCredential(id, out, now), true)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%s credential %q written to %s (mode 0600), valid until %s: give the process --credential %s\n",
				r, name, out, id.Cert.NotAfter.Format(time.RFC3339), out)
			return printCredential(cmd.OutOrStdout(), describeCredential(id, out, now), false)
		},
	}
	fl := issue.Flags()
	fl.StringVar(&role, "role", "", "the process's `role`: switch, memory-node, member or client (required)")
	fl.StringVar(&name, "name", "", fmt.Sprintf("the process's `name`, 1 to %d bytes (required)", secure.MaxNameLen))
	fl.StringVar(&secretFile, "secret-file", "", "`file` holding the authority secret (the one ndma keygen --authority makes; only its owner may read it; never the fabric token) (required)")
	fl.Var(&validFor, "valid-for", "how long the credential is valid from now: days (90d) or a duration (12h), 1m to 730d")
	fl.StringVarP(&out, "output", "o", "", "`file` to create with the credential (required)")
	fl.BoolVar(&force, "force", false, "replace the file if it exists")
	fl.BoolVar(&asJSON, "json", false, "print what was issued as JSON")
	for _, f := range []string{"role", "name", "secret-file", "output"} {
		_ = issue.MarkFlagRequired(f)
	}
	return issue
}

// newCredentialShowCmd is ndma credential show.
func newCredentialShowCmd() *cobra.Command {
	var showSecret, showList string
	var showJSON bool
	show := &cobra.Command{
		Use:   "show FILE",
		Short: "Print a credential's role, name, period of validity and key fingerprints (never its private key)",
		Long: `show checks the credential in FILE (its certificate against the authority
it names) and prints its role, its name, its period of validity (and
whether it is valid now, EXPIRED or NOT YET VALID), the fingerprint of its
public key and that of the fabric authority's: credentials of one fabric
show the same authority. With --secret-file it also says whether the
credential was issued under that authority secret; with --revocations,
whether that revocation list revokes it. The private key is never
printed. It fails (after printing) when the credential is not valid now,
not this fabric's, or revoked.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := readCredential(args[0])
			if err != nil {
				return err
			}
			now := time.Now()
			c := describeCredential(id, args[0], now)
			_, why := certStatus(&id.Cert, now)
			if showSecret != "" {
				a, err := authorityOf(showSecret)
				if err != nil {
					return fmt.Errorf("--secret-file: %w", err)
				}
				same := a.Public().Equal(id.Authority)
				c.SameFabric = &same
				if !same && why == nil {
					why = fmt.Errorf("%s was not issued under the authority secret in %s", args[0], showSecret)
				}
			}
			if showList != "" {
				rl, err := readRevocations(showList)
				if err != nil {
					return fmt.Errorf("--revocations: %w", err)
				}
				if err := rl.Verify(id.Authority); err != nil {
					return fmt.Errorf("--revocations: %s: %w", showList, err)
				}
				revoked := rl.Revoked(&id.Cert)
				c.Revoked = &revoked
				if revoked && why == nil {
					why = fmt.Errorf("%w: %s is revoked by %s (number %d)", secure.ErrRevoked, args[0], showList, rl.Number)
				}
			}
			if err := printCredential(cmd.OutOrStdout(), c, showJSON); err != nil {
				return err
			}
			return why
		},
	}
	show.Flags().StringVar(&showSecret, "secret-file", "", "`file` holding the authority secret to check the credential against")
	show.Flags().StringVar(&showList, "revocations", "", "revocation list `file` to check the credential against")
	show.Flags().BoolVar(&showJSON, "json", false, "print JSON")
	return show
}
