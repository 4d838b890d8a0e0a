package bench

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/ndma/ndma/coll"
	"github.com/ndma/ndma/testbed"
)

// AlgoGloo names the rows SuiteConfig.Gloo adds: the operation with
// PyTorch's Gloo backend (torch.distributed), one process per host.
const AlgoGloo coll.Algo = "gloo"

// GlooPython is the interpreter the Gloo rows run: Debian's, which has
// python3-torch.
const GlooPython = "/usr/bin/python3"

// glooOps are the operations the Gloo runner measures.
var glooOps = []coll.Operation{coll.OpBcast, coll.OpAllreduce, coll.OpReduce, coll.OpAllgather, coll.OpBarrier}

//go:embed gloo/gloo_coll.py
var glooScript []byte

// glooPort is the TCP port of the Gloo rendezvous on the first host.
const glooPort = 29517

// GlooAvailable reports why the Gloo rows cannot run here (nil when they
// can): PyTorch must import in GlooPython.
func GlooAvailable(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, GlooPython, "-c", "import torch.distributed as d; print(d.is_gloo_available())").CombinedOutput()
	if err != nil {
		return fmt.Errorf("bench: gloo rows: %s cannot import torch.distributed (Debian: apt install python3-torch): %w: %s", GlooPython, err, tail(string(out), 3))
	}
	if string(out) != "True\n" {
		return fmt.Errorf("bench: gloo rows: this PyTorch has no Gloo backend")
	}
	return nil
}

// glooRunner runs the Gloo jobs of a suite.
type glooRunner struct {
	script string // the script's file, in a directory removed by close
}

func newGlooRunner(ctx context.Context) (*glooRunner, error) {
	if err := GlooAvailable(ctx); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "ndma-gloo")
	if err != nil {
		return nil, err
	}
	g := &glooRunner{script: filepath.Join(dir, "gloo_coll.py")}
	if err := os.WriteFile(g.script, glooScript, 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return g, nil
}

func (g *glooRunner) close() { os.RemoveAll(filepath.Dir(g.script)) }

// args is the command every host runs for job j: the rendezvous on the
// first host, the interface of the testbed's subnet.
func (g *glooRunner) args(st *testbed.State, j suiteJob, iters int) []string {
	it, warmup := (&CollConfig{Iters: iters}).iters(j.size)
	master := fmt.Sprintf("%s:%d", st.Hosts[0].Addr, glooPort)
	return []string{GlooPython, g.script, master, st.Hosts[0].Iface, string(j.op),
		strconv.Itoa(j.size), strconv.Itoa(it), strconv.Itoa(warmup)}
}

func (g *glooRunner) run(ctx context.Context, st *testbed.State, j suiteJob, iters, perHost int, out io.Writer) error {
	return testbed.RunWith(ctx, st, g.args(st, j, iters), out, testbed.RunOptions{PerHost: perHost})
}

// glooAlgos adds AlgoGloo to op's algorithms when the suite runs Gloo and
// Gloo has op.
func (c *SuiteConfig) glooAlgos(op coll.Operation, algos []coll.Algo) []coll.Algo {
	if c.Gloo && slices.Contains(glooOps, op) {
		return append(algos[:len(algos):len(algos)], AlgoGloo)
	}
	return algos
}
