package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/spf13/cobra"

	"github.com/ndma/ndma/fabric"
)

func init() {
	var out string
	var force bool
	cmd := &cobra.Command{
		Use:   "keygen",
		Short: "Make a fabric token: a random secret for the switch, the memory nodes and their clients",
		Long: fmt.Sprintf(`keygen draws a fabric token (%d random bytes from the operating system's
generator, written as %d hexadecimal digits and a newline) and writes it
to a new file that only its owner may read and write (mode 0600), which
is the form --token-file reads. The switch, the memory nodes (memd
--switch) and every client of the fabric are given the same file (or its
first line in $NDMA_TOKEN).

An existing file is kept unless --force replaces it (a running fabric
keeps the old token until its processes restart with the new one).
-o - writes the token to standard output instead.`, fabric.TokenBytes, 2*fabric.TokenBytes),
		Example: `  ndma keygen -o fabric.key
  ndma switch --token-file fabric.key --credential switch.cred
  ndma memd --switch 127.0.0.1:7471 --token-file fabric.key --credential memory-0.cred
  ndma pool ls --switch 127.0.0.1:7471 --token-file fabric.key --credential client-0.cred`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return errors.New("-o: give the file to write the token to (or - for standard output)")
			}
			line := append(fabric.NewToken(), '\n')
			if out == "-" {
				_, err := cmd.OutOrStdout().Write(line)
				return err
			}
			if err := writeSecret(out, line, force); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "fabric token written to %s (mode 0600): give every process of the fabric --token-file %s\n", out, out)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "`file` to create with the token (- for standard output)")
	cmd.Flags().BoolVar(&force, "force", false, "replace the file if it exists")
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
