package testbed

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/ndma/ndma/secure"
)

// writeCredential issues a credential of role and name under a and
// writes it to a new file at path, readable by its owner alone.
func writeCredential(a *secure.Authority, role secure.Role, name, path string) error {
	id, err := a.Issue(role, name, rand.Reader)
	if err != nil {
		return fmt.Errorf("testbed: credential of %s: %w", name, err)
	}
	b, err := id.Encode()
	if err != nil {
		return fmt.Errorf("testbed: credential of %s: %w", name, err)
	}
	err = os.WriteFile(path, b, 0o600)
	clear(b)
	if err != nil {
		return fmt.Errorf("testbed: credential file: %w", err)
	}
	return nil
}

// RankCredentials issues, under the testbed's fabric secret, a member
// credential named JOB/RANK for each of the ranks of a run of job
// (fabric.RankMay:
// it joins job only as that rank, and the job's own groups), each in a
// file of its own in the state directory; remove deletes them. A testbed
// without credentials (Config.NoCredentials) gets none: nil paths.
func RankCredentials(st *State, job string, ranks int) (paths []string, remove func(), err error) {
	return rankCredentials(st, job, ranks, "")
}

// rankCredentials writes the credentials in the state directory, or in
// dir as JOB/RANK.cred when dir is not empty.
func rankCredentials(st *State, job string, ranks int, dir string) (paths []string, remove func(), err error) {
	remove = func() {
		for _, p := range paths {
			os.Remove(p)
		}
	}
	if st.Secret == "" {
		return nil, remove, nil
	}
	secret, err := os.ReadFile(st.Secret)
	if err != nil {
		return nil, remove, fmt.Errorf("testbed: run: fabric secret: %w", err)
	}
	a, err := secure.ParseAuthoritySecret(secret)
	clear(secret)
	if err != nil {
		return nil, remove, fmt.Errorf("testbed: run: fabric secret: %w", err)
	}
	for i := range ranks {
		p := filepath.Join(st.Dir, job+"-r"+strconv.Itoa(i)+".cred")
		if dir != "" {
			p = filepath.Join(dir, job, strconv.Itoa(i)+".cred")
		}
		if err := writeCredential(a, secure.RoleMember, job+"/"+strconv.Itoa(i), p); err != nil {
			remove()
			return nil, func() {}, err
		}
		paths = append(paths, p)
	}
	return paths, remove, nil
}

// RankCredentialDir is RankCredentials with the files in dir as
// JOB/RANK.cred (what NDMA_CREDENTIAL set to a directory finds: each
// rank its own), JOB made in dir.
func RankCredentialDir(st *State, job string, ranks int, dir string) (paths []string, remove func(), err error) {
	if st.Secret == "" {
		return nil, func() {}, nil
	}
	if err := os.MkdirAll(filepath.Join(dir, job), 0o700); err != nil {
		return nil, func() {}, fmt.Errorf("testbed: credentials: %w", err)
	}
	return rankCredentials(st, job, ranks, dir)
}

// IssueCredential issues, under the testbed's fabric secret, a
// credential of role and name and writes it to a new file at path
// (mode 0600), for a process run in a host namespace outside Run. A
// testbed without credentials (Config.NoCredentials) issues none: it
// returns false and writes nothing.
func IssueCredential(st *State, role secure.Role, name, path string) (bool, error) {
	if st.Secret == "" {
		return false, nil
	}
	secret, err := os.ReadFile(st.Secret)
	if err != nil {
		return false, fmt.Errorf("testbed: fabric secret: %w", err)
	}
	a, err := secure.ParseAuthoritySecret(secret)
	clear(secret)
	if err != nil {
		return false, fmt.Errorf("testbed: fabric secret: %w", err)
	}
	if err := writeCredential(a, role, name, path); err != nil {
		return false, err
	}
	return true, nil
}
