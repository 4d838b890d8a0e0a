package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/ndma/ndma/stor"
	"github.com/ndma/ndma/stor/volfs"
)

const (
	// volUnmountTimeout bounds the plain unmount at shutdown; a mount
	// still busy then is detached lazily.
	volUnmountTimeout = 3 * time.Second
	// volCloseTimeout bounds the flush and lease release at shutdown.
	volCloseTimeout = 10 * time.Second
)

// volMountFlags are the flags of `ndma vol mount`.
type volMountFlags struct {
	readOnly, allowOther bool
	lease                time.Duration
	readyFile            string
	log                  logFlags
}

func newVolMountCmd(vf *volFlags) *cobra.Command {
	var f volMountFlags
	cmd := &cobra.Command{
		Use:   "mount NAME DIR",
		Short: "Present a volume as the file DIR/NAME through FUSE (for losetup, mkfs and mount)",
		Long: `mount opens volume NAME (for writing, holding its lease, unless
--read-only: a volume another client writes is refused) and presents it at
DIR as one file, DIR/NAME, of the volume's size, until SIGINT or SIGTERM.
fsync(2) on the file flushes the volume: every live replica makes the
writes durable. The file cannot be removed, renamed or resized, and
nothing else can be created in DIR (EPERM).

The kernel here has no NBD or ublk, so a block device on a volume is a
loop device on that file:

  rm -f /run/ndma-data.ready
  ndma vol mount data /mnt/ndma --ready-file /run/ndma-data.ready & mnt=$!
  while [ ! -e /run/ndma-data.ready ]; do kill -0 $mnt || exit 1; sleep 0.1; done
  dev=$(losetup --find --show /mnt/ndma/data)
  mkfs.ext4 $dev && mount $dev /mnt/data
  ...
  umount /mnt/data && losetup -d $dev
  kill $mnt && wait $mnt

Readiness: once the file is reachable, --ready-file PATH is written
(atomically, holding the file's path and a newline), and with
$NOTIFY_SOCKET set (systemd Type=notify) READY=1 is sent there. A PATH an
earlier run left is removed at the start, but a script that waits for it
should remove it itself before starting the mount, and stop waiting when
the mount has exited (a refused lease, a missing volume). At shutdown
PATH is removed first and STOPPING=1 sent.

SIGINT or SIGTERM always ends the mount and gives the lease back: the
file is unmounted; if it is still busy after 3s (a loop device still
attached) the mount is detached lazily, which the log says, and the loop
device's I/O fails from then on. Then the volume is flushed and closed,
giving up after 10s (the lease then runs out by itself, --lease). A dead
mount that a crashed or killed mount left at DIR ("Transport endpoint is
not connected") is unmounted before mounting.

The log (stderr; --log-level, --json-logs) has the mount, every failed
read, write and fsync of the volume (at most one line a second of each,
counting the rest), what the storage client reports about the volume
while it is open, and the shutdown.

Needs /dev/fuse and root (or fusermount3 from Debian's fuse3).`,
		Example: `  ndma vol mount data /mnt/ndma --ready-file /run/ndma-data.ready
  ndma vol mount data /mnt/ndma --read-only --json-logs`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error { return runVolMount(cmd, vf, &f, args[0], args[1]) },
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.readOnly, "read-only", false, "present the volume read-only (takes no lease)")
	fl.BoolVar(&f.allowOther, "allow-other", false, "let users other than the mounting one reach the file")
	fl.DurationVar(&f.lease, "lease", stor.DefaultLease, "write lease lifetime: another client may write the volume this long after this process dies")
	fl.StringVar(&f.readyFile, "ready-file", "", "write the file's path to `file` once the mount is ready; removed at shutdown")
	f.log.register(fl)
	return cmd
}

func runVolMount(cmd *cobra.Command, vf *volFlags, f *volMountFlags, name, dir string) error {
	if f.lease <= 0 || f.lease > stor.MaxLease {
		return fmt.Errorf("--lease %v: want a positive duration up to %v", f.lease, stor.MaxLease)
	}
	logger, err := f.log.logger(cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return err
	}
	if f.readyFile != "" {
		// A script waits for this file: one a killed run left must not
		// say ready before this run is.
		if err := os.Remove(f.readyFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("--ready-file: %w", err)
		}
	}
	// A signal from here on shuts down in order (once the mount is up,
	// which it then ends at once), not half way through.
	return runUntilSignal(cmd, func(sigctx context.Context) error { return volMount(sigctx, cmd, vf, f, logger, name, dir) })
}

// volMount mounts volume name at dir and serves it until sigctx ends or
// the mount is unmounted from outside, then shuts down.
func volMount(sigctx context.Context, cmd *cobra.Command, vf *volFlags, f *volMountFlags, logger *slog.Logger, name, dir string) error {
	c, ctx, done, err := vf.open(cmd)
	if err != nil {
		return err
	}
	defer done()
	v, err := c.Open(ctx, name, stor.OpenOptions{Write: !f.readOnly, Lease: f.lease, Logger: logger})
	if err != nil {
		return err
	}
	m, err := volfs.Mount(dir, v, volfs.Options{ReadOnly: f.readOnly, AllowOther: f.allowOther, Logger: logger})
	if err != nil {
		return errors.Join(err, closeVolume(v, logger))
	}
	if f.readyFile != "" {
		if err := writeReadyFile(f.readyFile, m.Path()); err != nil {
			_, uerr := m.Unmount(volUnmountTimeout)
			return errors.Join(fmt.Errorf("--ready-file: %w", err), uerr, closeVolume(v, logger))
		}
	}
	if err := sdNotify(os.Getenv, "READY=1"); err != nil {
		logger.Warn("telling the service manager the mount is ready", "err", err)
	}
	mode := "read-write"
	if f.readOnly {
		mode = "read-only"
	}
	fmt.Fprintf(cmd.OutOrStdout(), "volume %s at %s (%s, %s); Ctrl-C or SIGTERM unmounts\n", name, m.Path(), sizeString(uint64(v.Size())), mode)
	logger.Info("mounted", "volume", name, "file", m.Path(), "size", v.Size(), "mode", mode)
	select {
	case <-sigctx.Done():
		logger.Info("unmounting", "dir", dir)
	case <-m.Done():
		logger.Warn("unmounted from outside", "dir", dir)
	}
	_ = sdNotify(os.Getenv, "STOPPING=1")
	var errs []error
	if f.readyFile != "" {
		if err := os.Remove(f.readyFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("--ready-file: %w", err))
		}
	}
	if _, err := m.Unmount(volUnmountTimeout); err != nil {
		// This process's exit ends the mount (a dead one, which the next
		// mount at DIR cleans); the lease is given back still.
		errs = append(errs, err)
	}
	errs = append(errs, closeVolume(v, logger))
	return errors.Join(errs...)
}

// closeVolume flushes and closes v, giving the write lease back, within
// volCloseTimeout: a volume whose replicas are gone must not keep the
// process (and the lease it renews) alive.
func closeVolume(v *stor.Volume, logger *slog.Logger) error {
	errc := make(chan error, 1)
	go func() { errc <- v.Close() }()
	select {
	case err := <-errc:
		if err != nil {
			return fmt.Errorf("volume %s: flush at close: %w (writes since the last successful fsync may be lost)", v.Descriptor().Name, err)
		}
		logger.Info("volume flushed and closed", "volume", v.Descriptor().Name)
		return nil
	case <-time.After(volCloseTimeout):
		return fmt.Errorf("volume %s: flush and close did not finish in %v; exiting without: the write lease runs out by itself", v.Descriptor().Name, volCloseTimeout)
	}
}

// writeReadyFile writes file's path and a newline to path, atomically: a
// reader sees no file or all of it.
func writeReadyFile(path, file string) error {
	r, err := replace(path, 0o644)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(r, file); err != nil {
		r.Abort()
		return err
	}
	return r.Commit()
}
