package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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
