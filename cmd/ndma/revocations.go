package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/ndma/ndma/secure"
)

// revocationsEnv names the environment variable that holds the path of
// the fabric's revocation list, the default of --revocations.
const revocationsEnv = "NDMA_REVOCATIONS"

// revocationsReload is how often a process looks whether its revocation
// list file changed. With the security layer's sweep (at most a minute
// apart), a credential revoked in the file loses its sessions within
// revocationsReload plus a minute.
var revocationsReload = 10 * time.Second

// watchRevocations gives id a Policy holding the revocation list at path
// (which must exist and verify against id's authority) and keeps it
// current: every revocationsReload until ctx ends, a changed file is
// read again and loaded; a file that cannot be read, does not verify or
// is older than the list held (a rollback) is logged at WARN and the
// list held stays.
func watchRevocations(ctx context.Context, id *secure.Identity, path string, log *slog.Logger) error {
	rl, err := readRevocations(path)
	if err != nil {
		return err
	}
	pol := secure.NewPolicy(id.Authority)
	if err := pol.Load(rl); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	id.Policy = pol
	log.Info("revocation list loaded", "file", path, "number", rl.Number, "revoked", rl.Len())
	last, _ := os.ReadFile(path)
	go func() {
		t := time.NewTicker(revocationsReload)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			b, err := os.ReadFile(path)
			if err != nil {
				log.Warn("revocation list unreadable: the one held stays", "file", path, "err", err)
				continue
			}
			if bytes.Equal(b, last) {
				continue
			}
			last = b
			rl, err := readRevocations(path)
			if err == nil {
				err = pol.Load(rl)
			}
			if err != nil {
				log.Warn("revocation list refused: the one held stays", "file", path, "err", err)
				continue
			}
			log.Info("revocation list loaded", "file", path, "number", rl.Number, "revoked", rl.Len())
		}
	}()
	return nil
}

// watch loads the revocation list of --revocations, else of the file
// $NDMA_REVOCATIONS names as getenv reports it, into id's Policy and keeps
// it current until cmd's context ends (watchRevocations). Without either,
// or without id, it does nothing.
func (c *credentialFlag) watch(cmd *cobra.Command, getenv func(string) string, id *secure.Identity, log *slog.Logger) error {
	path, flag := c.revocations, "--revocations"
	if c.fs == nil || !c.fs.Changed("revocations") {
		path, flag = getenv(revocationsEnv), "$"+revocationsEnv
	}
	if path == "" {
		return nil
	}
	if id == nil {
		return fmt.Errorf("%s: a revocation list needs a credential (--credential)", flag)
	}
	if err := watchRevocations(cmdContext(cmd), id, path, log); err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	}
	return nil
}
