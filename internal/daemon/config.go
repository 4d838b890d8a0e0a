package daemon

import (
	"fmt"

	"github.com/ndma/ndma/internal/config"
)

// FieldError is config.FieldError, the error of a Config field that is
// invalid or could not be put to use; switchd.FieldError and
// memd.FieldError are this type.
type FieldError = config.FieldError

// Fields makes the *FieldError values of one daemon's Config. Pkg names
// the daemon ("switchd", "memd"): every message starts with it. Sentinel
// is the daemon's ErrConfig, which every invalid value wraps.
type Fields struct {
	Pkg      string
	Sentinel error
}

// Invalid is the error of field holding an invalid value: its cause wraps
// Sentinel and says format, formatted with a ("pkg: Field: invalid value:
// ...").
func (f Fields) Invalid(field, format string, a ...any) *FieldError {
	return config.Invalid(f.Pkg, f.Sentinel, field, format, a...)
}

// InvalidErr is the error of field holding a value that err says is
// invalid: its cause wraps both Sentinel and err ("pkg: Field: invalid
// value: err").
func (f Fields) InvalidErr(field string, err error) *FieldError {
	return &FieldError{Pkg: f.Pkg, Field: field, Err: fmt.Errorf("%w: %w", f.Sentinel, err)}
}

// Unusable is the error of field whose value could not be put to use (an
// address already in use, a file that cannot be read): its cause is err,
// without Sentinel ("pkg: Field: err").
func (f Fields) Unusable(field string, err error) *FieldError {
	return &FieldError{Pkg: f.Pkg, Field: field, Err: err}
}
