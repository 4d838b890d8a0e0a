// Package daemon holds what the daemons (daemon/switchd, daemon/memd)
// write the same way around their cores: the *FieldError of a bad Config
// field (Fields), the optional Prometheus metrics listener with its
// graceful shutdown (Metrics), the series both export for their UDP socket
// (Series), and the run loop that ends on a cancelled context or a failed
// metrics server (Run). Each daemon keeps its own exported API (Config,
// Server, ErrConfig, FieldError, ShutdownTimeout); this package only saves
// it writing the glue twice.
package daemon
