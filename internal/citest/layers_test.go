package citest

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/ndma/ndma/"

// layers are the import directions docs/ARCHITECTURE.md states that a
// change could break without a compile error: for each package (a path
// relative to the module, or a prefix ending in "/..."), the packages it
// must not depend on, directly or through others.
var layers = []struct {
	pkg       string
	forbidden []string
}{
	// The memory node runs its own engine, not the host library's.
	{"daemon/memd", []string{"endpoint", "fabric"}},
	{"memnode/...", []string{"endpoint", "fabric"}},
	// The pieces the host library and the memory node share live below
	// both.
	{"internal/poolclient", []string{"endpoint", "memnode/node", "memnode/server", "fabric"}},
	{"internal/ctrlclient", []string{"endpoint", "memnode/node", "memnode/server", "fabric"}},
	// The host side speaks the control protocol through wire/ctrl, never
	// through the switch.
	{"endpoint", []string{"fabric"}},
	{"coll", []string{"fabric"}},
	{"pool/...", []string{"fabric"}},
	{"stor", []string{"fabric"}},
	{"kv", []string{"fabric"}},
	{"mq", []string{"fabric"}},
	// The switch writes its map through ctrlstore's interface; only
	// the daemon that starts it with --etcd pulls in the etcd client.
	{"fabric", []string{"fabric/ctrlstore/etcdstore"}},
	{"fabric/ctrlstore", []string{"fabric/ctrlstore/etcdstore"}},
}

// TestLayers checks, with go list, that no package depends on a package
// its layer forbids.
func TestLayers(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := map[string][]string{} // package (module-relative) → its dependencies
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], module) {
			continue
		}
		deps[strings.TrimPrefix(f[0], module)] = f[1:]
	}
	for _, l := range layers {
		matched := 0
		for pkg, ds := range deps {
			if !matches(l.pkg, pkg) {
				continue
			}
			matched++
			for _, d := range ds {
				for _, bad := range l.forbidden {
					if d == module+bad {
						t.Errorf("%s depends on %s (docs/ARCHITECTURE.md: imports point down)", pkg, bad)
					}
				}
			}
		}
		if matched == 0 {
			t.Errorf("layer rule for %s matches no package: update the table", l.pkg)
		}
	}
}

// matches reports whether pkg is pattern, or under it for a pattern
// ending in "/...".
func matches(pattern, pkg string) bool {
	if p, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == p || strings.HasPrefix(pkg, p+"/")
	}
	return pkg == pattern
}

// peerClients are other systems' client libraries. The benchmarks
// drive the peers they compare with through them (package bench, and
// the ndma binary that runs it); no other package may depend on them.
var peerClients = []string{"github.com/nats-io/nats.go", "github.com/redis/go-redis/v9", "github.com/twmb/franz-go/pkg/kgo"}

// TestPeerClients checks, with go list, that only bench and cmd/ndma
// depend on a peer's client library (tests may use them too).
func TestPeerClients(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	seen := map[string]bool{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], module) {
			continue
		}
		pkg := strings.TrimPrefix(f[0], module)
		for _, d := range f[1:] {
			for _, c := range peerClients {
				if d != c {
					continue
				}
				seen[c] = true
				if pkg != "bench" && pkg != "cmd/ndma" {
					t.Errorf("%s depends on %s, a peer's client: only the benchmarks (bench) may", pkg, c)
				}
			}
		}
	}
	for _, c := range peerClients {
		if !seen[c] {
			t.Errorf("no package depends on %s: update the list", c)
		}
	}
}
