package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ndma/ndma/internal/config"
)

// logFlags are the logging flags every daemon command has.
type logFlags struct {
	level string
	json  bool
}

func (l *logFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn or error")
	fl.BoolVar(&l.json, "json-logs", false, "write logs to stderr as JSON instead of text")
}

// logger builds the daemon's logger writing to w.
func (l *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	switch l.level {
	case "debug":
		level = slog.LevelDebug
	case "info":
		level = slog.LevelInfo
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		return nil, fmt.Errorf("--log-level: %q: want debug, info, warn or error", l.level)
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if l.json {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(h), nil
}

// runUntilSignal runs a daemon until SIGINT or SIGTERM (or the command's
// context ends), then lets run shut it down gracefully.
func runUntilSignal(cmd *cobra.Command, run func(context.Context) error) error {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx)
}

// fieldFlagError rewrites a *FieldError (switchd's, memd's and testbed's
// are one type) to name the flag that sets the Config field, from names;
// other errors, and fields without a flag, pass unchanged.
func fieldFlagError(err error, names map[string]string) error {
	if fe, ok := errors.AsType[*config.FieldError](err); ok {
		if name, ok := names[fe.Field]; ok {
			return fmt.Errorf("%s: %w", name, fe.Err)
		}
	}
	return err
}

// profileFlag is --cpuprofile: a CPU profile of the whole run, for
// `go tool pprof`.
type profileFlag struct{ path string }

func (p *profileFlag) register(fl *pflag.FlagSet) {
	fl.StringVar(&p.path, "cpuprofile", "", "write a CPU profile of the run to `file` (for go tool pprof)")
}

// start starts profiling if asked; stop ends it and writes the file.
func (p *profileFlag) start() (stop func() error, err error) {
	if p.path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(p.path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		return nil
	}, nil
}

// profiled runs f with p's profile around it.
func (p *profileFlag) profiled(f func() error) error {
	stop, err := p.start()
	if err != nil {
		return err
	}
	err = f()
	return errors.Join(err, stop())
}
