package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/ndma/ndma/bench"
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/memnode/memd"
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
		if k, err = bench.ParseKey(key); err != nil {
			return nil, nil, nil, fmt.Errorf("--key: %w", err)
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
		region, key, offset, stripe string
		replicas                    int
	)
	cmd := &cobra.Command{
		Use:   "put FILE",
		Short: "Write a file into a pool region (a new one sized to the file unless --region is given)",
		Example: `  ndma pool put model.bin                       # new region, prints its id and key
  ndma pool put shard.bin --region 3 --key 0x1f2e... --offset 64MiB`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
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
			} else if key != "" || off != 0 {
				return errors.New("--key and --offset need --region")
			}
			c, r, closeFn, err := pf.openRegion(cmd, id, key)
			if err != nil {
				return err
			}
			defer closeFn()
			created := false
			if r == nil {
				sp, err := memnode.ParseSize(stripe)
				if err != nil || sp <= 0 {
					return fmt.Errorf("--stripe %q: want a positive size (%v)", stripe, err)
				}
				ctx, cancel := context.WithTimeout(cmdContext(cmd), pf.timeout)
				r, err = c.Alloc(ctx, uint64(size), pool.AllocOptions{Stripe: uint64(sp), Replicas: replicas})
				cancel()
				if err != nil {
					return err
				}
				created = true
			}
			if off > r.Size() || size > r.Size()-off {
				return fmt.Errorf("%s (%d bytes) at offset %d does not fit region %d (%d bytes)", args[0], size, off, r.ID(), r.Size())
			}
			start := time.Now()
			degraded := false
			if err := copyChunks(cmdContext(cmd), byteBar(cmd, size, "put"), size, func(ctx context.Context, buf []byte, at int64) error {
				if _, err := io.ReadFull(f, buf); err != nil {
					return err
				}
				_, err := r.WriteAtContext(ctx, buf, off+at)
				if errors.Is(err, pool.ErrDegraded) {
					degraded, err = true, nil // written, to fewer copies
				}
				return err
			}); err != nil {
				return err
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
	return cmd
}

func newPoolGetCmd(pf *poolFlags) *cobra.Command {
	var key, offset, length, output string
	cmd := &cobra.Command{
		Use:     "get REGION --key KEY",
		Short:   "Read a pool region (or part of it) to a file or stdout",
		Example: `  ndma pool get 3 --key 0x1f2e... -o model.bin`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
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
				if err != nil || l < 0 || l > n {
					return fmt.Errorf("--length %q: want a size up to %d (%v)", length, n, err)
				}
				n = l
			}
			var w io.Writer = cmd.OutOrStdout()
			if output != "" && output != "-" {
				f, err := os.Create(output)
				if err != nil {
					return err
				}
				defer f.Close()
				w = f
			}
			start := time.Now()
			if err := copyChunks(cmdContext(cmd), byteBar(cmd, n, "get"), n, func(ctx context.Context, buf []byte, at int64) error {
				if _, err := r.ReadAtContext(ctx, buf, off+at); err != nil {
					return err
				}
				_, err := w.Write(buf)
				return err
			}); err != nil {
				return err
			}
			if f, ok := w.(*os.File); ok && output != "" && output != "-" {
				if err := f.Close(); err != nil {
					return err
				}
				return printTransfer(cmd, pf, r, false, n, time.Since(start))
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&key, "key", "", "the region's key (required)")
	fl.StringVar(&offset, "offset", "0", "pool offset to read from")
	fl.StringVar(&length, "length", "", "bytes to read (default: to the region's end)")
	fl.StringVarP(&output, "output", "o", "", "file to write (default stdout)")
	_ = cmd.MarkFlagRequired("key")
	return cmd
}

// copyChunks calls do for each poolChunk of n bytes in order.
func copyChunks(ctx context.Context, bar *progressbar.ProgressBar, n int64, do func(ctx context.Context, buf []byte, at int64) error) error {
	buf := make([]byte, min(n, poolChunk))
	for at := int64(0); at < n; {
		b := buf[:min(int64(len(buf)), n-at)]
		if err := do(ctx, b, at); err != nil {
			return err
		}
		at += int64(len(b))
		if bar != nil {
			_ = bar.Set64(at)
		}
	}
	if bar != nil {
		_ = bar.Finish()
	}
	return nil
}

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
	if created {
		fmt.Fprintf(out, "region  %d\nkey     %s\nshape   %s\n", r.ID(), memd.FormatKey(r.Key()), poolShape(r.Spec()))
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
