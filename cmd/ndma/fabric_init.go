package main

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ndma/ndma/secure"
)

// The files ndma fabric init writes in its directory.
const (
	fabricSecretFile = "authority.key" // the authority's secret, which issues credentials
	fabricTokenFile  = "token"         // the fabric token, which every process gets
)

// maxInitProcesses bounds each count of processes fabric init issues
// credentials for (each is a key pair and a file).
const maxInitProcesses = 65535

// fabricInit is what ndma fabric init is asked to write.
type fabricInit struct {
	dir                      string
	memory, storage, clients int
	job                      string
	ranks                    int
	switchAddr               string
	force                    bool
}

// initCredential is one credential fabric init wrote.
type initCredential struct {
	Role string `json:"role"`
	Name string `json:"name"`
	File string `json:"file"`
}

// initCommand is one command fabric init prints: the process it starts
// and its command line.
type initCommand struct {
	Process string `json:"process"`
	Command string `json:"command"`
}

// initResult is what fabric init wrote and the commands that use it (its
// --json output).
type initResult struct {
	Dir         string           `json:"dir"`
	Switch      string           `json:"switch"`
	Secret      string           `json:"authority_secret"`
	Token       string           `json:"token_file"`
	Credentials []initCredential `json:"credentials"`
	Commands    []initCommand    `json:"commands"`
}

// validate checks the counts, the job and the switch's address.
func (f *fabricInit) validate() error {
	for _, c := range []struct {
		flag string
		n    int
	}{{"--memory-nodes", f.memory}, {"--storage-nodes", f.storage}, {"--clients", f.clients}} {
		if c.n < 0 || c.n > maxInitProcesses {
			return fmt.Errorf("%s %d: want 0 to %d", c.flag, c.n, maxInitProcesses)
		}
	}
	switch {
	case f.job == "" && f.ranks != 0:
		return errors.New("--ranks: only with --job, the job the ranks' credentials bind them to")
	case f.job != "" && (f.ranks < 1 || f.ranks > maxInitProcesses):
		return fmt.Errorf("--ranks %d: want 1 to %d ranks of job %q", f.ranks, maxInitProcesses, f.job)
	case f.job != "":
		if err := secure.CheckName(secure.RoleMember, f.job+"/0"); err != nil || strings.Contains(f.job, "/") {
			return fmt.Errorf("--job %q: not a job name its ranks' credentials (JOB/RANK) can bind: %v", f.job, err)
		}
		if n := len(f.job) + 1 + len(strconv.Itoa(f.ranks-1)); n > secure.MaxNameLen {
			return fmt.Errorf("--job %q: its ranks' names (JOB/RANK) would be %d bytes, above %d", f.job, n, secure.MaxNameLen)
		}
	}
	if _, _, err := net.SplitHostPort(f.switchAddr); err != nil {
		return fmt.Errorf("--switch-addr %q: want host:port (%v)", f.switchAddr, err)
	}
	return nil
}

// run writes the directory: the authority's secret, the token and every
// credential, each mode 0600, in a directory of mode 0700.
func (f *fabricInit) run() (*initResult, error) {
	if err := f.validate(); err != nil {
		return nil, err
	}
	if f.dir == "" {
		return nil, errors.New("give the directory to write the fabric's secrets to")
	}
	switch err := os.Mkdir(f.dir, 0o700); {
	case errors.Is(err, fs.ErrExist) && !f.force:
		return nil, fmt.Errorf("%s exists: keeping it (--force writes a new fabric's secrets in it, replacing its files)", f.dir)
	case errors.Is(err, fs.ErrExist):
		if fi, err := os.Stat(f.dir); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("%s exists and is not a directory", f.dir)
		}
	case err != nil:
		return nil, err
	}
	if err := os.Chmod(f.dir, 0o700); err != nil { // the umask may have taken the owner's bits
		return nil, err
	}
	res := &initResult{Dir: f.dir, Switch: f.switchAddr,
		Secret: filepath.Join(f.dir, fabricSecretFile), Token: filepath.Join(f.dir, fabricTokenFile)}
	// Two independent draws: the authority's secret issues credentials
	// and stays with whoever holds this directory; the token goes to
	// every process, and must never be the secret.
	secret, err := secure.NewAuthoritySecret(rand.Reader)
	if err != nil {
		return nil, err
	}
	defer clear(secret)
	if err := writeSecret(res.Secret, secret, f.force); err != nil {
		return nil, err
	}
	if err := writeSecret(res.Token, append(secure.NewToken(), '\n'), f.force); err != nil {
		return nil, err
	}
	a, err := secure.ParseAuthoritySecret(secret)
	if err != nil {
		return nil, err
	}
	// Valid from now (less the clock skew allowed) for the period
	// credential issue gives by default.
	from := time.Now().Add(-secure.ClockSkew).Truncate(time.Second)
	issue := func(role secure.Role, name, file string) (string, error) {
		path := filepath.Join(f.dir, file)
		id, err := a.IssueBetween(role, name, from, from.Add(defaultValidity), rand.Reader)
		if err != nil {
			return "", fmt.Errorf("credential %q: %w", name, err)
		}
		b, err := id.Encode()
		if err != nil {
			return "", err
		}
		err = writeSecret(path, b, f.force)
		clear(b)
		if err != nil {
			return "", err
		}
		res.Credentials = append(res.Credentials, initCredential{Role: secure.RoleName(role), Name: name, File: path})
		return path, nil
	}
	tokenFlag := "--token-file " + shellQuote(res.Token)
	command := func(process string, args ...string) {
		res.Commands = append(res.Commands, initCommand{Process: process, Command: strings.Join(args, " ")})
	}
	host, _, _ := net.SplitHostPort(f.switchAddr)
	local := net.JoinHostPort(host, "0") // every process, as printed, on the switch's host

	p, err := issue(secure.RoleSwitch, "switch", "switch.cred")
	if err != nil {
		return nil, err
	}
	command("switch", "ndma switch --listen", f.switchAddr, tokenFlag, "--credential", shellQuote(p))
	for i := range f.memory {
		name := "memory-" + strconv.Itoa(i)
		if p, err = issue(secure.RoleMemoryNode, name, name+".cred"); err != nil {
			return nil, err
		}
		command(name, "ndma memd --listen", local, "--size 64MiB --switch", f.switchAddr, tokenFlag, "--credential", shellQuote(p))
	}
	for i := range f.storage {
		// Storage nodes share the service scope stor (their write
		// groups admit that scope), each under a name of its own.
		name := "storage-" + strconv.Itoa(i)
		if p, err = issue(secure.RoleMember, "stor/"+name, name+".cred"); err != nil {
			return nil, err
		}
		command(name, "ndma stord --dir", shellQuote(filepath.Join(f.dir, name+".data")), "--id", strconv.Itoa(i), "--listen", local,
			"--switch", f.switchAddr, tokenFlag, "--credential", shellQuote(p))
	}
	// A volume's writer joins its write groups, which only members may:
	// with storage nodes the clients are members, else clients.
	clientRole := secure.RoleClient
	if f.storage > 0 {
		clientRole = secure.RoleMember
	}
	for i := range f.clients {
		name := "client-" + strconv.Itoa(i)
		if p, err = issue(clientRole, name, name+".cred"); err != nil {
			return nil, err
		}
		common := []string{"--switch", f.switchAddr, tokenFlag, "--credential", shellQuote(p)}
		if f.memory > 0 {
			command(name, append([]string{"ndma pool create --size 1MiB"}, common...)...)
		}
		if f.storage > 0 {
			command(name, append([]string{"ndma vol create vol0 --size 64MiB --replicas 1"}, common...)...)
		}
		if f.memory == 0 && f.storage == 0 {
			command(name, append([]string{"ndma stat --interval 0"}, common...)...)
		}
	}
	if f.job != "" {
		if err := os.Mkdir(filepath.Join(f.dir, f.job), 0o700); err != nil && !(f.force && errors.Is(err, fs.ErrExist)) {
			return nil, err
		}
		for r := range f.ranks {
			name := f.job + "/" + strconv.Itoa(r)
			if _, err = issue(secure.RoleMember, name, filepath.Join(f.job, strconv.Itoa(r)+".cred")); err != nil {
				return nil, err
			}
		}
		command("ranks", "NDMA_SWITCH="+f.switchAddr, "NDMA_JOB="+shellQuote(f.job), "NDMA_TOKEN=$(cat "+shellQuote(res.Token)+")",
			"NDMA_CREDENTIAL="+shellQuote(f.dir), "mpirun -np", strconv.Itoa(f.ranks), "ndma bench coll --op allreduce")
	}
	return res, nil
}

// shellQuote returns s as one shell word: itself when it holds only
// characters no shell treats specially, else in single quotes.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:@%+=,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// printInit writes what fabric init wrote and the commands to start each
// process.
func printInit(w io.Writer, res *initResult, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(res)
	}
	fmt.Fprintf(w, "fabric written to %s (mode 0700, every file 0600):\n", res.Dir)
	fmt.Fprintf(w, "  %-28s the authority's secret: it issues credentials (ndma credential issue --secret-file); keep it with the administrator\n", res.Secret)
	fmt.Fprintf(w, "  %-28s the fabric token, which every process gets\n", res.Token)
	for _, c := range res.Credentials {
		fmt.Fprintf(w, "  %-28s %s %q\n", c.File, c.Role, c.Name)
	}
	fmt.Fprintf(w, "\nstart each process (every datagram sealed), the switch first:\n")
	for _, c := range res.Commands {
		fmt.Fprintf(w, "  %s\n", c.Command)
	}
	return nil
}

func newFabricCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fabric",
		Short: "Set up a sealed fabric: its secrets and every process's credential in one directory",
	}
	var f fabricInit
	var asJSON bool
	initCmd := &cobra.Command{
		Use:   "init DIR",
		Short: "Write a new fabric's authority secret, token and credentials to DIR, and print the commands that start it",
		Long: `init makes a new directory DIR (mode 0700) and writes in it, each file
readable by its owner alone (mode 0600):

  authority.key        the authority's secret, which issues credentials
                       (ndma credential issue --secret-file DIR/authority.key)
  token                the fabric token, which every process gets (--token-file)
  switch.cred          the switch's credential (role switch, name "switch")
  memory-I.cred        --memory-nodes memory nodes' (role memory-node)
  storage-I.cred       --storage-nodes storage nodes' (role member)
  client-I.cred        --clients clients' (role client; member when there are
                       storage nodes, as a volume's writer joins groups)
  JOB/RANK.cred        with --job JOB --ranks N, each rank's (role member,
                       named JOB/RANK: it binds its holder to that rank of
                       that job)

It then prints the commands that start each process with its credential,
every one on the switch's host (--switch-addr; change --listen for other
hosts). Every process of the fabric seals every datagram; a rank started
by a launcher finds its own credential with NDMA_CREDENTIAL=DIR and
NDMA_JOB=JOB. Give each machine only the files of its processes and the
token; the authority's secret stays with whoever issues credentials.

An existing DIR is left alone unless --force, which writes a new
fabric's secrets in it (replacing its files: credentials of the old
fabric stop working).`,
		Example: `  ndma fabric init fab
  ndma fabric init fab --memory-nodes 2 --clients 2 --switch-addr 10.0.0.1:7471
  ndma fabric init fab --storage-nodes 3 --job train --ranks 8 --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f.dir = args[0]
			res, err := f.run()
			if err != nil {
				return err
			}
			return printInit(cmd.OutOrStdout(), res, asJSON)
		},
	}
	fl := initCmd.Flags()
	fl.IntVar(&f.memory, "memory-nodes", 1, "memory nodes to issue credentials for (ndma memd)")
	fl.IntVar(&f.storage, "storage-nodes", 0, "storage nodes to issue credentials for (ndma stord)")
	fl.IntVar(&f.clients, "clients", 1, "clients to issue credentials for (ndma pool, stat, vol)")
	fl.StringVar(&f.job, "job", "", "`name` of a job whose ranks to issue credentials for (with --ranks)")
	fl.IntVar(&f.ranks, "ranks", 0, "number of ranks of --job")
	fl.StringVar(&f.switchAddr, "switch-addr", "127.0.0.1:7471", "`address` (host:port) the switch listens on, for the commands printed")
	fl.BoolVar(&f.force, "force", false, "write into an existing DIR, replacing its files")
	fl.BoolVar(&asJSON, "json", false, "print what was written and the commands as JSON")
	cmd.AddCommand(initCmd)
	return cmd
}

func init() { rootCmd.AddCommand(newFabricCmd()) }
