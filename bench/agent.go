package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/testbed"
)

// agentWait bounds an agent's set-up (joining the fabric, creating or
// opening what it uses) and, past the run's own length, its result.
const agentWait = time.Minute

// agentMsg is a line of JSON an agent writes: final when it says the
// agent is ready or done, not when it only reports progress.
type agentMsg interface{ final() bool }

// agentProc is an agent process of a testbed run (`ndma bench
// mq-agent`, `bench kv-agent`): its spec and control lines go to its
// standard input, its messages (M, a line of JSON each) come from its
// standard output.
type agentProc[M agentMsg] struct {
	name string
	cmd  *exec.Cmd
	in   io.WriteCloser
	msgs chan M
	done chan struct{} // closed once the process has exited, with exit set
	exit error
	log  string
}

// startAgent starts `bin bench sub` in namespace ns (empty: this one)
// and writes spec to it, its standard error to the log file name.log in
// dir.
func startAgent[M agentMsg](ctx context.Context, st *testbed.State, bin, sub, ns, dir, name string, spec any) (*agentProc[M], error) {
	a := &agentProc[M]{name: name, msgs: make(chan M, 64), done: make(chan struct{}), log: filepath.Join(dir, name+".log")}
	logf, err := os.Create(a.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	if ns != "" {
		a.cmd = exec.CommandContext(ctx, "ip", "netns", "exec", ns, bin, "bench", sub)
	} else {
		a.cmd = exec.CommandContext(ctx, bin, "bench", sub)
	}
	a.cmd.Stderr = logf
	a.cmd.Env = os.Environ()
	if _, set := os.LookupEnv("GOMAXPROCS"); !set && st.GoMaxProcs > 0 {
		a.cmd.Env = append(a.cmd.Env, "GOMAXPROCS="+strconv.Itoa(st.GoMaxProcs))
	}
	if a.in, err = a.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := a.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := a.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the %s: %w", name, err)
	}
	go func() {
		lines := bufio.NewScanner(out)
		lines.Buffer(make([]byte, 64<<10), 4<<20)
		for lines.Scan() {
			var m M
			if err := json.Unmarshal(lines.Bytes(), &m); err == nil {
				a.msgs <- m
			}
		}
		close(a.msgs)
		a.exit = a.cmd.Wait()
		close(a.done)
	}()
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	if _, err := a.in.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("the %s: %w", a.name, err)
	}
	return a, nil
}

// send writes a control line to the agent.
func (a *agentProc[M]) send(line string) error {
	if _, err := io.WriteString(a.in, line+"\n"); err != nil {
		return fmt.Errorf("the %s: %w", a.name, err)
	}
	return nil
}

// next returns the agent's next final message, waiting up to wait; a
// message with progress only goes to progress (if not nil).
func (a *agentProc[M]) next(ctx context.Context, wait time.Duration, progress func(M)) (M, error) {
	var none M
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case m, ok := <-a.msgs:
			if !ok {
				<-a.done
				return none, fmt.Errorf("the %s ended: %v\n%s", a.name, a.exit, tail(readFile(a.log), 10))
			}
			if !m.final() {
				if progress != nil {
					progress(m)
				}
				continue
			}
			return m, nil
		case <-t.C:
			return none, fmt.Errorf("the %s said nothing for %v\n%s", a.name, wait, tail(readFile(a.log), 10))
		case <-ctx.Done():
			return none, ctx.Err()
		}
	}
}

// stop closes the agent's input, which ends it, and waits for it
// (killing it after 10 s).
func (a *agentProc[M]) stop() error {
	a.in.Close()
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case _, ok := <-a.msgs:
			if ok {
				continue
			}
			<-a.done
			if a.exit != nil {
				return fmt.Errorf("the %s: %w\n%s", a.name, a.exit, tail(readFile(a.log), 10))
			}
			return nil
		case <-t.C:
			_ = a.cmd.Process.Kill()
			t.Reset(time.Hour)
		}
	}
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// agentSecurity is an agent's endpoint options: sealed under the
// credential in file path, or unsealed when path is empty (a testbed
// without credentials).
func agentSecurity(path string) (endpoint.Options, error) {
	if path == "" {
		return endpoint.Options{}, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return endpoint.Options{}, err
	}
	id, err := secure.ParseIdentity(b)
	clear(b)
	if err != nil {
		return endpoint.Options{}, fmt.Errorf("credential %s: %w", path, err)
	}
	return endpoint.Options{Security: id}, nil
}
