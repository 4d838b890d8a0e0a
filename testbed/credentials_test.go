package testbed

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/ndma/ndma/coll"
	"github.com/ndma/ndma/secure"
)

// TestRankCredentialDir: each rank's credential lands where a rank given
// the directory as NDMA_CREDENTIAL looks for it (JOB/RANK.cred), named
// JOB/RANK under the testbed's authority, readable by its owner alone;
// remove deletes them; a testbed without credentials gets none.
func TestRankCredentialDir(t *testing.T) {
	secret, err := secure.NewAuthoritySecret(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sf := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(sf, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := secure.ParseAuthoritySecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "creds")
	st := &State{Secret: sf, Dir: t.TempDir()}
	paths, remove, err := RankCredentialDir(st, "tb-mpi-1", 3, dir)
	if err != nil || len(paths) != 3 {
		t.Fatalf("%v, %v", paths, err)
	}
	for r, p := range paths {
		want, err := coll.Launch{Credential: dir, Job: "tb-mpi-1", Rank: r}.CredentialPath()
		if err != nil || p != want {
			t.Fatalf("rank %d: credential at %s, a rank looks at %s (%v)", r, p, want, err)
		}
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("rank %d: %v, %v", r, fi, err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		id, err := secure.ParseIdentity(b)
		if err != nil || id.Cert.Name != "tb-mpi-1/"+strconv.Itoa(r) || id.Cert.Role != secure.RoleMember || id.Cert.Verify(a.Public()) != nil {
			t.Fatalf("rank %d: %+v, %v", r, id, err)
		}
	}
	remove()
	for _, p := range paths {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left after remove: %v", p, err)
		}
	}
	if paths, _, err := RankCredentialDir(&State{}, "tb-mpi-1", 3, dir); paths != nil || err != nil {
		t.Errorf("a testbed without credentials: %v, %v", paths, err)
	}
}
