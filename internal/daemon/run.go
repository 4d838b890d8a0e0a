package daemon

import (
	"context"
	"errors"
)

// Run blocks until ctx is done, or until the metrics server m fails
// (never, for a nil m), and then calls close. It returns the metrics
// server's error, if that is what ended it, joined with close's; a
// cancelled ctx is not an error. It is what a daemon's Server.Run does.
func Run(ctx context.Context, m *Metrics, close func() error) error {
	var err error
	select {
	case <-ctx.Done():
	case err = <-m.Failed():
	}
	return errors.Join(err, close())
}
