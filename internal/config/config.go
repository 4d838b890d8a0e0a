// Package config holds what the daemons' and the testbed's Config
// validation share: FieldError, the error that names the Config field at
// fault. switchd, memd and testbed export it under their own names
// (switchd.FieldError, memd.FieldError, testbed.FieldError are the same
// type), so callers match any of them with errors.As.
package config

import "fmt"

// FieldError is the error of a Config field that is invalid or could not
// be put to use. Pkg is the package whose Config it is ("switchd",
// "memd", "testbed"): the message starts with it. Field is the Config
// field's name, such as "Listen" or "Fault.Drop". Err is the cause.
type FieldError struct {
	Pkg   string
	Field string
	Err   error
}

// Error returns "pkg: Field: cause" ("Field: cause" when Pkg is empty).
func (e *FieldError) Error() string {
	if e.Pkg == "" {
		return fmt.Sprintf("%s: %v", e.Field, e.Err)
	}
	return fmt.Sprintf("%s: %s: %v", e.Pkg, e.Field, e.Err)
}

// Unwrap returns the cause.
func (e *FieldError) Unwrap() error { return e.Err }

// Invalid returns a *FieldError of package pkg for field whose cause
// wraps sentinel (the package's ErrConfig) and says format, formatted
// with a.
func Invalid(pkg string, sentinel error, field, format string, a ...any) *FieldError {
	return &FieldError{Pkg: pkg, Field: field, Err: fmt.Errorf("%w: "+format, append([]any{sentinel}, a...)...)}
}
