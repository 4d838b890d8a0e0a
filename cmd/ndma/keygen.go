package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/spf13/cobra"

	"github.com/ndma/ndma/secure"
)

func init() {
	var out string
	var force, authority bool
	cmd := &cobra.Command{
		Use:   "keygen -o FILE",
		Short: "Make a fabric token (for every process) or, with --authority, an authority secret (to issue credentials)",
		Long: fmt.Sprintf(`keygen draws a fabric token (%d random bytes from the operating system's
generator, written as %d hexadecimal digits and a newline) and writes it
to a new file that only its owner may read and write (mode 0600), which
is the form --token-file reads. The switch, the memory nodes (memd
--switch) and every client of the fabric are given the same file (or its
first line in $NDMA_TOKEN).

With --authority it draws an authority secret instead: the secret
credentials are issued and revoked under (ndma credential issue
--secret-file). Its first line begins with %q, which tells it from a
token: ndma credential issue refuses a token, and --token-file refuses an
authority secret. It stays with whoever issues credentials; no process
needs it.

An existing file is kept unless --force replaces it (a running fabric
keeps the old token until its processes restart with the new one).
-o - writes to standard output instead.`, secure.TokenBytes, 2*secure.TokenBytes, secure.AuthoritySecretPrefix),
		Example: `  ndma keygen -o fabric.token
  ndma switch --token-file fabric.token --credential switch.cred
  ndma memd --switch 127.0.0.1:7471 --token-file fabric.token --credential memory-0.cred
  ndma pool ls --switch 127.0.0.1:7471 --token-file fabric.token --credential client-0.cred

  ndma keygen --authority -o authority.key
  ndma credential issue --secret-file authority.key --role client --name alice -o alice.cred`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			what := "token"
			if authority {
				what = "authority secret"
			}
			if out == "" {
				return fmt.Errorf("-o: give the file to write the %s to (or - for standard output)", what)
			}
			var b []byte
			if authority {
				var err error
				if b, err = secure.NewAuthoritySecret(rand.Reader); err != nil {
					return err
				}
			} else {
				b = append(secure.NewToken(), '\n')
			}
			defer clear(b)
			if out == "-" {
				_, err := cmd.OutOrStdout().Write(b)
				return err
			}
			if err := writeSecret(out, b, force); err != nil {
				return err
			}
			if authority {
				fmt.Fprintf(cmd.ErrOrStderr(), "authority secret written to %s (mode 0600): issue credentials with ndma credential issue --secret-file %s; keep it with whoever issues them, give it to no process (it is not the fabric token)\n", out, out)
				return nil
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "fabric token written to %s (mode 0600): give every process of the fabric --token-file %s (credentials are issued under an authority secret instead: ndma keygen --authority)\n", out, out)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "`file` to create (- for standard output)")
	cmd.Flags().BoolVar(&force, "force", false, "replace the file if it exists")
	cmd.Flags().BoolVar(&authority, "authority", false, "make an authority secret, to issue credentials under, instead of a fabric token")
	rootCmd.AddCommand(cmd)
}

// writeSecret writes b to a file at path that only its owner may read and
// write (mode 0600 whatever the umask). Without force an existing path is
// an error and left alone; with force the file replaces it whole (written
// aside, then renamed over it).
func writeSecret(path string, b []byte, force bool) error {
	if force {
		r, err := replace(path, 0o600)
		if err != nil {
			return err
		}
		if _, err := r.Write(b); err != nil {
			r.Abort()
			return err
		}
		return r.Commit()
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s exists: keeping it (--force replaces it)", path)
	}
	if err != nil {
		return err
	}
	err = f.Chmod(0o600) // the umask may have taken the owner's bits
	if err == nil {
		_, err = f.Write(b)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}
