package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/ndma/ndma/bench"
	"github.com/ndma/ndma/daemon/memd"
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/pool"
)

// poolChunk is the bytes one ReadAt or WriteAt of put and get moves; the
// progress bar advances per chunk.
const poolChunk = 4 << 20

// byteBar draws a byte progress bar on stderr when it is a terminal.
func byteBar(cmd *cobra.Command, total int64, what string) *progressbar.ProgressBar {
	f, ok := cmd.ErrOrStderr().(*os.File)
	if !ok || !isTerminal(f) {
		return nil
	}
	return progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(f),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowBytes(true),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionThrottle(100*time.Millisecond),
	)
}

// openRegion opens region id with the key string through a pool client.
func (p *poolFlags) openRegion(cmd *cobra.Command, id uint32, key string) (*pool.Client, *pool.Region, func(), error) {
	var k uint64
	if id != 0 {
		var err error
		if k, err = parseKeyFlag(key); err != nil {
			return nil, nil, nil, err
		}
	}
	ep, opts, ctx, cancel, err := p.client(cmd)
	if err != nil {
		return nil, nil, nil, err
	}
	defer cancel()
	c, err := pool.New(ep, p.sw, pool.Options{Fabric: opts})
	if err != nil {
		ep.Close()
		return nil, nil, nil, err
	}
	if id == 0 {
		return c, nil, func() { ep.Close() }, nil
	}
	r, err := c.Open(ctx, id, k)
	if err != nil {
		ep.Close()
		return nil, nil, nil, err
	}
	return c, r, func() { ep.Close() }, nil
}

func parseRegionID(s string) (uint32, error) {
	id, err := strconv.ParseUint(s, 10, 32)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("region %q: want a region id (a positive number)", s)
	}
	return uint32(id), nil
}

func newPoolPutCmd(pf *poolFlags) *cobra.Command {
	var (
		region, key, offset, stripe, idFile string
		replicas                            int
	)
	cmd := &cobra.Command{
		Use:   "put FILE",
		Short: "Write a file into a pool region (a new one sized to the file unless --region is given)",
		Long: `put writes FILE into a pool region. Without --region it first creates a
region sized to the file and prints its id and key (and writes them to
--id-file) before any data moves; if the put then fails or is interrupted
(Ctrl-C, SIGTERM), it frees that region, or, when the switch cannot be
reached, says which region and key remain and how to remove them. A put
into an existing region (--region) never frees it. With --json a new
region's line (as pool create --json prints it) comes first, then the
transfer's.`,
		Example: `  ndma pool put model.bin                       # new region, prints its id and key
  ndma pool put model.bin --id-file model.region  # also writes "ID KEY" to model.region
  ndma pool put shard.bin --region 3 --key 0x1f2e... --offset 64MiB`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			stop := interruptible(cmd)
			defer stop()
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			st, err := f.Stat()
			if err != nil {
				return err
			}
			size := st.Size()
			if !st.Mode().IsRegular() || size == 0 {
				return fmt.Errorf("%s: want a non-empty regular file", args[0])
			}
			off, err := memnode.ParseSize(offset)
			if err != nil || off < 0 {
				return fmt.Errorf("--offset %q: want a size (%v)", offset, err)
			}
			var id uint32
			if region != "" {
				if id, err = parseRegionID(region); err != nil {
					return err
				}
				if idFile != "" {
					return errors.New("--id-file is for a new region: it cannot go with --region")
				}
			} else if key != "" || off != 0 {
				return errors.New("--key and --offset need --region")
			}
			sp, err := memnode.ParseSize(stripe)
			if err != nil || sp <= 0 {
				return fmt.Errorf("--stripe %q: want a positive size (%v)", stripe, err)
			}
			c, r, closeFn, err := pf.openRegion(cmd, id, key)
			if err != nil {
				return err
			}
			defer closeFn()
			created := r == nil
			if created {
				// Ctrl-C does not cancel the create: the switch may have
				// made the region already, and only its answer carries the
				// key that frees it. The transfer below sees the interrupt
				// before its first byte and frees the region.
				ctx, cancel := context.WithTimeout(context.WithoutCancel(cmdContext(cmd)), pf.timeout)
				r, err = c.Alloc(ctx, uint64(size), pool.AllocOptions{Stripe: uint64(sp), Replicas: replicas})
				cancel()
				if err != nil {
					return err
				}
				if err := announceRegion(cmd, pf, r, idFile); err != nil {
					stop()
					return abandonRegion(cmd, pf, c, r, idFile, err)
				}
			}
			if off > r.Size() || size > r.Size()-off {
				return fmt.Errorf("%s (%d bytes) at offset %d does not fit region %d (%d bytes)", args[0], size, off, r.ID(), r.Size())
			}
			start := time.Now()
			degraded := false
			ctx := cmdContext(cmd)
			done, err := copyChunks(ctx, byteBar(cmd, size, "put"), size, func(ctx context.Context, buf []byte, at int64) error {
				if _, err := io.ReadFull(f, buf); err != nil {
					return err
				}
				_, err := r.WriteAtContext(ctx, buf, off+at)
				if errors.Is(err, pool.ErrDegraded) {
					degraded, err = true, nil // written, to fewer copies
				}
				return err
			})
			if err != nil {
				err = interrupted(ctx, err)
			}
			stop() // from here a second Ctrl-C ends the process, even while freeing
			if err != nil {
				if created {
					return abandonRegion(cmd, pf, c, r, idFile, err)
				}
				return fmt.Errorf("put into region %d stopped after %d of %d bytes: %w", r.ID(), done, size, err)
			}
			if degraded {
				fmt.Fprintln(cmd.ErrOrStderr(), "ndma: warning: written with a copy missing (a memory node is down); the region is degraded until it is rebuilt")
			}
			return printTransfer(cmd, pf, r, created, size, time.Since(start))
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&region, "region", "", "region `id` to write into (default: create one sized to the file)")
	fl.StringVar(&key, "key", "", "the region's key (with --region)")
	fl.StringVar(&offset, "offset", "0", "pool offset to write at (with --region)")
	fl.StringVar(&stripe, "stripe", "64KiB", "stripe of a new region")
	fl.IntVar(&replicas, "replicas", 1, "copies of a new region, 1 or 2")
	fl.StringVar(&idFile, "id-file", "", "write a new region's id and key to `file` (one line: ID KEY, mode 0600) before moving data; removed again if put frees the region")
	return cmd
}

// announceRegion makes the region put just created known before any data
// moves, so that an interrupted put never leaves a region nobody can free:
// it writes "ID KEY" to idFile (when given) and prints the id, key and
// shape (with --json, pool create's JSON line).
func announceRegion(cmd *cobra.Command, pf *poolFlags, r *pool.Region, idFile string) error {
	key := memd.FormatKey(r.Key())
	if idFile != "" {
		f, err := replace(idFile, 0o600)
		if err != nil {
			return fmt.Errorf("--id-file: %w", err)
		}
		_, err = fmt.Fprintf(f, "%d %s\n", r.ID(), key)
		if err == nil {
			err = f.Commit()
		}
		f.Abort()
		if err != nil {
			return fmt.Errorf("--id-file: %w", err)
		}
	}
	out := cmd.OutOrStdout()
	if pf.json {
		return json.NewEncoder(out).Encode(poolRegionJSON(r.Spec(), key))
	}
	_, err := fmt.Fprintf(out, "region  %d\nkey     %s\nshape   %s\n", r.ID(), key, poolShape(r.Spec()))
	return err
}

// abandonRegion frees region r, which this put created, after the put
// failed with cause (best effort, bounded by --timeout), and returns cause
// with what became of the region: freed (and idFile removed), or still
// allocated, with its key and the command that removes it.
func abandonRegion(cmd *cobra.Command, pf *poolFlags, c *pool.Client, r *pool.Region, idFile string, cause error) error {
	key := memd.FormatKey(r.Key())
	parent := cmdContext(cmd)
	if errors.Is(cause, errInterrupted) {
		fmt.Fprintf(cmd.ErrOrStderr(), "ndma: freeing region %d, created by this put (Ctrl-C again to leave it)\n", r.ID())
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), pf.timeout)
	defer cancel()
	if err := c.Free(ctx, r); err != nil {
		return fmt.Errorf("%w; region %d (key %s), created by this put, could not be freed (%v): remove it with ndma pool rm %d --key %s --switch %s",
			cause, r.ID(), key, err, r.ID(), key, pf.sw)
	}
	if idFile != "" {
		if err := os.Remove(idFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w; region %d, created by this put, is freed (removing --id-file: %v)", cause, r.ID(), err)
		}
	}
	return fmt.Errorf("%w; region %d, created by this put, is freed", cause, r.ID())
}

// errInterrupted is what a transfer stopped by Ctrl-C, SIGTERM or its
// context's end fails with.
var errInterrupted = errors.New("interrupted")

// interrupted returns errInterrupted, with the cause (the signal), for a
// transfer's err when ctx has ended, since the transfer then reports only
// a canceled context; otherwise err.
func interrupted(ctx context.Context, err error) error {
	if ctx.Err() == nil {
		return err
	}
	return fmt.Errorf("%w (%w)", errInterrupted, context.Cause(ctx))
}

// interruptible makes SIGINT and SIGTERM cancel cmd's context instead of
// ending the process, until stop is called, so that the command can clean
// up after itself.
func interruptible(cmd *cobra.Command) (stop func()) {
	ctx, stop := signal.NotifyContext(cmdContext(cmd), os.Interrupt, syscall.SIGTERM)
	cmd.SetContext(ctx)
	return stop
}

func newPoolGetCmd(pf *poolFlags) *cobra.Command {
	var key, offset, length, output string
	cmd := &cobra.Command{
		Use:     "get REGION --key KEY",
		Short:   "Read a pool region (or part of it) to a file or stdout",
		Example: `  ndma pool get 3 --key 0x1f2e... -o model.bin`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			stop := interruptible(cmd)
			defer stop()
			id, err := parseRegionID(args[0])
			if err != nil {
				return err
			}
			off, err := memnode.ParseSize(offset)
			if err != nil || off < 0 {
				return fmt.Errorf("--offset %q: want a size (%v)", offset, err)
			}
			_, r, closeFn, err := pf.openRegion(cmd, id, key)
			if err != nil {
				return err
			}
			defer closeFn()
			if off > r.Size() {
				return fmt.Errorf("--offset %d beyond region %d's %d bytes", off, id, r.Size())
			}
			n := r.Size() - off
			if length != "" {
				l, err := memnode.ParseSize(length)
				switch {
				case err != nil || l < 0:
					return fmt.Errorf("--length %q: want a size in bytes, such as 4096 or 4KiB", length)
				case l > n:
					return fmt.Errorf("--length %d: region %d holds %d bytes, %d of them from --offset %d", l, id, r.Size(), n, off)
				}
				n = l
			}
			var w io.Writer = cmd.OutOrStdout()
			var file *replacement
			if output != "" && output != "-" {
				if file, err = replace(output, 0); err != nil {
					return fmt.Errorf("-o: %w", err)
				}
				defer file.Abort()
				w = file
			}
			start := time.Now()
			ctx := cmdContext(cmd)
			if _, err := copyChunks(ctx, byteBar(cmd, n, "get"), n, func(ctx context.Context, buf []byte, at int64) error {
				if _, err := r.ReadAtContext(ctx, buf, off+at); err != nil {
					return err
				}
				_, err := w.Write(buf)
				return err
			}); err != nil {
				if file != nil && !file.inPlace {
					return fmt.Errorf("%w (%s left as it was)", interrupted(ctx, err), output)
				}
				return interrupted(ctx, err)
			}
			if file == nil {
				return nil
			}
			if err := file.Commit(); err != nil {
				return fmt.Errorf("-o: %w", err)
			}
			return printTransfer(cmd, pf, r, false, n, time.Since(start))
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&key, "key", "", "the region's key (required)")
	fl.StringVar(&offset, "offset", "0", "pool offset to read from")
	fl.StringVar(&length, "length", "", "bytes to read (default: to the region's end)")
	fl.StringVarP(&output, "output", "o", "", "file to write (default stdout); written to a temporary file beside it and renamed over it only once complete, so a failed get leaves it as it was")
	_ = cmd.MarkFlagRequired("key")
	return cmd
}

// copyChunks calls do for each poolChunk of n bytes in order, until one
// fails or ctx ends, and returns the bytes done.
func copyChunks(ctx context.Context, bar *progressbar.ProgressBar, n int64, do func(ctx context.Context, buf []byte, at int64) error) (int64, error) {
	buf := make([]byte, min(n, poolChunk))
	for at := int64(0); at < n; {
		if err := ctx.Err(); err != nil {
			return at, err
		}
		b := buf[:min(int64(len(buf)), n-at)]
		if err := do(ctx, b, at); err != nil {
			return at, err
		}
		at += int64(len(b))
		if bar != nil {
			_ = bar.Set64(at)
		}
	}
	if bar != nil {
		_ = bar.Finish()
	}
	return n, nil
}

// printTransfer prints what a put or get moved. A put's new region was
// announced before the transfer; its JSON line repeats the key.
func printTransfer(cmd *cobra.Command, pf *poolFlags, r *pool.Region, created bool, n int64, d time.Duration) error {
	out := cmd.OutOrStdout()
	rate := float64(n) * 8 / d.Seconds() / 1e6
	if pf.json {
		m := map[string]any{"region": r.ID(), "bytes": n, "seconds": d.Seconds(), "mbit_per_s": rate}
		if created {
			m["key"] = memd.FormatKey(r.Key())
		}
		return json.NewEncoder(out).Encode(m)
	}
	fmt.Fprintf(out, "%s in %v (%.1f Mbit/s)\n", sizeString(uint64(n)), d.Round(time.Millisecond), rate)
	return nil
}

func cmdContext(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}

// parseKeyFlag parses --key, a region's key as pool create prints it.
func parseKeyFlag(key string) (uint64, error) {
	k, err := bench.ParseKey(key)
	if err != nil {
		return 0, fmt.Errorf("--key %q: want the region's key, a non-zero hexadecimal number such as 0x1f2e3d4c (pool create prints it)", key)
	}
	return k, nil
}
