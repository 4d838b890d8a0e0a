package main

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/ndma/ndma/secure"
)

// readRevocations reads the revocation list file at path and checks its
// signature against the authority it names (the caller checks that it is
// the fabric's).
func readRevocations(path string) (*secure.Revocations, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	rl, err := secure.ParseRevocations(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rl, nil
}

// revokedKey is a key credential revoke is to add to the list: its hash
// and what named it on the command line.
type revokedKey struct {
	hash secure.KeyHash
	what string // the credential it certifies, or "" for a fingerprint given
}

// keyToRevoke reads arg, a key's fingerprint (secure.ParseKeyHash) or a
// credential file of the fabric of authority.
func keyToRevoke(arg string, authority ed25519.PublicKey) (revokedKey, error) {
	if h, err := secure.ParseKeyHash(arg); err == nil {
		return revokedKey{hash: h}, nil
	}
	b, err := os.ReadFile(arg)
	if errors.Is(err, fs.ErrNotExist) {
		return revokedKey{}, fmt.Errorf("%s: neither a key fingerprint (SHA256:..., as credential show prints it) nor a credential file", arg)
	}
	if err != nil {
		return revokedKey{}, err
	}
	id, err := secure.ParseIdentity(b)
	clear(b)
	if err != nil {
		return revokedKey{}, fmt.Errorf("%s: %w", arg, err)
	}
	if !id.Authority.Equal(authority) {
		return revokedKey{}, fmt.Errorf("%s: a credential of another fabric (authority %s), not issued under this authority secret", arg, secure.Fingerprint(id.Authority))
	}
	return revokedKey{hash: secure.HashKey(id.Cert.Key), what: fmt.Sprintf("%v %q", id.Cert.Role, id.Cert.Name)}, nil
}

// revocationsJSON is what credential revocations --json and credential
// revoke --json print.
type revocationsJSON struct {
	File      string    `json:"file,omitempty"`
	Number    uint64    `json:"number"`
	Issued    time.Time `json:"issued"`
	Authority string    `json:"authority_fingerprint"`
	Revoked   []string  `json:"revoked"` // key fingerprints
}

func describeRevocations(rl *secure.Revocations, file string) revocationsJSON {
	j := revocationsJSON{File: file, Number: rl.Number, Issued: rl.Issued, Authority: secure.Fingerprint(rl.Authority), Revoked: []string{}}
	for _, h := range rl.Keys() {
		j.Revoked = append(j.Revoked, h.String())
	}
	return j
}

func printRevocations(w io.Writer, j revocationsJSON, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(j)
	}
	if j.File != "" {
		fmt.Fprintf(w, "file       %s\n", j.File)
	}
	fmt.Fprintf(w, "number     %d\nissued     %s\nauthority  %s\nrevoked    %s\n", j.Number, j.Issued.Format(time.RFC3339), j.Authority, keysCount(len(j.Revoked)))
	for _, k := range j.Revoked {
		fmt.Fprintf(w, "  %s\n", k)
	}
	return nil
}

// keysCount says n keys in words.
func keysCount(n int) string {
	if n == 1 {
		return "1 key"
	}
	return fmt.Sprintf("%d keys", n)
}

func newRevokeCmd() *cobra.Command {
	var secretFile, list string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "revoke --secret-file FILE --list FILE CREDENTIAL|FINGERPRINT...",
		Short: "Withdraw credentials before their end: add their keys to the fabric's signed revocation list",
		Long: `revoke adds the keys of the credentials named (credential files, or the
fingerprints of their keys as credential show prints them) to the
revocation list in --list, numbered one higher than the list it
replaces, signed by the authority derived from --secret-file, and
replaces the file whole (written aside, then renamed over it). A list
that does not exist yet is created, numbered 1. The list holds no secret
(mode 0644): it is for every process of the fabric. A list of another
fabric, or a credential of another fabric, is refused.

A process that holds a list refuses one numbered lower than it, so that
an old list cannot be played back to it.`,
		Example: `  ndma credential revoke --secret-file authority.key --list revoked.list alice.cred
  ndma credential revoke --secret-file authority.key --list revoked.list SHA256:6mZ3...`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := authorityOf(secretFile)
			if err != nil {
				return fmt.Errorf("--secret-file: %w", err)
			}
			var prev *secure.Revocations
			if _, err := os.Stat(list); err == nil {
				if prev, err = readRevocations(list); err != nil {
					return fmt.Errorf("--list: %w", err)
				}
				if err := prev.Verify(a.Public()); err != nil {
					return fmt.Errorf("--list: %s: %w", list, err)
				}
			} else if !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("--list: %w", err)
			}
			var keys []secure.KeyHash
			var named []revokedKey
			for _, arg := range args {
				k, err := keyToRevoke(arg, a.Public())
				if err != nil {
					return err
				}
				keys = append(keys, k.hash)
				named = append(named, k)
			}
			rl, err := a.Revoke(prev, time.Now(), keys...)
			if err != nil {
				return err
			}
			r, err := replace(list, 0o644)
			if err != nil {
				return err
			}
			if _, err := r.Write(rl.Encode()); err != nil {
				r.Abort()
				return err
			}
			if err := r.Commit(); err != nil {
				return err
			}
			before := 0
			if prev != nil {
				before = prev.Len()
			}
			if asJSON {
				return printRevocations(cmd.OutOrStdout(), describeRevocations(rl, list), true)
			}
			for _, k := range named {
				if k.what != "" {
					fmt.Fprintf(cmd.OutOrStdout(), "revoked %s (key %s)\n", k.what, k.hash)
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "revoked key %s\n", k.hash)
				}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "revocation list %s: number %d, %s revoked (%d new)\n", list, rl.Number, keysCount(rl.Len()), rl.Len()-before)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&secretFile, "secret-file", "", "`file` holding the authority secret (ndma keygen --authority) (required)")
	fl.StringVar(&list, "list", "", "revocation list `file` to extend, or to create (required)")
	fl.BoolVar(&asJSON, "json", false, "print the new list as JSON")
	for _, f := range []string{"secret-file", "list"} {
		_ = cmd.MarkFlagRequired(f)
	}
	return cmd
}

func newRevocationsCmd() *cobra.Command {
	var secretFile string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "revocations FILE",
		Short: "Print a revocation list: its number, when it was issued and the keys it revokes",
		Long: `revocations checks the revocation list in FILE (its signature against the
authority it names) and prints its number, when it was issued, the
fingerprint of the authority and those of the keys it revokes. With
--secret-file it also checks that the list is that authority's.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rl, err := readRevocations(args[0])
			if err != nil {
				return err
			}
			if secretFile != "" {
				a, err := authorityOf(secretFile)
				if err != nil {
					return fmt.Errorf("--secret-file: %w", err)
				}
				if err := rl.Verify(a.Public()); err != nil {
					return fmt.Errorf("%s: %w", args[0], err)
				}
			}
			return printRevocations(cmd.OutOrStdout(), describeRevocations(rl, args[0]), asJSON)
		},
	}
	cmd.Flags().StringVar(&secretFile, "secret-file", "", "`file` holding the authority secret to check the list against")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
